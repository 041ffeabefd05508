"""The retrieval bench (issue 22 / 17 / 15.7): engines from conf/retriever via instantiate,
efficiency columns, no time limit, KG padding, the Table 2 preset and the optional baselines."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from kgreason.bench import retrieval as bench
from kgreason.retrieval.networkx_engine import NetworkXRetriever

REPO = Path(__file__).resolve().parents[2]


def _cfg(overrides, name="bench/config"):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose(config_name=name, overrides=overrides)


def test_every_engine_is_built_from_conf_retriever_with_instantiate(embedded_kg, monkeypatch):
    """No if-chain: the bench instantiates conf/retriever/<name>.yaml, its own settings on top."""
    seen = []
    real = bench.instantiate

    def spy(node, **kw):
        seen.append(node["_target_"])
        return real(node, **kw)

    monkeypatch.setattr(bench, "instantiate", spy)
    cfg = _cfg(["queries=2", "hops=[1]"])
    for name in ("scipy", "numba", "igraph", "graphblas", "networkx"):
        ret = bench.make_retriever(name, embedded_kg, cfg, semantics="exact", direction="in", max_paths=0,
                                   return_triples=False, timeout_ms=None)
        assert (ret.semantics.value, ret.direction.value) == ("exact", "in")
    assert seen == [str(bench.retriever_conf(n)["_target_"]) for n in ("scipy", "numba", "igraph", "graphblas", "networkx")]
    with pytest.raises(ValueError, match=r"unknown backend 'nope'.*expected one of .*numba"):
        bench.make_retriever("nope", embedded_kg, cfg)


def test_null_time_limit_and_efficiency_columns(embedded_kg):
    """timeout_ms_per_hop=null runs (it crashed on float(None)); every row carries median, mean,
    p90, time-out rate, activated triples and ns per triple; graphblas agrees with NetworkX."""
    cfg = _cfg(["queries=4", "hops=[1,2]", "backends=[numba,scipy,graphblas]", "timeout_ms_per_hop=null",
                "direction=out", "reference=networkx"])
    out = bench.run_bench(cfg, kg=embedded_kg)
    sets = bench.seed_sets(embedded_kg, 4, 1, 20, 0 + 2)
    ref = NetworkXRetriever(embedded_kg, direction="out", return_triples=True, max_paths=0)
    want = np.mean([sum(len(t) for t in ref.retrieve(s, 2).triples_by_hop) for s in sets])
    for name, per_k in out["results"].items():
        for k in ("1", "2"):
            row = per_k[k]
            assert row["timeout_rate"] == 0.0 and row["identical"] and row["jaccard_min"] == 1.0, (name, k)
            assert row["median_ms"] <= row["p90_ms"] + 1e-12
        assert per_k["2"]["triples_activated_mean"] == pytest.approx(want)
        r = per_k["2"]
        assert r["ns_per_triple"] == pytest.approx(r["mean_ms"] * 4 * 1e6 / (r["triples_activated_mean"] * 4))


def test_pad_kg_keeps_neighbourhoods(embedded_kg):
    big = bench.pad_kg(embedded_kg, 3)
    assert (big.n_entities, big.n_triples) == (3 * embedded_kg.n_entities, 3 * embedded_kg.n_triples)
    a = NetworkXRetriever(embedded_kg, direction="both", max_paths=0)
    b = NetworkXRetriever(big, direction="both", max_paths=0)
    for seeds in ([0], [3, 7]):
        assert a.answer_set(a.retrieve(seeds, 3)).tolist() == b.answer_set(b.retrieve(seeds, 3)).tolist()


def test_scale_option_reports_ratios(embedded_kg):
    cfg = _cfg(["queries=3", "hops=[1]", "backends=[numba]", "reference=numba", "scale=[1,4]"])
    out = bench.run_bench(cfg, kg=embedded_kg)
    assert out["scale"]["4"]["n_triples"] == 4 * embedded_kg.n_triples
    assert set(out["scale_ratio"]["4"]["numba"]) == {"1"}
    assert out["scale_answers_equal"] is True


def test_table2_preset_is_the_papers_operation():
    """LogosKG Table 2: within k, head → tail, 2000·k ms, 150 queries (every TR in the table is
    a multiple of 1/150), k = 1..5, UMLS size, 1–20 seeds; the undirected variant is named."""
    cfg = _cfg([], "bench/logoskg_table2")
    assert (cfg.semantics, cfg.direction, cfg.timeout_ms_per_hop, cfg.queries) == ("within", "out", 2000, 150)
    assert list(cfg.hops) == [1, 2, 3, 4, 5] and (cfg.min_seeds, cfg.max_seeds) == (1, 20)
    assert (cfg.kg.n_entities, cfg.kg.n_triples) == (407000, 3400000)
    assert "graphblas" in cfg.backends
    und = _cfg([], "bench/logoskg_table2_undirected")
    assert und.direction == "both" and und.queries == 150


def test_logoskg_lib_without_path_says_how_to_get_it(embedded_kg, monkeypatch):
    monkeypatch.delenv("LOGOSKG_SRC", raising=False)
    cfg = _cfg(["queries=2", "hops=[1]", "backends=[numba,logoskg_lib]", "reference=numba", "direction=out"])
    with pytest.raises(RuntimeError, match=r"LOGOSKG_SRC.*git clone https://github.com/Serendipity618/LogosKG"):
        bench.run_bench(cfg, kg=embedded_kg)
    monkeypatch.setenv("LOGOSKG_SRC", "/nonexistent/logoskg")
    with pytest.raises(RuntimeError, match=r"no LogosKG/LogosKG.py there"):
        bench.run_bench(cfg, kg=embedded_kg)


def test_logoskg_lib_answers_equal_numba_when_available(embedded_kg):
    """Runs only where the user has the authors' library (LOGOSKG_SRC); never downloads it."""
    import os

    if not os.environ.get("LOGOSKG_SRC"):
        pytest.skip("LOGOSKG_SRC not set (the LogosKG library is an optional, external baseline)")
    cfg = _cfg(["queries=4", "hops=[1,2,3]", "backends=[numba,logoskg_lib]", "reference=numba", "direction=out"])
    out = bench.run_bench(cfg, kg=embedded_kg)
    for k in ("1", "2", "3"):
        assert out["results"]["logoskg_lib"][k]["identical"], k


