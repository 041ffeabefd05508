"""A resume that keeps its promise (issue 18): after ``kill -9`` at any point, with one or eight
example workers, the resumed run's ``metrics.json`` equals an uninterrupted run's byte for byte,
``llm/*`` counts included (the calls of examples in flight at the kill were cached but their rows
never written: the cache entry names the run and example that paid, docs/llm.md); a resumed dir
refuses another config; under load (16 workers, an endpoint failing 20 % of requests) no
example is lost or duplicated and the metrics equal a clean run's.

The runs use ``reasoner=io`` with the scripted LLM: its empty reply does not parse, so every
example makes two calls (the answer and one re-ask), and a kill can fall between them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, compose_cfg

from kgreason.bench.llm import FakeChatServer
from kgreason.record import ResumeConfigMismatch
from kgreason.runner.run import run

N = 40


def _overrides(cache: Path, workers: int, delay_s: float) -> list[str]:
    return ["reasoner=io", "llm=scripted", f"llm.delay_s={delay_s}", "tracking=none",
            "reports.hop_distribution=false", f"dataset.limit={N}", f"example_workers={workers}",
            f"llm_cache.dir={cache}"]


def _reference(tmp_path: Path, workers: int) -> bytes:
    d = tmp_path / "reference"
    res = run(compose_cfg(_overrides(tmp_path / "ref_cache", workers, 0.0), d), d)
    assert res.metrics["run/n_examples"] == N and res.metrics["llm/calls"] == 2 * N
    return (d / "metrics.json").read_bytes()


def _rows(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def _kill_at(tmp_path: Path, run_dir: Path, cache: Path, workers: int, delay_s: float, rows: int) -> int:
    """Start ``python -m kgreason``, SIGKILL it once ``rows`` rows are written (``rows=0``: 0.3 s
    after its run dir is fingerprinted, before any row); returns the rows it left."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "kgreason", *_overrides(cache, workers, delay_s), f"hydra.run.dir={run_dir}"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    pred = run_dir / "predictions.jsonl"
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError(f"run ended before the kill ({proc.returncode}): {proc.stdout.read()[-3000:]}")
            if rows == 0 and (run_dir / "fingerprint.json").exists():
                time.sleep(0.3)
                break
            if rows and _rows(pred) >= rows:
                break
            time.sleep(0.02)
        proc.kill()  # SIGKILL: no cleanup runs
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()
    left = _rows(pred)
    assert left < N, "the run finished before the kill: nothing was tested"
    return left


def _resume(run_dir: Path, cache: Path, workers: int, delay_s: float) -> bytes:
    res = run(compose_cfg(_overrides(cache, workers, delay_s), run_dir), run_dir)
    ids = [json.loads(x)["id"] for x in (run_dir / "predictions.jsonl").read_text().splitlines()]
    assert len(ids) == len(set(ids)) == N == res.metrics["run/n_examples"]  # none lost, none twice
    return (run_dir / "metrics.json").read_bytes()


@pytest.mark.parametrize("workers, delay_s, rows", [
    (8, 0.1, 9),
    pytest.param(1, 0.05, 0, marks=pytest.mark.slow),
    pytest.param(1, 0.05, 17, marks=pytest.mark.slow),
    pytest.param(8, 0.1, 0, marks=pytest.mark.slow),
    pytest.param(8, 0.1, 25, marks=pytest.mark.slow),
])
def test_kill_9_then_resume_gives_the_uninterrupted_metrics_byte_for_byte(tmp_path, workers, delay_s, rows):
    reference = _reference(tmp_path, workers)
    run_dir, cache = tmp_path / "killed", tmp_path / "cache"
    _kill_at(tmp_path, run_dir, cache, workers, delay_s, rows)
    resumed = _resume(run_dir, cache, workers, delay_s)
    assert resumed == reference, (json.loads(resumed), json.loads(reference))


@pytest.mark.slow
def test_killed_twice_then_resumed_with_other_workers(tmp_path):
    """Two kills, then a resume with another worker count (not part of the fingerprint)."""
    reference = _reference(tmp_path, 1)
    run_dir, cache = tmp_path / "killed", tmp_path / "cache"
    first = _kill_at(tmp_path, run_dir, cache, 8, 0.1, 5)
    _kill_at(tmp_path, run_dir, cache, 8, 0.1, first + 8)
    assert _resume(run_dir, cache, 1, 0.1) == reference


