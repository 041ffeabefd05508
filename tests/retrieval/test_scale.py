"""PKG-scale benchmark (kgreason.bench.scale) at a tiny scale: JSON schema, cache budget, and
LogosKG-Large answers equal to the in-memory Numba/SciPy engines; lazy names and streamed KGs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from kgreason.bench.scale import main, sizes
from kgreason.kg.store import KG, RangeNames
from kgreason.kg.synthetic import write_synthetic_kg
from kgreason.retrieval.partitioned import PartitionedRetriever
from tests.conftest import REPO

TINY = ["--scale", "0.0002", "--queries", "4", "--hops", "1", "2", "3", "--n-partitions", "16",
        "--cache-size", "1", "--sweep-scale", "0.0002", "--sweep-queries", "3", "--batch-sizes", "1", "3",
        "--sweep-cache-sizes", "1", "16"]


def _check_schema(data: dict) -> None:
    assert set(data) >= {"machine", "config", "scales", "sweep", "growth", "baseline_rss_mb"}
    (row,) = data["scales"]
    assert (row["n_entities"], row["n_triples"]) == sizes(0.0002) == (10880, 17300)
    assert row["gen"]["seconds"] >= 0 and row["gen"]["peak_rss_mb"] > 0 and row["gen"]["kg_bytes"] > 0
    assert row["gen"]["vocab_bytes"] < 1000  # lazy names: no per-entity vocab
    part = row["partition"]
    assert part["n_partitions"] == 16 and part["partition_bytes_total"] >= part["partition_bytes_max"] > 0
    q = row["query"]
    assert q["cache_size"] == 1 and q["cache_fraction"] <= 0.1 + 1e-9
    assert q["cache_budget_bytes"] == part["partition_bytes_max"]
    for k in ("1", "2", "3"):
        pk = q["per_k"][k]
        assert set(pk) >= {"median_ms", "mean_ms", "loads", "hits", "evictions", "queries", "timeouts"}
        assert pk["queries"] == 4 and pk["loads"] >= 1 and pk["evictions"] == pk["loads"] - min(pk["loads"], 1)
    assert row["check"]["equal"] is True and row["check"]["compared"] == 2 * 4 * 3
    rows = data["sweep"]["rows"]
    assert {r["backend"] for r in rows} == {"partitioned", "numba (in-memory)"}
    part_rows = [r for r in rows if r["backend"] == "partitioned"]
    assert len(part_rows) == 3 * 2 * 2
    for r in part_rows:
        assert set(r) >= {"hops", "batch", "cache_size", "ms_per_query", "loads", "evictions"}
        if r["cache_size"] == 16:
            assert r["evictions"] == 0  # every partition fits


def test_scale_bench_inline_schema_and_equality(tmp_path):
    out = tmp_path / "scale.json"
    data = main(TINY + ["--inline", "--workdir", str(tmp_path / "w"), "--out", str(out)])
    _check_schema(data)
    assert json.loads(out.read_text())["scales"][0]["check"]["equal"] is True
    assert not any((tmp_path / "w").iterdir())  # generated KGs removed without --keep


@pytest.mark.slow
def test_scale_bench_cli_subprocess_phases(tmp_path):
    out = tmp_path / "scale.json"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "kgreason.bench.scale", *TINY, "--workdir", str(tmp_path / "w"),
                           "--out", str(out)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    _check_schema(data)
    assert data["scales"][0]["query"]["peak_rss_mb"] >= data["baseline_rss_mb"] * 0.5


def test_cache_must_be_small():
    with pytest.raises(SystemExit):
        main(["--scale", "0.0002", "--n-partitions", "8", "--cache-size", "1"])


def test_range_names_roundtrip_and_lookup(tmp_path):
    write_synthetic_kg(tmp_path / "kg", 50, 200, n_relations=3, seed=2, chunk=64)
    kg = KG.load(tmp_path / "kg")
    assert isinstance(kg.entity_names, RangeNames) and kg.entity_names == [f"e{i}" for i in range(50)]
    assert kg.entity_id("e49") == 49 and kg.find_entity("E7") == 7 and kg.find_entity("e50") == -1
    assert kg.find_entity("e07") == -1 and "e3" in kg.entity_names and "x" not in kg.entity_names
    with pytest.raises(KeyError):
        kg.entity_id("e50")
    kg.save(tmp_path / "copy")
    again = KG.load(tmp_path / "copy", validate=False)
    assert again.entity_names == kg.entity_names and (again.triples == kg.triples).all()
    assert json.loads((tmp_path / "copy" / "vocab.json").read_text())["entity_names"] == {"range": "e", "n": 50}


def test_partitions_from_memmap_match_in_memory_build(tmp_path):
    write_synthetic_kg(tmp_path / "kg", 300, 3000, n_relations=4, seed=5, chunk=700)
    mm, mem = KG.load(tmp_path / "kg"), KG.load(tmp_path / "kg", mmap=False)
    a = PartitionedRetriever(mm, n_partitions=5, cache_size=1, directory=str(tmp_path / "pa"))
    b = PartitionedRetriever(mem, n_partitions=5, cache_size=1, directory=str(tmp_path / "pb"))
    for p in range(5):
        x, y = a._load(("by_head", p)), b._load(("by_head", p))
        for key in ("keys", "indptr", "tids", "heads", "rels", "tails"):
            np.testing.assert_array_equal(x[key], y[key])
        # each key's triples in ascending triple-id order
        for i in range(len(x["keys"])):
            seg = x["tids"][x["indptr"][i]:x["indptr"][i + 1]]
            assert (np.diff(seg) > 0).all()
    assert not list((tmp_path / "pa" / "by_head").glob("_order*"))  # temp order file removed
