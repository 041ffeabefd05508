"""Stop and go on (issue 59 item 1): Ctrl-C / SIGTERM end a run with one line and exit 130 / 143
(no traceback unless ``--debug``); the same command again goes on with the latest unfinished run
of the same configuration; ``kgreason tables`` on the day folder keeps the newest complete run of
identical configurations and lists the others as superseded."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import REPO
from test_resume import _sigterm_once

N = 30


def _cmd(cache: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "kgreason", "reasoner=io", "llm=scripted", "llm.delay_s=0.05", "tracking=none",
            "reports.hop_distribution=false", f"dataset.limit={N}", f"llm_cache.dir={cache}", *extra]


def _env(out: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONUNBUFFERED="1", KGREASON_OUTPUT=str(out), KGREASON_PROGRESS="off")


def _rows(root: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in root.glob("runs/*/*/predictions.jsonl"))


def _interrupt(cmd: list[str], env: dict[str, str], out: Path, sig: int) -> tuple[int, str, str]:
    """Start ``cmd``; once 5 rows are written send ``sig``; return (exit status, output before the
    signal, output after it)."""
    import threading

    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and _rows(out) < 5:
            assert proc.poll() is None, "".join(lines)
            time.sleep(0.02)
        time.sleep(0.3)  # what the run printed before the signal has reached the reader
        n = len(lines)
        proc.send_signal(sig)
        proc.wait(timeout=120)
        reader.join(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    before, after = lines[:n], lines[n:]
    return proc.returncode, "".join(before), "".join(after)


def test_ctrl_c_then_the_same_command_finishes_the_run_and_tables_give_one_row(tmp_path):
    out, cache = tmp_path / "outputs", tmp_path / "cache"
    env = _env(out)
    rc, before, after = _interrupt(_cmd(cache), env, out, signal.SIGINT)
    lines = [ln for ln in after.splitlines() if ln.strip()]
    assert rc == 130, before + after
    assert 1 <= len(lines) <= 3, after
    assert "Traceback" not in after and "KeyboardInterrupt" not in after, after
    assert "interrupted by SIGINT" in after and "The same command goes on" in after, after
    [first] = list(out.glob("runs/*/*"))
    done = len((first / "predictions.jsonl").read_text().splitlines())
    assert 5 <= done < N, "the run finished before the signal: nothing was tested"

    time.sleep(1.1)  # the default run dir is named by the second it starts: the same command gets a new name
    again = subprocess.run(_cmd(cache), cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "going on with the unfinished run" in again.stderr and str(first) in again.stderr, again.stderr
    assert list(out.glob("runs/*/*")) == [first]  # no second dir, no orphan
    ids = [json.loads(x)["id"] for x in (first / "predictions.jsonl").read_text().splitlines()]
    assert len(ids) == len(set(ids)) == N  # none answered twice
    m = json.loads((first / "metrics.json").read_text())
    assert m["run/status"] == "complete" and m["run/n_examples"] == N

    [day] = list(out.glob("runs/*"))
    tab = subprocess.run([sys.executable, "-m", "kgreason", "tables", str(day)], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=300)
    assert tab.returncode == 0, tab.stderr
    body = [ln for ln in (day / "results.md").read_text().splitlines() if ln.startswith("| io")]
    assert len(body) == 1, (day / "results.md").read_text()


def test_sigterm_prints_one_line_and_exits_143_without_a_traceback(tmp_path):
    out, cache = tmp_path / "outputs", tmp_path / "cache"
    rc, before, after = _interrupt(_cmd(cache), _env(out), out, signal.SIGTERM)
    lines = [ln for ln in after.splitlines() if ln.strip()]
    assert rc == 143 and 1 <= len(lines) <= 3 and "Traceback" not in after, before + after


def test_resume_false_starts_a_new_dir_beside_an_unfinished_one(tmp_path):
    out, cache = tmp_path / "outputs", tmp_path / "cache"
    env = _env(out)
    rc, _, after = _interrupt(_cmd(cache), env, out, signal.SIGINT)
    assert rc == 130, after
    time.sleep(1.1)
    new = subprocess.run(_cmd(cache, "resume=false", "dataset.limit=6"), cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=300)
    assert new.returncode == 0, new.stderr[-3000:]
    assert len(list(out.glob("runs/*/*"))) == 2


def test_ctrl_c_prints_one_short_line_naming_the_run_dir_as_the_readme_does(tmp_path):
    """Issue 74: Ctrl-C printed 2 lines (the progress bar's "(stopped)" and the interruption), the
    second about 600 characters with the resume command, a relative sweep dir and an absolute run
    dir. Now: one line, the dir relative to the working directory, and "the same command goes on"."""
    out, cache = tmp_path / "outputs", tmp_path / "cache"
    env = dict(_env(out), KGREASON_PROGRESS="log", KGREASON_OUTPUT="outputs")  # progress lines as off a terminal
    cmd = _cmd(cache)
    proc = subprocess.Popen(cmd, cwd=tmp_path, env={**env, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    import threading

    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and _rows(out) < 5:
            assert proc.poll() is None, "".join(lines)
            time.sleep(0.02)
        time.sleep(0.3)
        n = len(lines)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
        reader.join(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    after = [ln for ln in lines[n:] if ln.strip()]
    assert proc.returncode == 130
    assert len(after) == 1, after
    [run_dir] = list(out.glob("runs/*/*"))
    line = after[0]
    assert f"kept in {run_dir.relative_to(tmp_path)} " in line and str(tmp_path) not in line, line
    assert line.rstrip().endswith("The same command goes on."), line
    assert len(line.split(" - ", 1)[-1]) < 200, line


def test_a_stopped_sweep_job_says_the_same_command_goes_on(tmp_path):
    """In a sweep the line names the job and its dir (the sweep dir's job number, relative to the
    working directory like the sweep dir) and says the same ``--multirun`` command goes on
    (tests/test_sweep_go_on.py launches it again)."""
    out, cache = tmp_path / "outputs", tmp_path / "cache"
    env = _env(out)
    cmd = _cmd(cache, "seed=0")
    _, text = _sigterm_once([*cmd[:3], "--multirun", *cmd[3:]], env, lambda: sum(
        len(p.read_text().splitlines()) for p in out.rglob("predictions.jsonl")) >= 5)
    line = next(ln for ln in text.splitlines() if "interrupted by SIGTERM" in ln)
    [job] = [p.parent for p in out.rglob("predictions.jsonl")]
    assert job.name == "0" and job.parent.parent.parent == out / "multirun"  # <date>/<time>/<job number>
    assert f"of job 0; kept in {job} " in line, line
    assert "The same --multirun command goes on with this sweep." in line, line