def test_a_second_run_dir_replaying_the_cache_counts_hits_not_calls(tmp_path):
    """The cache entries name the run dir that paid: another dir with the same config replays
    them as hits (what it spent), while its token counts stay those of the method."""
    cache = tmp_path / "cache"
    a = run(compose_cfg(_overrides(cache, 1, 0.0), tmp_path / "a"), tmp_path / "a").metrics
    b = run(compose_cfg(_overrides(cache, 1, 0.0), tmp_path / "b"), tmp_path / "b").metrics
    assert a["llm/calls"] == 2 * N and a["llm/cache_hits"] == 0
    assert b["llm/calls"] == 0 and b["llm/cache_hits"] == 2 * N
    assert b["llm/tokens_per_question"] == a["llm/tokens_per_question"]
    # the method's requests per question, answered by the model or the cache (issue 30 item 5:
    # the replay used to report 0.0)
    assert a["llm/calls_per_question"] == b["llm/calls_per_question"] == 2.0


def test_calls_and_tokens_per_question_do_not_depend_on_the_cache(tmp_path):
    """The same config with the call cache off, on a fresh cache and on the warm one reports the
    same llm/calls_per_question and llm/tokens_per_question; llm/calls says what each sent."""
    base = [o for o in _overrides(tmp_path / "cache", 1, 0.0) if not o.startswith("dataset.limit")] + \
        ["dataset.limit=6"]
    off = run(compose_cfg([*base, "llm_cache.mode=off"], tmp_path / "off"), tmp_path / "off").metrics
    fresh = run(compose_cfg(base, tmp_path / "fresh"), tmp_path / "fresh").metrics
    warm = run(compose_cfg(base, tmp_path / "warm"), tmp_path / "warm").metrics
    for k in ("llm/calls_per_question", "llm/tokens_per_question"):
        assert off[k] == fresh[k] == warm[k], k
    assert off["llm/calls_per_question"] == 2.0 and off["llm/tokens_per_question"] > 0
    assert (off["llm/calls"], fresh["llm/calls"], warm["llm/calls"]) == (12, 12, 0)
    assert warm["llm/cache_hits"] == 12


def test_resume_after_rows_were_lost_reports_the_uninterrupted_counts(tmp_path):
    """A run whose last rows were lost after their calls were cached (what a kill between the
    calls and the row leaves) and then resumed writes the uninterrupted run's metrics.json."""
    cache, d = tmp_path / "cache", tmp_path / "run"
    ov = [o for o in _overrides(cache, 1, 0.0) if not o.startswith("dataset.limit")] + ["dataset.limit=8"]
    run(compose_cfg(ov, d), d)
    reference = (d / "metrics.json").read_bytes()
    pred = d / "predictions.jsonl"
    pred.write_text("".join(x + "\n" for x in pred.read_text().splitlines()[:5]))
    (d / "metrics.json").unlink()
    res = run(compose_cfg(ov, d), d)
    assert (d / "metrics.json").read_bytes() == reference
    assert res.metrics["llm/calls"] == 16 and res.metrics["llm/calls_per_question"] == 2.0


def test_resume_with_another_config_refuses_and_keeps_the_record(tmp_path):
    cfg = ["tracking=none", "reports.hop_distribution=false", "dataset.limit=5"]
    run(compose_cfg(cfg, tmp_path), tmp_path)
    before = {n: (tmp_path / n).read_bytes() for n in ("config.yaml", "run.json", "predictions.jsonl")}
    with pytest.raises(ResumeConfigMismatch, match=r"reasoner.max_hops: 2 -> 3"):
        run(compose_cfg([*cfg, "reasoner.max_hops=3"], tmp_path), tmp_path)
    assert {n: (tmp_path / n).read_bytes() for n in before} == before  # the dir's record is intact
    res = run(compose_cfg([*cfg, "reasoner.max_hops=3", "resume_allow_changes=true"], tmp_path), tmp_path)
    assert res.metrics["run/n_examples"] == 5
    hist = json.loads((tmp_path / "fingerprint.json").read_text())["history"]
    assert hist[-1]["changed"] == ["reasoner.max_hops"]


def _load_faults(n: int) -> list[tuple]:
    """Every fifth request fails (500 or 503), the others are delayed a little, in arrival order."""
    out: list[tuple] = []
    for i in range(n):
        out.append(("500",) if i % 10 == 4 else ("503",) if i % 10 == 9 else ("slow", 0.005 * (i % 4)))
    return out


def _http(url: str, workers: int) -> list[str]:
    return ["reasoner=io", "llm=openai", f"llm.base_url={url}", "llm.api_key_env=null", "llm.model=fake",
            "llm.max_retries=8", "llm.backoff_base_s=0.005", "llm.backoff_max_s=0.02", "tracking=none",
            "reports.hop_distribution=false", "dataset.limit=60", f"example_workers={workers}",
            "llm_cache.mode=off", "preflight.probe_llm=false"]


