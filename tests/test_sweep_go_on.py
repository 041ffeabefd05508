"""Sweeps that stay one level deep and go on like a run (issue 71 item 5, issue 74 item 4).

* A job's dir is ``<sweep dir>/<job number>``: an override value that holds a ``/`` (a base URL,
  a path) used to nest the job several folders down (``0_…,llm.base_url=http\\:/127.0.0.1\\:8000/v1,…``),
  where ``SWEEP/*/metrics.json`` missed it. The full overrides stay in the job's ``run.json``.
* The same ``--multirun`` command launched again after a stop goes on in the newest unfinished
  sweep of the same overrides, as a single run does, without answering a finished example twice;
  ``kgreason tables`` on it then shows no partial job.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from conftest import REPO

from kgreason.bench.llm import FakeChatServer
from kgreason.tables import job_dirs

N = 30


def _env(out: Path, **extra: str) -> dict[str, str]:
    return dict(os.environ, PYTHONUNBUFFERED="1", KGREASON_OUTPUT=str(out), KGREASON_PROGRESS="off",
                PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])), **extra)


def test_a_sweep_over_a_url_writes_its_jobs_one_level_deep(tmp_path):
    """The must-show of issue 71 item 5: ``reasoner=io,cot llm=openai llm.base_url=http://127.0.0.1:PORT/v1``
    writes ``SWEEP/0/…`` and ``SWEEP/1/…``; the overrides are in each job's run.json."""
    sweep = tmp_path / "sweep"
    with FakeChatServer() as srv:
        r = subprocess.run([sys.executable, "-m", "kgreason", "--multirun", "reasoner=io,cot", "llm=openai",
                            f"llm.base_url={srv.base_url}", "llm.model=fake-model", "llm.api_key_env=null",
                            "dataset.limit=2", "tracking=none", "reports.hop_distribution=false",
                            f"hydra.sweep.dir={sweep}"], cwd=REPO, env=_env(tmp_path / "out"),
                           capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["0", "1"]
    for num, reasoner in (("0", "io"), ("1", "cot")):
        job = sweep / num
        assert (job / "metrics.json").is_file() and (job / "predictions.jsonl").is_file()
        rec = json.loads((job / "run.json").read_text())  # the job's full overrides (Hydra escapes the URL's ':')
        assert f"reasoner={reasoner}" in rec["overrides"] and any("llm.base_url=" in o for o in rec["overrides"])
        assert yaml.safe_load((job / "config.yaml").read_text())["llm"]["base_url"] == srv.base_url
    assert sorted(sweep.glob("*/metrics.json")) == [sweep / "0" / "metrics.json", sweep / "1" / "metrics.json"]
    assert job_dirs(sweep) == [sweep / "0", sweep / "1"]


def test_tables_read_a_sweeps_jobs_without_searching_below_them(tmp_path):
    """A job dir is the sweep dir's child: a folder deeper down (a copy someone left inside a job,
    a W&B dir with its own run.json) is not taken for another job."""
    from kgreason.tables import job_dirs

    for name in ("0", "1"):
        (tmp_path / name / ".hydra").mkdir(parents=True)
        (tmp_path / name / ".hydra" / "hydra.yaml").write_text("hydra: {}\n")
    deep = tmp_path / "1" / "copy" / "0"
    (deep / ".hydra").mkdir(parents=True)
    (deep / ".hydra" / "hydra.yaml").write_text("hydra: {}\n")
    (deep / "run.json").write_text("{}")
    assert job_dirs(tmp_path) == [tmp_path / "0", tmp_path / "1"]
    assert job_dirs(tmp_path / "1") == [tmp_path / "1"]  # a job dir is itself


def _sweep_cmd(cache: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "kgreason", "--multirun", "reasoner=io", "llm=scripted", "llm.delay_s=0.05",
            "tracking=none", "reports.hop_distribution=false", f"dataset.limit={N}", f"llm_cache.dir={cache}",
            "seed=0,1", *extra]


def _rows(root: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in root.glob("multirun/*/*/*/predictions.jsonl"))


def _stop_during_first_job(cmd: list[str], env: dict[str, str], out: Path) -> tuple[int, str]:
    """Start the sweep; once its first job wrote 5 rows send SIGINT (Ctrl-C); (exit status, output after it)."""
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
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
    return proc.returncode, "".join(lines[n:])


@pytest.mark.slow
def test_a_stopped_sweep_goes_on_in_its_dir_with_the_same_command(tmp_path):
    """The must-show of issue 74 item 4: a two-job sweep stopped by SIGINT in its first job, then
    the same command: the same sweep dir, every example answered once, no partial job in the table,
    and a third launch of the finished sweep starts a new one. Measured: 21 s at load 6 on 2 cores."""
    out, cache = tmp_path / "outputs", tmp_path / "cache"
    env = _env(out)
    rc, after = _stop_during_first_job(_sweep_cmd(cache), env, out)
    assert rc == 130, after
    [sweep] = list(out.glob("multirun/*/*"))
    assert (sweep / "0" / "predictions.jsonl").is_file() and not (sweep / "1").exists(), after
    stopped = [ln for ln in after.splitlines() if "interrupted by SIGINT" in ln]
    assert stopped and "The same --multirun command goes on with this sweep." in stopped[0], after
    done_before = len((sweep / "0" / "predictions.jsonl").read_text().splitlines())
    assert 5 <= done_before < N, "the first job finished before the signal: nothing was tested"

    time.sleep(1.1)  # the default sweep dir is named by the second it starts: the same command gets a new name
    again = subprocess.run(_sweep_cmd(cache), cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "going on with the unfinished sweep" in again.stderr and str(sweep) in again.stderr, again.stderr[-3000:]
    assert list(out.glob("multirun/*/*")) == [sweep]  # no second sweep dir
    for job in (sweep / "0", sweep / "1"):
        ids = [json.loads(x)["id"] for x in (job / "predictions.jsonl").read_text().splitlines()]
        assert len(ids) == len(set(ids)) == N, job  # no finished example answered twice
        m = json.loads((job / "metrics.json").read_text())
        assert m["run/status"] == "complete" and m["run/n_examples"] == N
    assert f"({done_before} already done, 0 to retry)" in (sweep / "0" / "run.log").read_text()

    tab = subprocess.run([sys.executable, "-m", "kgreason", "tables", str(sweep), "--ci", "none"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=300)
    assert tab.returncode == 0, tab.stderr
    text = (sweep / "results.md").read_text()
    assert "partial" not in (text + tab.stdout + tab.stderr).lower(), text

    # finished now: the same command a third time starts a new sweep, it does not reopen this one
    time.sleep(1.1)
    third = subprocess.run(_sweep_cmd(cache, "dataset.limit=3"), cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=600)
    assert third.returncode == 0 and "going on" not in third.stderr, third.stderr[-3000:]
    assert len(list(out.glob("multirun/*/*"))) == 2


def test_go_on_picks_only_an_unfinished_sweep_of_the_same_overrides(tmp_path):
    """Unit check of the search (no process started): the sweep with other overrides, the finished
    sweep, and the sweep whose job another process holds are passed over; ``resume=false`` and a
    given ``hydra.sweep.dir`` look for none."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.initialize import get_gh_backup, restore_gh_from_backup
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    from kgreason.runner.callbacks import unfinished_sweep
    from kgreason.runs import lock_run_dir

    out = tmp_path / "outputs"
    day = out / "multirun" / "2026-01-01"
    overrides = ["reasoner=io", "seed=0,1", "tracking=none"]

    def cfg(ov):
        loader = GlobalHydra.instance().config_loader()
        return loader.load_configuration("config", [*ov, f"paths.output={out}"], RunMode.MULTIRUN)

    def make(name: str, ov: list[str], finished: tuple[bool, ...]) -> Path:
        d = day / name
        d.mkdir(parents=True)
        OmegaConf.save(cfg(ov), d / "multirun.yaml")
        for num, done in enumerate(finished):
            j = d / str(num)
            j.mkdir()
            (j / "predictions.jsonl").write_text('{"id": "x", "metrics": {}}\n')
            (j / "metrics.json").write_text(json.dumps({"run/status": "complete" if done else "partial"}))
        return d

    # Hydra's global state is put back afterwards (the search sets HydraConfig, as Hydra does in an
    # app; a later in-process run() would read its choices and overrides as its own)
    backup, hydra_cfg = get_gh_backup(), HydraConfig.instance().cfg
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(version_base="1.3", config_dir=str(REPO / "conf")):
            make("10-00-00", overrides, (True, False))
            make("11-00-00", [*overrides, "dataset.limit=3"], (True, False))  # other overrides
            make("12-00-00", overrides, (True, True))                       # finished
            c = cfg(overrides)
            assert unfinished_sweep(c) == (day / "10-00-00", 1)  # one of its two jobs finished
            newer = make("13-00-00", overrides, (False,))
            assert unfinished_sweep(c) == (newer, 0)  # the newest unfinished one
            with lock_run_dir(newer / "0"):  # a job another process runs: not this launch's to go on in
                assert unfinished_sweep(c) == (day / "10-00-00", 1)
            assert unfinished_sweep(cfg([*overrides, "resume=false"])) is None
            assert unfinished_sweep(cfg([*overrides, f"hydra.sweep.dir={tmp_path / 'given'}"])) is None
    finally:
        restore_gh_from_backup(backup)
        HydraConfig.instance().cfg = hydra_cfg