def test_logoskg_lib_device_is_the_librarys_and_needs_its_torch_backend(embedded_kg, tmp_path, monkeypatch, request):
    """``device`` reaches the library's constructor (as the H200 row ran it,
    ``LogosKG(triples, backend="torch", device="cuda")``); with a CPU-only backend it is refused.
    A stand-in library records the call: it checks the adapter's wiring, not the library."""
    from kgreason.bench.retrieval import build_retriever

    pkg = tmp_path / "LogosKG"
    pkg.mkdir()
    (pkg / "LogosKG.py").write_text(
        "CALLS = []\n"
        "class LogosKG:\n"
        "    def __init__(self, triples, **kw):\n"
        "        CALLS.append(kw)\n")
    monkeypatch.setenv("LOGOSKG_SRC", str(tmp_path))
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in ("LogosKG", "LogosKG.LogosKG"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    request.addfinalizer(lambda: [sys.modules.pop(n, None) for n in ("LogosKG", "LogosKG.LogosKG")])
    eng = build_retriever("logoskg_lib_cuda", embedded_kg)
    import LogosKG.LogosKG as lib  # the stand-in, found through LOGOSKG_SRC

    assert lib.CALLS[-1] == {"backend": "torch", "device": "cuda"} and eng.device == "cuda"
    build_retriever("logoskg_lib", embedded_kg)
    assert lib.CALLS[-1] == {"backend": "numba"}
    with pytest.raises(Exception, match="needs backend=torch"):  # hydra wraps the ValueError
        build_retriever("logoskg_lib", embedded_kg, device="cuda")