def test_sixteen_workers_on_a_failing_endpoint_lose_and_duplicate_nothing(tmp_path):
    with FakeChatServer() as srv:
        clean = run(compose_cfg(_http(srv.base_url, 1), tmp_path / "clean"), tmp_path / "clean")
    with FakeChatServer(latency_s=0.01, faults=_load_faults(2000)) as srv:
        loaded = run(compose_cfg(_http(srv.base_url, 16), tmp_path / "load"), tmp_path / "load")
        failed = sum(1 for i in range(len(srv.requests)) if i % 5 == 4)
        assert srv.max_in_flight > 1 and failed > 10  # concurrent, and the faults were met
    rows = [json.loads(x) for x in (tmp_path / "load" / "predictions.jsonl").read_text().splitlines()]
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)) == 60 and not any(r["error"] for r in rows)
    assert (tmp_path / "load" / "metrics.json").read_bytes() == (tmp_path / "clean" / "metrics.json").read_bytes()
    assert clean.metrics == loaded.metrics


def test_readers_take_the_last_row_per_id(tmp_path):
    """A retried example has two lines: `kgreason score` and `kgreason tables` read the last."""
    from kgreason.runs import last_rows
    from kgreason.score import read_pairs, score
    from kgreason.tables import _failure_reason

    lines = [{"id": "a", "prediction": "", "answers": ["x"], "error": "LLMError: down"},
             {"id": "b", "prediction": "y", "answers": ["y"], "error": None},
             {"id": "a", "prediction": "x", "answers": ["x"], "error": None}]
    (tmp_path / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert [r["prediction"] for r in last_rows(lines)] == ["x", "y"]  # a keeps its first place
    pairs = read_pairs(tmp_path / "predictions.jsonl")
    assert [p.answers for p, _ in pairs] == [("x",), ("y",)]
    assert score(pairs, ["hits_at_1"]) == {"hits_at_1": 1.0}
    assert _failure_reason(tmp_path) == "no metrics.json (run interrupted?)"  # no error left
    assert score([], ["hits_at_1"]) == {"hits_at_1": None}  # valid JSON, never NaN


def _sigterm_once(cmd: list[str], env: dict[str, str], ready) -> tuple[int, str]:
    """Start ``cmd`` (a ``python -m kgreason`` run), send it SIGTERM once ``ready()`` holds, and
    return its exit status and output. Fails if the run ends first."""
    import signal

    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not ready():
            assert proc.poll() is None, proc.stdout.read()[-3000:]
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, out


def test_sigterm_logs_writes_partial_metrics_and_resume_is_exact(tmp_path):
    """Issue #32 item 6: SIGTERM (a scheduler's stop, ``kill``) is handled as Ctrl-C: resources
    closed, the interruption and the resume command logged, metrics.json written for the rows done
    (``run/partial: true``), a non-zero exit; the resumed run's metrics equal an uninterrupted one's."""
    import signal

    reference = _reference(tmp_path, 1)
    run_dir, cache = tmp_path / "terminated", tmp_path / "cache"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "kgreason", *_overrides(cache, 1, 0.05), f"hydra.run.dir={run_dir}"]
    pred = run_dir / "predictions.jsonl"
    rc, out = _sigterm_once(cmd, env, lambda: _rows(pred) >= 5)
    assert rc == 128 + signal.SIGTERM, out[-3000:]
    done = _rows(pred)
    assert 5 <= done < N, "the run finished before SIGTERM: nothing was tested"
    assert "interrupted by SIGTERM" in out and f"{done} of {N} examples" in out, out[-3000:]
    assert f"kept in {run_dir} " in out and "The same command goes on." in out  # the dir, and how to go on
    partial = json.loads((run_dir / "metrics.json").read_text())
    assert partial["run/partial"] is True and partial["run/n_examples"] == done and partial["run/n_expected"] == N
    assert partial["run/interrupted_by"] == "SIGTERM" and partial["run/status"] == "partial"
    assert not (run_dir / "run.lock").exists() and not (run_dir / "failed.json").exists()  # lock released
    assert _resume(run_dir, cache, 1, 0.05) == reference


