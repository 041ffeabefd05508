"""A run dir that cannot lose or double its rows (issue 41 item 4): a damaged line is set aside,
never taking the good rows after it; one run writes a run dir at a time (``run.lock``); a run
that stops on a start-up check or while answering leaves ``failed.json``; ``run/status``.

Runs use the embedded default (``reasoner=retrieval_only``, no LLM), so they are cheap."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, compose_cfg

from kgreason.runner.run import RunFailed, run
from kgreason.runs import LOCK_NAME, PredictionStore, RunDirLocked, damaged_path, lock_run_dir

N = 40
BASE = ["tracking=none", "reports.hop_distribution=false", f"dataset.limit={N}"]


def _run(d: Path, *extra: str):
    return run(compose_cfg([*BASE, *extra], d), d)


def _lines(d: Path) -> list[str]:
    return (d / "predictions.jsonl").read_text().splitlines(keepends=True)


def _ids(d: Path) -> list[str]:
    return [json.loads(x)["id"] for x in _lines(d)]


@pytest.fixture
def finished(tmp_path_factory):
    """A finished run dir, its lines and its metrics.json bytes."""
    d = tmp_path_factory.mktemp("run")
    res = _run(d)
    assert res.metrics["run/status"] == "complete"
    return d, _lines(d), (d / "metrics.json").read_bytes()


# ----------------------------------------------------------------------------- damaged lines

@pytest.mark.parametrize("damage", ["garbage", "half", "not_a_row", "bad_utf8"])
def test_a_damaged_line_in_the_middle_keeps_every_good_row_and_redoes_only_its_example(finished, damage, caplog,
                                                                                          monkeypatch):
    d, lines, reference = finished
    bad_id = json.loads(lines[9])["id"]
    cut = lines[9].index(f'"id": {json.dumps(bad_id)}, ') + 40  # torn just after the row's own id
    broken = {"garbage": "}}not json at all\n", "half": lines[9][:cut] + "\n",
              "not_a_row": "[1, 2, 3]\n", "bad_utf8": None}[damage]
    raw = b"".join(x.encode() for x in lines[:9])
    raw += (b'{"id": "\xff\xfe' + lines[9][9:].encode()) if broken is None else broken.encode()
    raw += b"".join(x.encode() for x in lines[10:])
    (d / "predictions.jsonl").write_bytes(raw)
    (d / "metrics.json").unlink()

    from kgreason.reasoners import retrieval_only

    answered: list[str] = []
    orig = retrieval_only.RetrievalOnly.answer
    monkeypatch.setattr(retrieval_only.RetrievalOnly, "answer", lambda self, ex: answered.append(ex.id) or orig(self, ex))
    with caplog.at_level(logging.WARNING, logger="kgreason"):
        res = _run(d)
    assert len(answered) == 1  # only the damaged line's example is answered again
    if damage in ("garbage", "not_a_row"):
        assert answered == [bad_id]
    after = _lines(d)
    assert after[:9] + after[9:-1] == lines[:9] + lines[10:]  # every good row kept, in its place, unchanged
    assert json.loads(after[-1])["id"] == answered[0]
    assert sorted(_ids(d)) == sorted(json.loads(x)["id"] for x in lines)
    assert (d / "metrics.json").read_bytes() == reference and res.metrics["run/n_examples"] == N
    side = [json.loads(x) for x in damaged_path(d / "predictions.jsonl").read_text().splitlines()]
    assert len(side) == 1 and side[0]["line"] == 10 and side[0]["file"] == "predictions.jsonl"
    assert side[0]["raw"].strip() and side[0]["reason"]
    if damage == "half":
        assert side[0]["id"] == bad_id
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "predictions.damaged.jsonl" in logged and "line 10" in logged


def test_a_torn_last_line_is_set_aside_and_a_complete_one_without_newline_kept(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text('{"id": "a", "x": 1}\n{"id": "b", "x": 2}\n{"id": "c", "x"')
    s = PredictionStore(p)
    assert set(s.rows) == {"a", "b"} and s.damaged[0]["line"] == 3 and "torn" in s.damaged[0]["reason"]
    assert s.damaged[0]["id"] == "c"
    assert p.read_text() == '{"id": "a", "x": 1}\n{"id": "b", "x": 2}\n'
    s.append({"id": "c", "x": 3})
    assert [json.loads(x)["id"] for x in p.read_text().splitlines()] == ["a", "b", "c"]
    # a last row complete but for its newline (killed between the two) is a good row
    p.write_text('{"id": "a", "x": 1}\n{"id": "b", "x": 2}')
    s = PredictionStore(p)
    assert set(s.rows) == {"a", "b"} and not s.damaged and p.read_text().endswith('"x": 2}\n')
    side = damaged_path(p)
    assert [json.loads(x)["id"] for x in side.read_text().splitlines()] == ["c"]  # the first one, once


def test_reading_without_repair_changes_nothing_and_a_repeated_set_aside_is_not_written_twice(tmp_path):
    p = tmp_path / "p.jsonl"
    text = '{"id": "a"}\nxx\n{"id": "b"}\n'
    p.write_text(text)
    s = PredictionStore(p, repair=False)
    assert set(s.rows) == {"a", "b"} and len(s.damaged) == 1 and p.read_text() == text
    assert not damaged_path(p).exists()
    PredictionStore(p)
    p.write_text(text)  # as if the rewrite after the set-aside had not happened (a crash between)
    PredictionStore(p)
    assert len(damaged_path(p).read_text().splitlines()) == 1
    assert p.read_text() == '{"id": "a"}\n{"id": "b"}\n'


def test_a_parseable_line_that_is_not_a_row_is_set_aside_too(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text('{"id": "a", "metrics": {}}\n{"id": "b"}\n"text"\n\x00\x00\x00\n{"id": "c", "metrics": {}}\n')
    s = PredictionStore(p, required=("id", "metrics"))
    assert set(s.rows) == {"a", "c"}
    assert [(d["line"], d["id"]) for d in s.damaged] == [(2, "b"), (3, None), (4, None)]
    assert "without 'metrics'" in s.damaged[0]["reason"]


def test_a_file_system_without_flock_runs_unlocked_with_a_warning(tmp_path, monkeypatch, caplog):
    import fcntl

    def no_flock(fd, op):
        raise OSError(95, "Operation not supported")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    with caplog.at_level(logging.WARNING, logger="kgreason"), lock_run_dir(tmp_path) as held:
        assert held is None and not (tmp_path / LOCK_NAME).exists()
    assert "cannot lock the run dir" in caplog.text


# ----------------------------------------------------------------------------- the run-dir lock

def test_a_second_run_on_a_locked_dir_stops_at_once_and_touches_nothing(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    with lock_run_dir(d):
        t0 = time.monotonic()
        with pytest.raises(RunDirLocked, match=rf"{d} is in use by another run \(pid {os.getpid()} "):
            _run(d)
        assert time.monotonic() - t0 < 30
        assert sorted(p.name for p in d.iterdir()) == [LOCK_NAME]  # no record, no rows, no failed.json
    assert not (d / LOCK_NAME).exists()  # released and removed
    assert _run(d).metrics["run/n_examples"] == N


def test_a_stale_lock_file_of_a_killed_run_does_not_block(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    (d / LOCK_NAME).write_text("pid 999999 on elsewhere, since long ago\n")  # the file only: no lock held
    assert _run(d).metrics["run/n_examples"] == N
    assert not (d / LOCK_NAME).exists()


def test_the_command_line_on_a_locked_dir_says_one_line_exits_2_and_keeps_the_dir(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    (d / "predictions.jsonl").write_text("")
    with lock_run_dir(d):
        p = subprocess.run([sys.executable, "-m", "kgreason", *BASE, f"hydra.run.dir={d}"], cwd=REPO,
                           capture_output=True, text=True, timeout=600)
        assert p.returncode == 2, p.stderr[-2000:]
        err = [x for x in p.stderr.splitlines() if x.strip()]
        assert len(err) == 1 and "is in use by another run" in err[0] and "Traceback" not in p.stderr
        assert (d / LOCK_NAME).exists() and (d / "predictions.jsonl").exists()  # the holder's dir kept
    assert not (d / "fingerprint.json").exists()


@pytest.mark.slow
def test_the_same_command_launched_twice_answers_each_example_once(tmp_path):
    """The issue's case: two launches on one run dir; the second stops with exit 2 while the
    first answers every example exactly once."""
    d, cache = tmp_path / "run", tmp_path / "cache"
    cmd = [sys.executable, "-m", "kgreason", "reasoner=io", "llm=scripted", "llm.delay_s=0.05", *BASE,
           f"llm_cache.dir={cache}", f"hydra.run.dir={d}"]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    first = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300
        while not (d / "fingerprint.json").exists():
            assert first.poll() is None and time.monotonic() < deadline, first.stdout.read()[-3000:]
            time.sleep(0.05)
        # the first run is paused (holding the dir's lock) while the second launches: on a loaded
        # machine the second's start-up could outlast the whole first run (issue 74)
        os.kill(first.pid, signal.SIGSTOP)
        try:
            second = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        finally:
            os.kill(first.pid, signal.SIGCONT)
        assert first.poll() is None, "the first run ended before the second started: nothing was tested"
        out, _ = first.communicate(timeout=600)
    finally:
        if first.poll() is None:
            first.kill()
    assert second.returncode == 2 and "is in use by another run" in second.stderr
    assert first.returncode == 0, out[-3000:]
    ids = _ids(d)
    assert len(ids) == len(set(ids)) == N


# ----------------------------------------------------------------------------- failed.json, run/status

def test_run_failed_leaves_failed_json_and_a_good_resume_removes_it(tmp_path, monkeypatch):
    from kgreason.reasoners import retrieval_only

    orig = retrieval_only.RetrievalOnly.answer

    def flaky(self, ex):
        if ex.id.endswith("3"):
            raise RuntimeError("boom")
        return orig(self, ex)

    monkeypatch.setattr(retrieval_only.RetrievalOnly, "answer", flaky)
    with pytest.raises(RunFailed, match="max_error_rate"):
        _run(tmp_path)
    failed = json.loads((tmp_path / "failed.json").read_text())
    assert failed["status"] == "failed" and failed["stage"] == "run" and "max_error_rate" in failed["reason"]
    assert "\n" not in failed["reason"]
    assert json.loads((tmp_path / "metrics.json").read_text())["run/status"] == "complete"
    monkeypatch.setattr(retrieval_only.RetrievalOnly, "answer", orig)
    assert _run(tmp_path).metrics["run/errors"] == 0  # the errors retried
    assert not (tmp_path / "failed.json").exists()


def test_a_start_up_check_leaves_failed_json_unless_the_dir_holds_a_finished_run(tmp_path):
    from kgreason.preflight import PreflightError

    bad = ["reasoner=io", "llm=openai", "llm.base_url=http://127.0.0.1:9/v1", "llm.api_key_env=null",
           "llm.model=fake", "llm.max_retries=0", "preflight.probe_wait_s=0"]
    d = tmp_path / "fresh"
    with pytest.raises(PreflightError):
        _run(d, *bad)
    failed = json.loads((d / "failed.json").read_text())
    assert failed["stage"] == "startup" and "did not answer" in failed["reason"]
    # a finished run keeps its standing when a later attempt cannot start
    done = tmp_path / "done"
    _run(done)
    with pytest.raises(PreflightError):
        _run(done, *bad)
    assert not (done / "failed.json").exists()


def test_a_refused_resume_writes_no_failed_json(finished):
    from kgreason.record import ResumeConfigMismatch

    d, lines, reference = finished
    with pytest.raises(ResumeConfigMismatch):
        _run(d, "reasoner.max_hops=3")
    assert not (d / "failed.json").exists() and (d / "metrics.json").read_bytes() == reference


def test_a_sweep_job_refused_its_finished_dir_leaves_it_unmarked_and_the_sweep_fails(tmp_path):
    """A sweep launched again into its sweep dir with another config: each job is refused its
    finished dir (another config), which keeps its rows and gets no failed.json (tables would mark
    the good run "(failed)"), and the sweep still ends with exit status 2, naming the refusal."""
    sweep = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "kgreason", "--multirun", *BASE, "dataset.limit=5", f"hydra.sweep.dir={sweep}",
           "hydra.sweep.subdir=${hydra.job.num}"]
    first = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    reference = (sweep / "0" / "metrics.json").read_bytes()
    record = {p.name: p.read_bytes() for p in (sweep / "0" / ".hydra").iterdir()}
    multirun = (sweep / "multirun.yaml").read_bytes()
    again = subprocess.run([*cmd, "reasoner.max_hops=3"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert again.returncode == 2, again.stderr[-3000:]
    assert "was made with another config" in again.stderr and "refused their dir" in again.stderr
    assert not (sweep / "0" / "failed.json").exists() and (sweep / "0" / "metrics.json").read_bytes() == reference
    # Hydra rewrote the job's .hydra/ for the refused launch before kgreason ran: put back as it was
    assert {p.name: p.read_bytes() for p in (sweep / "0" / ".hydra").iterdir()} == record
    # stopped before run() by a check of its own (sweep pre-check off; the default reasoner takes no
    # on_empty): the finished run is left unmarked too, and the sweep fails naming the job
    third = subprocess.run([*cmd, "preflight.sweep=false", "ablation=on_empty_abstain"], cwd=REPO,
                           capture_output=True, text=True, timeout=600)
    assert third.returncode == 2 and "refused their dir" in third.stderr, third.stderr[-3000:]
    assert not (sweep / "0" / "failed.json").exists() and (sweep / "0" / "metrics.json").read_bytes() == reference
    assert {p.name: p.read_bytes() for p in (sweep / "0" / ".hydra").iterdir()} == record
    # every job refused: the sweep's multirun.yaml is still the launch's that made the jobs
    assert (sweep / "multirun.yaml").read_bytes() == multirun
    t = subprocess.run([sys.executable, "-m", "kgreason", "tables", str(sweep), "--metrics", "hits_at_1"],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    assert t.returncode == 0 and "(failed)" not in t.stdout, t.stdout + t.stderr[-2000:]


@pytest.mark.slow
def test_a_sweep_meeting_a_locked_job_dir_stops_at_once(tmp_path):
    """A sweep resumed into its own sweep dir while a job of it still runs: the job whose dir
    is held stops the sweep with one line and exit 2; no job after it starts."""
    sweep = tmp_path / "sweep"
    held = sweep / "0"
    held.mkdir(parents=True)
    with lock_run_dir(held):
        p = subprocess.run([sys.executable, "-m", "kgreason", "--multirun", *BASE, "seed=0,1",
                            f"hydra.sweep.dir={sweep}", "hydra.sweep.subdir=${hydra.job.num}"],
                           cwd=REPO, capture_output=True, text=True, timeout=600)
    assert p.returncode == 2, p.stderr[-3000:]
    assert "is in use by another run" in p.stderr and "Traceback" not in p.stderr
    assert not (sweep / "1").exists() and not (held / "predictions.jsonl").exists()


@pytest.mark.parametrize("stop", [KeyboardInterrupt, RuntimeError])
def test_an_interruption_or_a_crash_after_a_set_aside_keeps_every_row_and_the_resume_is_exact(finished, monkeypatch,
                                                                                              stop):
    """The partial path with the lock and the side file: a dir with a damaged line is resumed,
    stopped half-way (Ctrl-C / an error that escapes the example loop), and resumed again."""
    import kgreason.runner.run as run_module

    d, lines, reference = finished
    (d / "predictions.jsonl").write_text("".join(lines[:5]) + "garbage\n" + "".join(lines[6:20]))
    (d / "metrics.json").unlink()
    orig, seen = run_module.answer_and_score, []

    def answer_and_score(c, ex):
        seen.append(ex.id)
        if len(seen) == 4:
            raise stop("stopped in the test")
        return orig(c, ex)

    monkeypatch.setattr(run_module, "answer_and_score", answer_and_score)
    with pytest.raises(stop):
        _run(d)
    assert not (d / LOCK_NAME).exists()
    kept = _lines(d)
    assert kept[:19] == lines[:5] + lines[6:20] and len(kept) == 19 + 3  # none lost, 3 new
    assert json.loads(damaged_path(d / "predictions.jsonl").read_text())["raw"] == "garbage"
    if stop is KeyboardInterrupt:
        partial = json.loads((d / "metrics.json").read_text())
        assert partial["run/status"] == "partial" and partial["run/n_examples"] == 22
        assert not (d / "failed.json").exists()
    else:
        assert not (d / "metrics.json").exists()
        failed = json.loads((d / "failed.json").read_text())
        assert failed == {"status": "failed", "reason": "stopped in the test", "stage": "run"}
    monkeypatch.setattr(run_module, "answer_and_score", orig)
    _run(d)
    assert (d / "metrics.json").read_bytes() == reference and not (d / "failed.json").exists()
    ids = _ids(d)
    assert len(ids) == len(set(ids)) == N


def test_a_kept_hydra_record_is_this_launchs_only(tmp_path):
    """``.hydra/`` kept before a launch is put back once, and never one an earlier launch in the
    same process kept for a dir that has since been removed (``callbacks.KeepHydraRecord``)."""
    from kgreason.runner.callbacks import keep_hydra_record, restore_hydra_record

    d = tmp_path / "run"
    (d / ".hydra").mkdir(parents=True)
    (d / ".hydra" / "overrides.yaml").write_text("- reasoner=io\n")
    assert keep_hydra_record(d)
    (d / ".hydra" / "overrides.yaml").write_text("- reasoner=cot\n")  # what Hydra writes for the next launch
    (d / ".hydra" / "hydra.yaml").write_text("x: 1\n")
    assert restore_hydra_record(d)
    assert sorted(p.name for p in (d / ".hydra").iterdir()) == ["overrides.yaml"]
    assert (d / ".hydra" / "overrides.yaml").read_text() == "- reasoner=io\n"
    assert not restore_hydra_record(d)  # once
    assert keep_hydra_record(d)
    shutil.rmtree(d)  # the dir removed, then made again by a new launch
    assert not keep_hydra_record(d)
    (d / ".hydra").mkdir(parents=True)
    (d / ".hydra" / "overrides.yaml").write_text("- reasoner=rag\n")
    assert not restore_hydra_record(d)
    assert (d / ".hydra" / "overrides.yaml").read_text() == "- reasoner=rag\n"
