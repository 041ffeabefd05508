"""Multirun sweeps end to end: launcher names, a 2×2 joblib sweep → four run dirs → one table,
and a 2×2 joblib sweep of `reasoner=io llm=openai` jobs sharing one OpenAI-compatible server
(bounded in-flight requests) and one SQLite call cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kgreason.bench.llm import FakeChatServer
from kgreason.tables import job_dirs

REPO = Path(__file__).resolve().parents[1]
N_JOBS = 2


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def _module(mod: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", mod, *args], cwd=REPO, env=_env(), capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, f"{mod} {' '.join(args)}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


def _sweep(sweep_dir: Path, *overrides: str) -> list[Path]:
    _module("kgreason", "--multirun", "hydra/launcher=joblib", f"hydra.launcher.n_jobs={N_JOBS}",
            f"hydra.sweep.dir={sweep_dir}", "tracking=none", *overrides)
    jobs = job_dirs(sweep_dir)
    for j in jobs:
        for f in ("config.yaml", "predictions.jsonl", "metrics.json"):
            assert (j / f).is_file(), f"{j}/{f} missing"
    return jobs


def _metrics(job: Path) -> dict:
    return json.loads((job / "metrics.json").read_text())


@pytest.mark.parametrize("name,target,check", [
    ("joblib", "JoblibLauncher", {}),
    ("local_parallel", "JoblibLauncher", {"n_jobs": 2, "backend": "loky"}),
    ("submitit_slurm", "SlurmLauncher", {}),
    ("submitit_local", "LocalLauncher", {}),
    ("slurm_cpu", "SlurmLauncher", {"gpus_per_node": 0, "cpus_per_task": 4}),
    ("slurm_gpu", "SlurmLauncher", {"gpus_per_node": 1}),
])
def test_launcher_names_compose(name, target, check):
    """The plugins' own names and the repo's presets are all valid `hydra/launcher=` choices."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(REPO / "conf")):
        cfg = compose(config_name="config", overrides=[f"hydra/launcher={name}"], return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("." + target)
    for k, v in check.items():
        assert launcher[k] == v


def test_joblib_sweep_2x2_gives_four_runs_and_one_table(tmp_path):
    sweep = tmp_path / "sweep"
    jobs = _sweep(sweep, "dataset.limit=4", "reasoner.max_hops=1,2", "reasoner.top_k=1,10")
    assert len(jobs) == 4
    for j in jobs:
        assert len((j / "predictions.jsonl").read_text().splitlines()) == 4
        m = _metrics(j)
        assert m["run/n_examples"] == 4 and m["run/errors"] == 0
        assert "choices" in (j / ".hydra" / "hydra.yaml").read_text()
        assert "hydra/launcher: joblib" in (j / ".hydra" / "hydra.yaml").read_text()

    r = _module("kgreason.tables", str(sweep), "--metrics", "hits_at_1,all_answers_found")
    assert "Missing" not in r.stdout and not (sweep / "missing.txt").exists()
    lines = [ln for ln in (sweep / "results.md").read_text().splitlines() if ln.startswith("|")]
    header, body = lines[0], lines[2:]
    assert "Each cell is one run" in (sweep / "results.md").read_text()  # the caption: no seeds averaged
    # one reasoner, one ablation, one dataset: said once in the caption (issue 59), the variant is the row
    assert header == "| variant | Hits@1 | All answers |"
    assert "Every row: reasoner = retrieval_only, ablation = none." in (sweep / "results.md").read_text()
    variants = {ln.split("|")[1].strip() for ln in body}
    assert variants == {f"reasoner.max_hops={h},reasoner.top_k={k}" for h in (1, 2) for k in (1, 10)}


LIMIT, CONC = 5, 2


def _llm_sweep(srv: FakeChatServer, sweep_dir: Path, cache: Path) -> list[Path]:
    """2×2 sweep of `reasoner=io llm=openai` jobs: `reasoner.top_k` does not change the LLM
    request, `reasoner.max_tokens` does, so the sweep has 2 × LIMIT distinct calls."""
    return _sweep(sweep_dir, "reasoner=io", "llm=openai", f"llm.base_url={srv.base_url}", "llm.model=fake-model",
                  "llm.api_key_env=null", f"llm.max_concurrency={CONC}", f"llm_cache.dir={cache}",
                  f"dataset.limit={LIMIT}", "max_error_rate=0", "reasoner.top_k=1,3", "reasoner.max_tokens=32,64",
                  "example_workers=1")  # one example at a time per job: the bound below is max_concurrency's


def _check_first_sweep(srv: FakeChatServer, jobs: list[Path], cache: Path) -> list[dict]:
    assert len(jobs) == 4
    ms = [_metrics(j) for j in jobs]
    assert all(m["run/errors"] == 0 and m["run/n_examples"] == LIMIT for m in ms)
    # bounded concurrency: at most n_jobs × max_concurrency requests in flight at the server
    assert srv.in_flight == 0 and 1 <= srv.max_in_flight <= N_JOBS * CONC
    calls = sum(m["llm/calls"] for m in ms)
    hits = sum(m["llm/cache_hits"] for m in ms)
    probes = [r for r in srv.requests if r["messages"][-1]["content"] == "ping" and r.get("max_tokens") == 1]
    # one preflight probe per job, and one per endpoint when the sweep is checked before its first job
    # (kgreason/runner/compose.py); probes are never cached, never counted as a call
    assert len(probes) == 4 + 1
    assert calls == len(srv.requests) - len(probes)  # every other server request is accounted to one run
    assert calls + hits == 4 * LIMIT
    assert 2 * LIMIT <= calls  # each distinct call reached the server at least once...
    from kgreason.llm.cache import CallStore  # ...and is stored once, in one shared store

    assert len(CallStore.open(cache, "readonly")) == 2 * LIMIT
    return ms


@pytest.fixture(scope="module")
def llm_sweep(tmp_path_factory):
    """The first 2×2 LLM sweep, run once for the two tests below (its server stays up for the
    rerun): ``(server, jobs, cache, tmp)``. The rerun test comes second in the file and is the
    only one that sends the server more requests."""
    tmp = tmp_path_factory.mktemp("llm_sweep")
    cache = tmp / "shared_cache"
    with FakeChatServer(latency_s=0.02) as srv, pytest.MonkeyPatch.context() as mp:
        # what tests/conftest.py's per-test environment gives a test's own sweep
        mp.setenv("KGREASON_CACHE_DIR", str(tmp / "cache"))
        mp.setenv("WANDB_MODE", "offline")
        mp.setenv("HF_HUB_OFFLINE", "1")
        jobs = _llm_sweep(srv, tmp / "sweep1", cache)
        mp.undo()
        yield srv, jobs, cache, tmp


def test_llm_sweep_shares_one_server_and_one_cache(llm_sweep):
    """Four jobs (2 at a time) against one OpenAI-compatible server and one cache dir."""
    srv, jobs, cache, _ = llm_sweep
    _check_first_sweep(srv, jobs, cache)


@pytest.mark.slow
def test_llm_sweep_rerun_makes_no_server_calls(llm_sweep):
    """Re-running the whole sweep (new sweep dir, same cache dir) answers everything from the cache."""
    srv, jobs, cache, tmp = llm_sweep  # the first sweep is the module's, checked again before the rerun
    _check_first_sweep(srv, jobs, cache)
    n_before = len(srv.requests)
    jobs2 = _llm_sweep(srv, tmp / "sweep2", cache)
    assert len(srv.requests) == n_before + 4 + 1  # zero server calls but the probes (4 jobs + the sweep check)
    for m in (_metrics(j) for j in jobs2):
        assert m["llm/calls"] == 0 and m["llm/cache_hits"] == LIMIT and m["llm/cost_usd"] == 0

    def by_name(js):
        return {j.name: _metrics(j)["metric/hits_at_1"] for j in js}

    assert by_name(jobs) == by_name(jobs2)


def test_a_sweep_says_where_it_went_and_tags_its_progress_lines(tmp_path):
    """A sweep ends by printing its dir and the tables/report commands for it; each job's progress
    lines (not on a terminal) carry the job's name, so parallel jobs' lines can be told apart."""
    sweep = tmp_path / "sweep"
    r = subprocess.run([sys.executable, "-m", "kgreason", "--multirun", f"hydra.sweep.dir={sweep}", "tracking=none",
                        "dataset.limit=2", "seed=0,1"], cwd=REPO, capture_output=True, text=True, timeout=300,
                       env={**_env(), "KGREASON_PROGRESS": "log", "KGREASON_PROGRESS_INTERVAL": "0.01"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"sweep dir: {sweep}" in r.stdout
    assert f"kgreason tables {sweep}" in r.stdout and f"kgreason report {sweep}" in r.stdout
    logs = "".join((j / "run.log").read_text() for j in job_dirs(sweep))
    assert "[job 0: dataset.limit=2,seed=0,tracking=none] examples" in logs, logs[-2000:]
    assert "[job 1: dataset.limit=2,seed=1,tracking=none] examples" in logs, logs[-2000:]


@pytest.mark.slow
def test_sigterm_on_a_parallel_sweep_ends_its_workers(tmp_path):
    """SIGTERM to a local_parallel sweep ends its worker processes too (loky kept them idle, ~1 GB each)."""
    import signal
    import time

    import psutil

    sweep = tmp_path / "sweep"
    p = subprocess.Popen([sys.executable, "-m", "kgreason", "--multirun", "hydra/launcher=local_parallel",
                          f"hydra.sweep.dir={sweep}", "tracking=none", "seed=0,1,2,3,4,5,6,7"], cwd=REPO,
                         env={**_env(), "KGREASON_PROGRESS": "off"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        deadline = time.monotonic() + 240
        workers: list = []
        while time.monotonic() < deadline and p.poll() is None:
            workers = psutil.Process(p.pid).children(recursive=True)
            if workers and any(sweep.glob("*/run.log")):
                break
            time.sleep(0.2)
        assert p.poll() is None and workers, "the sweep ended before its workers could be seen"
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
        assert p.returncode != 0
        assert "sweep stopped by SIGTERM" in err, err[-2000:]
        gone, alive = psutil.wait_procs(workers, timeout=30)
        assert not alive, f"worker processes still running after SIGTERM: {[w.pid for w in alive]}"
    finally:
        if p.poll() is None:
            p.kill()