def test_sigterm_in_the_set_up_says_how_far_it_got_and_the_resume_finishes_it(tmp_path):
    """A run stopped while preparing (SubQRAG's offline index, hours on a CPU) says so: the log
    names the indexed passages and the resume command, ``prepare_stopped.json`` keeps the same
    for the tools that sum up sittings, the progress line ends "(stopped)", not "(done)", and no
    metrics.json or failed.json is written. The resume indexes only what is left, removes the
    marker, and its metrics count every indexing call once."""
    import signal

    from kgreason.tables import _failure_reason

    n_passages = 40
    data = tmp_path / "hotpot.jsonl"
    recs = [{"_id": f"q{q}", "question": f"Where was person {q} born?", "answer": "Riverton", "supporting_facts": [],
             "context": [[f"Passage {q}-{i}", [f"Person {q} met person {i} in town {i}."]]
                         for i in range(n_passages // 2)]} for q in range(2)]
    data.write_text("".join(json.dumps(r) + "\n" for r in recs))
    run_dir, idx = tmp_path / "run", tmp_path / "idx"
    over = ["reasoner=subqrag", "dataset=hotpotqa", f"dataset.path={data}", "llm=scripted", "llm.delay_s=0.1",
            "tracking=none", "reports.hop_distribution=false", f"reasoner.index_dir={idx}",
            f"llm_cache.dir={tmp_path / 'calls'}", f"embedder.cache_dir={tmp_path / 'emb'}"]
    env = dict(os.environ, PYTHONUNBUFFERED="1", KGREASON_PROGRESS="log", KGREASON_PROGRESS_INTERVAL="0.2")
    cmd = [sys.executable, "-m", "kgreason", *over, f"hydra.run.dir={run_dir}"]
    rc, out = _sigterm_once(cmd, env, lambda: sum(_rows(f) for f in idx.glob("*/extractions.jsonl")) >= 8)
    assert rc == 128 + signal.SIGTERM, out[-3000:]
    indexed = _rows(next(idx.glob("*/extractions.jsonl")))
    assert 8 <= indexed < n_passages, "the index finished before SIGTERM: nothing was tested"
    stopped = json.loads((run_dir / "prepare_stopped.json").read_text())
    assert stopped["stage"] == "prepare" and stopped["interrupted_by"] == "SIGTERM"
    assert (stopped["examples_done"], stopped["n_expected"]) == (0, 2)
    assert stopped["progress"] == {"what": "SubQRAG indexing", "done": indexed, "total": n_passages,
                                   "unit": "passage"}
    assert f"SubQRAG indexing: {indexed} of {n_passages} passage done" in out, out[-3000:]
    assert "interrupted by SIGTERM while preparing" in out and f"answered in {run_dir};" in out
    assert "The same command goes on." in out
    assert f"SubQRAG indexing: {indexed}/{n_passages} passage" in out and "(stopped)" in out
    assert not (run_dir / "metrics.json").exists() and not (run_dir / "failed.json").exists()
    assert not (run_dir / "run.lock").exists()
    assert _failure_reason(run_dir) == (f"stopped by SIGTERM while preparing (SubQRAG indexing: {indexed} of "
                                        f"{n_passages} passage), before its examples; the same command resumes it")

    res = run(compose_cfg(over, run_dir), run_dir)
    assert res.metrics["run/n_examples"] == 2 and res.metrics["llm/index/calls"] == n_passages
    assert _rows(next(idx.glob("*/extractions.jsonl"))) == n_passages
    assert not (run_dir / "prepare_stopped.json").exists()


def test_sigterm_as_the_run_sums_up_leaves_complete_metrics_then_stops(tmp_path, monkeypatch, caplog):
    """A SIGTERM that comes after the last example, while the run computes its metrics (a
    ``--stop-at`` at the row's last question, a scheduler's time limit), waits until metrics.json
    is written in full, then stops the run as a SIGTERM does (RunInterrupted: exit 143), saying so
    in one line. Before, it stopped the summing up at once: no metrics.json for a run whose every
    example was answered."""
    import logging
    import signal

    import kgreason.runner.run as run_mod
    from kgreason.runner.run import RunInterrupted

    original = run_mod._run_metrics

    def terminated_while_summing_up(*a, **k):
        os.kill(os.getpid(), signal.SIGTERM)  # delivered at once in this (the main) thread
        time.sleep(0.05)
        return original(*a, **k)

    monkeypatch.setattr(run_mod, "_run_metrics", terminated_while_summing_up)
    d, handler = tmp_path / "run", signal.getsignal(signal.SIGTERM)
    over = ["reasoner=io", "llm=scripted", "tracking=none", "reports.hop_distribution=false", "dataset.limit=3",
            f"llm_cache.dir={tmp_path / 'cache'}"]
    with caplog.at_level(logging.WARNING, logger="kgreason"), pytest.raises(RunInterrupted):
        run(compose_cfg(over, d), d)
    m = json.loads((d / "metrics.json").read_text())
    assert m["run/n_examples"] == 3 and m.get("run/partial") is not True and m["run/status"] != "partial"
    assert "run stopped by SIGTERM as it summed up: all 3 examples are answered and metrics.json is complete" in caplog.text
    assert signal.getsignal(signal.SIGTERM) == handler  # the handler before the run is back
