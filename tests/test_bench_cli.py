"""`python -m kgreason.bench NAME [args]` dispatches to `kgreason.bench.NAME.main(argv)`;
overrides (`kg=embedded ...`) still run the Hydra retrieval bench."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kgreason.bench.__main__ import dispatch, subcommands

REPO = Path(__file__).resolve().parents[1]


def _run(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "kgreason.bench", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_llm_subcommand(tmp_path):
    out = tmp_path / "llm.json"
    r = _run("llm", "--which", "openai", "--n", "8", "--latency-ms", "1", "--concurrency", "4", "--json", str(out))
    assert r.returncode == 0, r.stderr
    assert "ratio" in r.stdout
    res = json.loads(out.read_text())
    assert res[0]["backend"].startswith("openai") and res[0]["n"] == 8 and res[0]["ratio"] > 0


def test_unknown_subcommand_is_a_clear_error():
    r = _run("no_such_bench")
    assert r.returncode == 2 and "unknown sub-bench 'no_such_bench'" in r.stderr and "llm" in r.stderr


def test_retrieval_spelled_out(tmp_path):
    out = tmp_path / "b.json"
    r = _run("retrieval", "kg=embedded", "backends=[scipy]", "hops=[1]", "queries=2", f"out={out}", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert out.exists()


def test_dispatch_leaves_hydra_args_alone():
    assert {"llm", "dense_recall", "dx_offline", "retrieval"} <= set(subcommands())
    for argv in (["x"], ["x", "kg=embedded"], ["x", "--help"], ["x", "-m", "hops=[1]"], ["x", "+a=b"]):
        assert dispatch(argv) is None


def test_hf_bench_reports_median_of_alternating_runs():
    from kgreason.bench.llm import bench_hf

    r = bench_hf(n=4, max_tokens=4, batch_size=4, repeats=3)
    for mode in ("sequential", "batched"):
        runs = r[mode]["runs_s"]
        assert len(runs) == 3 and r[mode]["s"] == round(sorted(runs)[1], 4)
        assert abs(r[mode]["req_per_s"] - 4 / r[mode]["s"]) <= 0.01 * r[mode]["req_per_s"]
    assert r["ratio"] == round(r["batched"]["req_per_s"] / r["sequential"]["req_per_s"], 2)


def test_dtypes_bench_sends_batches_and_builds_the_llamacpp_route(monkeypatch):
    """`--batch N`: one generate call of N requests per prompt and dtype; 'llamacpp' in the dtype
    list is the llama.cpp route. A fake LocalLLM stands in for the model (no weights read)."""
    from kgreason.bench import llm as bench_llm
    from kgreason.llm import local
    from kgreason.types import Completion, Usage

    built, calls = [], []

    class FakeLocal:
        def __init__(self, model=None, dtype="auto", n_threads=None, route="transformers"):
            self.tag = route if route == "llamacpp" else dtype
            built.append((route, dtype))

        def generate(self, reqs):
            calls.append((self.tag, len(reqs)))
            return [Completion(texts=(f"{self.tag}",), usage=Usage(calls=1, completion_tokens=2)) for _ in reqs]

    monkeypatch.setattr(local, "LocalLLM", FakeLocal)
    r = bench_llm.bench_dtypes("m", dtypes=("float32", "llamacpp"), max_tokens=4, prompts=("a", "b", "c"), batch=4)
    assert built == [("transformers", "float32"), ("llamacpp", "auto")]
    measured = [c for c in calls if c[1] != 1]  # minus the one-request warm-ups
    assert measured == [("float32", 4), ("llamacpp", 4)] * 3
    assert r["batch"] == 4 and r["float32"]["tokens"] == 3 * 4 * 2 and r["llamacpp"]["tokens"] == 24
    assert r["llamacpp"]["same_greedy_as_float32"] == [False] * 3  # the fakes answer with their tag


def test_the_retrieval_bench_writes_its_json_by_default_and_says_where(tmp_path):
    env_out = tmp_path / "outs"
    env = {**os.environ, "KGREASON_OUTPUT": str(env_out),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    r = subprocess.run([sys.executable, "-m", "kgreason.bench", "kg=embedded", "backends=[scipy]", "hops=[1]",
                        "queries=2"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("bench results: "))
    path = Path(line.split()[2])
    assert path.is_file() and path.is_relative_to(env_out / "bench")
    assert json.loads(path.read_text())["results"]
