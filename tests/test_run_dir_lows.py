"""The run dir's low-severity holes of issue 57 (L4, L7, L9-L13), each reproduced on a real
``kgreason`` process or the run dir's own I/O, with the fix's promise: a lock file is never
written through a link, a retry never leaves stale complete metrics, start-up and disk errors are
one line, a refused start deletes only what it made, Hydra's own names never write outside the
run dir, the printed resume command works in bash, and a row of the wrong shape is set aside on
resume with a line naming the file and the line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, compose_cfg
from test_resume import _sigterm_once

from kgreason.runner.run import run
from kgreason.runs import RunDirLocked, lock_run_dir

BASE = ["reasoner=io", "llm=scripted", "tracking=none", "reports.hop_distribution=false"]


def _kgreason(*args: str, env: dict[str, str] | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kgreason", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=env)


def _one_error_line(p: subprocess.CompletedProcess) -> str:
    err = [ln for ln in p.stderr.splitlines() if ln.strip() and not ln.startswith("(nothing was run")]
    assert p.returncode == 2 and "Traceback" not in p.stderr and len(err) == 1, p.stderr[-3000:]
    assert err[0].startswith("kgreason: error:"), err
    return err[0]


# ---------------------------------------------------------------- L4: run.lock planted as a link
def test_a_lock_file_planted_as_a_link_is_refused_and_its_target_untouched(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    d = tmp_path / "run"
    d.mkdir()
    (d / "run.lock").symlink_to(victim)
    with pytest.raises(RunDirLocked) as e:
        with lock_run_dir(d):
            pass
    assert "run.lock" in str(e.value) and "\n" not in str(e.value)
    assert victim.read_text() == "precious\n" and (d / "run.lock").is_symlink()


def test_a_lock_path_that_is_not_a_file_is_refused_in_one_line(tmp_path):
    d = tmp_path / "run"
    (d / "run.lock").mkdir(parents=True)
    p = _kgreason(*BASE, "dataset.limit=2", f"hydra.run.dir={d}")
    line = _one_error_line(p)
    assert "run.lock" in line and "not a regular file" in line, line


# ---------------------------------------------------------------- L7: a killed retry and the old metrics.json
def test_a_retry_killed_with_sigkill_never_leaves_the_old_complete_metrics(tmp_path):
    from kgreason.tables import gather

    d = tmp_path / "run"
    over = [*BASE, "dataset.limit=4", f"llm_cache.dir={tmp_path / 'cache'}"]
    run(compose_cfg(over, d), d)
    assert json.loads((d / "metrics.json").read_text())["run/status"] == "complete"
    lines = (d / "predictions.jsonl").read_text().splitlines()
    row = json.loads(lines[-1])
    row["error"] = "LLMError: the endpoint went away"  # to be retried (retry_errors=true)
    (d / "predictions.jsonl").write_text("\n".join([*lines[:-1], json.dumps(row)]) + "\n")
    env = dict(os.environ, KGREASON_PROGRESS="log", KGREASON_PROGRESS_INTERVAL="0.1")
    proc = subprocess.Popen([sys.executable, "-m", "kgreason", *over, "llm.delay_s=30", f"llm_cache.dir={tmp_path / 'fresh'}",
                             f"hydra.run.dir={d}"],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # the retry is answering: its one call (sleeping 30 s) is in flight, which the run's progress
        # line says; waited for with a deadline, not a fixed 2 s a loaded machine can outlast (issue 74)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            assert proc.poll() is None
            log = d / "run.log"
            if log.is_file() and "llm_in_flight=1" in log.read_text(errors="replace"):
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the retry never had its call in flight")
        proc.kill()
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert len((d / "predictions.jsonl").read_text().splitlines()) == 4  # the retry's row never came
    m = json.loads((d / "metrics.json").read_text())
    assert m["run/status"] == "partial" and m["run/partial"] is True
    job = next(iter(gather(d).jobs.values()))
    assert job.partial  # tables mark it, never show it as complete with stale numbers


# ---------------------------------------------------------------- L9: start-up and I/O errors in one line
def test_a_run_dir_that_cannot_be_made_is_one_line(tmp_path):
    f = tmp_path / "a_file"
    f.write_text("")
    line = _one_error_line(_kgreason(*BASE, "dataset.limit=2", f"hydra.run.dir={f / 'sub'}"))
    assert str(f) in line and "not a folder" in line, line


def test_a_full_disk_while_writing_rows_is_one_line(tmp_path):
    """The disk fills after two rows (ENOSPC from the row writer, injected in a real process)."""
    d = tmp_path / "run"
    code = ("import errno, sys\n"
            "import kgreason.runs as r\n"
            "orig = r.PredictionStore.append\n"
            "def full(self, row):\n"
            "    if len(self.rows) >= 2:\n"
            "        raise OSError(errno.ENOSPC, 'No space left on device', str(self.path))\n"
            "    orig(self, row)\n"
            "r.PredictionStore.append = full\n"
            "from kgreason.cli import main\n"
            "sys.argv = ['kgreason', *sys.argv[1:]]\n"
            "main()\n")
    p = subprocess.run([sys.executable, "-c", code, *BASE, "dataset.limit=4", f"hydra.run.dir={d}"], cwd=REPO,
                       capture_output=True, text=True, timeout=300)
    line = _one_error_line(p)
    assert "No space left on device" in line and "predictions.jsonl" in line, line


def test_a_config_file_that_is_not_yaml_is_one_line_naming_file_and_line(tmp_path):
    (tmp_path / "cd" / "local").mkdir(parents=True)
    bad = tmp_path / "cd" / "local" / "default.yaml"
    bad.write_text("a: 1\nb: [1, 2\n")
    line = _one_error_line(_kgreason("--config-dir", str(tmp_path / "cd"), *BASE, "dataset.limit=2",
                                     f"hydra.run.dir={tmp_path / 'run'}"))
    assert f"{bad}:3:1: invalid YAML" in line, line
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------- L10: a refused start deletes only what it made
@pytest.mark.parametrize("kept", ["wandb", "run.log", ".hydra", "failed.json"])
def test_a_refused_start_keeps_an_existing_folder_and_what_it_held(tmp_path, kept):
    d = tmp_path / "run"
    if kept in ("wandb", ".hydra"):
        (d / kept).mkdir(parents=True)
        (d / kept / "keep.txt").write_text("mine")
    else:
        d.mkdir()
        (d / kept).write_text("mine\n")
    p = _kgreason(*BASE, "dataset.limit=2", "seed=-1", f"hydra.run.dir={d}")  # refused at the start-up checks
    assert p.returncode == 2 and "Traceback" not in p.stderr and "seed=-1" in p.stderr, p.stderr
    assert d.is_dir() and (d / kept).exists()
    if kept in ("wandb", ".hydra"):
        assert (d / kept / "keep.txt").read_text() == "mine"
    elif kept == "run.log":
        assert (d / kept).read_text().startswith("mine")  # this launch's lines are appended to it
    # failed.json: the marker now names this launch's failure (the same kind of record), never removed


def test_a_refused_start_still_removes_the_new_dir_it_made(tmp_path):
    d = tmp_path / "new"
    p = _kgreason(*BASE, "dataset.limit=2", "seed=-1", f"hydra.run.dir={d}")
    assert p.returncode == 2 and "Traceback" not in p.stderr and "no run dir kept" in p.stderr, p.stderr
    assert not d.exists()


def test_a_refused_start_in_the_default_layout_leaves_no_empty_day_folder(tmp_path):
    """The default run dir is <output>/runs/<day>/<time>_...: a refused start removes the run dir and
    the day (and runs) folder it leaves empty, so `ls outputs/runs` shows no empty day."""
    import os

    out = tmp_path / "out"
    (out / "keep").mkdir(parents=True)
    p = _kgreason(*BASE, "dataset.limit=2", "seed=-1", env={**os.environ, "KGREASON_OUTPUT": str(out)})
    assert p.returncode == 2 and "no run dir kept" in p.stderr, p.stderr
    assert sorted(x.name for x in out.iterdir()) == ["keep"]  # no runs/<day>/ left, the user's folder stays


# ---------------------------------------------------------------- L11: Hydra's names never write outside the run dir
@pytest.mark.parametrize("override", ["hydra.job.name=../../escaped", "hydra.output_subdir=../../escaped"])
def test_hydra_names_with_dot_dot_are_refused_before_anything_is_written(tmp_path, override):
    d = tmp_path / "a" / "b" / "run"
    line = _one_error_line(_kgreason(*BASE, "dataset.limit=2", override, f"hydra.run.dir={d}"))
    assert override.split("=")[0] in line, line
    assert not (tmp_path / "a").exists() and not list(tmp_path.rglob("escaped*"))


def test_hydra_names_with_dot_dot_are_refused_for_a_sweep_too(tmp_path):
    sweep = tmp_path / "s" / "t" / "sweep"
    p = _kgreason("--multirun", *BASE, "dataset.limit=2", "seed=0,1", "hydra.job.name=../../../escaped",
                  f"hydra.sweep.dir={sweep}")
    _one_error_line(p)
    assert not list(tmp_path.rglob("escaped*"))


# ---------------------------------------------------------------- L12: the same command goes on, whatever the dir's name
def test_the_same_command_goes_on_in_a_dir_whose_name_needs_quoting(tmp_path):
    """The interruption line once printed a resume command (quoted for Hydra and bash); it now
    says the same command goes on (issue 74: a 600-character line), which must hold for a dir
    whose name holds spaces, commas, ``=``, quotes and braces."""
    from kgreason.paths import hydra_quote

    d = tmp_path / "my runs, a=b" / "it's {here}"
    env = dict(os.environ, PYTHONUNBUFFERED="1", KGREASON_PROGRESS="off",
               PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    cmd = [sys.executable, "-m", "kgreason", *BASE, "llm.delay_s=0.05", "dataset.limit=20",
           f"llm_cache.dir={tmp_path / 'cache'}", f"hydra.run.dir={hydra_quote(str(d))}"]
    pred = d / "predictions.jsonl"
    rc, out = _sigterm_once(cmd, env, lambda: pred.exists() and len(pred.read_text().splitlines()) >= 3)
    assert rc == 143, out
    assert re.search(r"kept in .*it's \{here\} \(metrics.json marked partial\)\. The same command goes on\.$", out,
                     re.M), out[-2000:]
    again = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    m = json.loads((d / "metrics.json").read_text())
    assert m["run/status"] == "complete" and m["run/n_examples"] == 20


@pytest.mark.parametrize("value", ["plain/dir", "a b", "a,b", "a=b", "it's", 'say "hi"', "x\\'y", "${oops}", "[1]", "a\\b", "end\\"])
def test_hydra_quote_round_trips_through_hydras_parser(value):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from kgreason.paths import hydra_quote

    from omegaconf import OmegaConf

    [o] = OverridesParser.create().parse_overrides([f"hydra.run.dir={hydra_quote(value)}"])
    assert OmegaConf.create({"v": o.value()}).v == value  # as the config holds it (an escaped ${ is text)


# ---------------------------------------------------------------- L13: a row of the wrong shape on resume
@pytest.mark.parametrize("bad", [[1, 0], "1.0", None, {"hits_at_1": "yes"}])
def test_a_row_whose_metrics_is_not_an_object_is_set_aside_on_resume_naming_file_and_line(tmp_path, bad, caplog):
    d = tmp_path / "run"
    over = [*BASE, "dataset.limit=4", f"llm_cache.dir={tmp_path / 'cache'}"]
    run(compose_cfg(over, d), d)
    lines = (d / "predictions.jsonl").read_text().splitlines()
    row = json.loads(lines[2])
    row["metrics"] = bad
    lines[2] = json.dumps(row)
    (d / "predictions.jsonl").write_text("\n".join(lines) + "\n")
    (d / "metrics.json").unlink()
    with caplog.at_level("WARNING", logger="kgreason"):
        res = run(compose_cfg(over, d), d)
    assert res.metrics["run/n_examples"] == 4 and res.metrics["run/status"] == "complete"
    assert any("predictions.jsonl" in r.getMessage() and "line 3" in r.getMessage() and "metrics" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]
    side = [json.loads(x) for x in (d / "predictions.damaged.jsonl").read_text().splitlines()]
    assert side[0]["line"] == 3 and side[0]["id"] == row["id"]
