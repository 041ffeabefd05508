"""`python -m kgreason.bench` on the embedded KG writes the documented JSON shape."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import REPO


def test_bench_cli_schema(tmp_path):
    out = tmp_path / "bench.json"
    cmd = [sys.executable, "-m", "kgreason.bench", "kg=embedded", "queries=3", "hops=[1,2]",
           "backends=[scipy,numba,torch,networkx,igraph,partitioned]", f"out={out}",
           "large=true", "large_sweep.queries=2", "large_sweep.hops=[1]", "large_sweep.batch_sizes=[2]",
           "large_sweep.cache_sizes=[1]"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    assert set(data["kg"]) >= {"n_entities", "n_triples"}
    assert data["kg"]["n_triples"] > 1000
    assert set(data["results"]) == {"scipy", "numba", "torch", "networkx", "igraph", "partitioned"}
    for backend, per_k in data["results"].items():
        assert {"1", "2"} <= set(per_k)
        for k in ("1", "2"):
            row = per_k[k]
            assert set(row) >= {"median_ms", "mean_ms", "timeout_rate", "jaccard_min"}
            assert row["median_ms"] >= 0 and 0 <= row["timeout_rate"] <= 1
            assert row["jaccard_min"] == 1.0, (backend, k)  # every engine agrees with NetworkX
    assert data["speedup_vs"]["best_cpu"] in ("scipy", "numba", "torch")
    assert data["large"][0].keys() >= {"hops", "batch", "cache_size", "ms_per_query", "loads", "evictions"}
    assert "KG embedded" in proc.stdout
    assert not (tmp_path / "outputs").exists()  # no Hydra run dir litter
