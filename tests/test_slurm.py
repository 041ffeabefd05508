"""Sweeps on a real SLURM: `hydra/launcher=slurm_cpu` submits through `sbatch` to a one-node
cluster started for the test (tests/slurm_cluster.py: munge, MariaDB + slurmdbd, slurmctld,
slurmd; Debian's packages, installed by `make test` as root), a job cancelled with `scancel`
mid-run shows as partial in `kgreason tables`, and launching the sweep again finishes it without
answering a finished example twice.

Skipped, with the reason, where the cluster cannot start (not root, or the packages missing).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kgreason.tables import job_dirs

from slurm_cluster import Cluster, unavailable  # tests/slurm_cluster.py

REPO = Path(__file__).resolve().parents[1]
N = 20          # questions per job
DELAY_S = 1.0   # the scripted model's seconds per request: a job lasts long enough to be cancelled


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    why = unavailable()
    if why:
        pytest.skip(why)
    c = Cluster(tmp_path_factory.mktemp("slurm")).start()
    try:
        yield c
    finally:
        c.stop()


def _rows(path: Path) -> list[str]:
    return [json.loads(ln)["id"] for ln in path.read_text().splitlines()] if path.exists() else []


def _sweep_cmd(sweep: Path, cluster: Cluster) -> list[str]:
    return [sys.executable, "-m", "kgreason", "--multirun", "hydra/launcher=slurm_cpu",
            f"hydra.launcher.partition={cluster.partition}", "hydra.launcher.cpus_per_task=1",
            "hydra.launcher.mem_gb=1", "hydra.launcher.timeout_min=15", f"hydra.sweep.dir={sweep}",
            "reasoner=io,cot", "seed=0,1", "llm=scripted", f"llm.delay_s={DELAY_S}", f"dataset.limit={N}",
            "tracking=none", "reports.hop_distribution=false"]


def _env(cluster: Cluster, cache: Path) -> dict[str, str]:
    # the call cache through the environment: a path among the overrides would become part of
    # every job's folder name
    return {**cluster.env, "PYTHONUNBUFFERED": "1", "KGREASON_CACHE_DIR": str(cache),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


@pytest.mark.slow
def test_a_sweep_runs_through_sbatch_and_a_cancelled_job_finishes_when_launched_again(cluster, tmp_path):
    """Four jobs (io, cot × seeds 0, 1) through real `sbatch` on the test cluster; the last one is
    cancelled with `scancel` once it has answered a few questions. The launch ends non-zero,
    the three others are complete, `kgreason tables` lists the cancelled one as partial; the same
    command again finishes it, answering only the questions it had left.

    Measured on the 2-core development VM under load: about 2-3 minutes (cluster start ~15 s)."""
    sweep = tmp_path / "sweep"
    cmd, env = _sweep_cmd(sweep, cluster), _env(cluster, tmp_path / "cache")
    launch = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    victim = None
    try:
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and victim is None:
            assert launch.poll() is None, launch.stdout.read()[-4000:]
            target = sweep / "3"  # a job's dir is its number (conf/hydra/default.yaml)
            if len(_rows(target / "predictions.jsonl")) >= 3:
                victim = target
            else:
                time.sleep(0.2)
        assert victim is not None, "the fourth job never answered 3 questions"
        ids = subprocess.run(["squeue", "-h", "-o", "%i"], env=env, capture_output=True, text=True).stdout.split()
        job = next(i for i in ids if i.endswith("_3"))
        subprocess.run(["scancel", job], env=env, check=True)
        out, _ = launch.communicate(timeout=400)
    finally:
        if launch.poll() is None:
            launch.kill()
    assert launch.returncode != 0, out[-4000:]  # a job of the sweep was cancelled: the launch says so
    done_before = _rows(victim / "predictions.jsonl")
    assert 3 <= len(done_before) < N, "the cancelled job finished anyway: nothing was tested"
    state = cluster.wait_state(job, "CANCELLED", timeout=120)  # slurmdbd records it a moment after the job ends
    assert state.startswith("CANCELLED"), state
    jobs = job_dirs(sweep)
    assert len(jobs) == 4
    for j in jobs:
        if j != victim:
            assert json.loads((j / "metrics.json").read_text())["run/n_examples"] == N, j

    tables = [sys.executable, "-m", "kgreason", "tables", str(sweep)]
    t = subprocess.run(tables, cwd=REPO, env=env, capture_output=True, text=True)
    report = t.stdout + t.stderr
    assert victim.name in report and "partial" in report, report[-3000:]

    again = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, (again.stdout + again.stderr)[-4000:]
    ids = _rows(victim / "predictions.jsonl")
    assert len(ids) == N and len(set(ids)) == N and ids[:len(done_before)] == done_before  # nothing answered twice
    for j in job_dirs(sweep):
        m = json.loads((j / "metrics.json").read_text())
        assert m["run/n_examples"] == N and not m.get("run/partial"), j
    t = subprocess.run(tables, cwd=REPO, env=env, capture_output=True, text=True)
    assert t.returncode == 0 and "partial" not in t.stdout, t.stdout + t.stderr


def test_the_accounting_state_is_waited_for_with_a_deadline(monkeypatch, tmp_path):
    """Issue 74: under load the test read ``sacct`` once, right after ``scancel``, and got ``''``
    (slurmdbd had not recorded the cancelled job yet). :meth:`Cluster.wait_state` polls until the
    state arrives, and gives the last state read at its deadline; no cluster needed here."""
    answers = iter(["", "", "RUNNING", "CANCELLED by 0"])
    calls = []

    def fake_run(cmd, **kw):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, stdout=next(answers, "CANCELLED by 0") + "\n", stderr="")

    monkeypatch.setattr(subprocess, "run", fake_run)
    c = Cluster(tmp_path)
    assert c.wait_state("7_3", "CANCELLED", timeout=30, poll=0.01).startswith("CANCELLED")
    assert len(calls) == 4 and calls[0][0] == "sacct"

    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(cmd, 0, stdout="", stderr=""))
    t0 = time.monotonic()
    assert c.wait_state("7_3", "CANCELLED", timeout=0.2, poll=0.01) == ""  # the deadline holds
    assert time.monotonic() - t0 < 5
