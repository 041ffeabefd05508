"""k-hop retrieval benchmark (logoskg.txt §4: Table 2 time/timeout rate, Table 3 LogosKG-Large,
Table 4 Jaccard agreement).

For every backend × k: the same seeded seed sets (``min_seeds..max_seeds`` random entities with
degree > 0) are answered with a ``2000·k`` ms limit; we report the median and mean per-query time
(ms, timed-out queries count with their elapsed time), the timeout rate, and the minimum Jaccard
similarity of the answer set against the reference engine (NetworkX) over queries where neither
timed out. Engine construction (matrix/graph build, Numba JIT) is timed separately (``build_s``)
and one untimed warm-up query runs first. JSON layout::

    {"kg": {"n_entities", "n_triples", "name"}, "machine": {...}, "config": {...},
     "results": {"<backend>": {"<k>": {"median_ms", "mean_ms", "timeout_rate", "jaccard_min", ...}}},
     "speedup_vs": {"best_cpu", "igraph": {"<k>": ratio}, "networkx": {...}},
     "large": [{"hops", "batch", "cache_size", "ms_per_query", "loads", "hits", "evictions"}]}
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

LOGOSKG_CPU = ("scipy", "numba", "torch")   # the LogosKG engines that run on CPU


def parse_backend(label: str, default_batch: int) -> tuple[str, int]:
    """``"torch_cuda@50"`` → ``("torch_cuda", 50)``; a label without ``@`` uses ``default_batch``.

    The suffix lets one run time the same engine at several batch sizes side by side
    (``backends=[numba,torch_cuda,torch_cuda@50]``); results are keyed by the full label.
    """
    name, sep, b = str(label).partition("@")
    if not sep:
        return name, max(1, int(default_batch))
    if not b.isdigit() or int(b) < 1:
        raise ValueError(f"backend label {label!r}: expected ENGINE@BATCH with BATCH a positive integer")
    return name, int(b)


def make_retriever(name: str, kg, cfg: DictConfig, batch: int | None = None, **kw):
    """Build backend ``name`` with the common keyword settings ``kw`` (``batch``: seed sets per
    batched product of the torch engines; default ``cfg.batch``)."""
    if name == "scipy":
        from kgreason.retrieval.scipy_engine import ScipyRetriever as C
    elif name == "numba":
        from kgreason.retrieval.numba_engine import NumbaRetriever as C
    elif name in ("torch", "torch_cuda"):
        from kgreason.retrieval.torch_engine import TorchRetriever

        return TorchRetriever(kg, device="cuda" if name == "torch_cuda" else "cpu",
                              batch_size=max(1, int(cfg.batch if batch is None else batch)), **kw)
    elif name == "networkx":
        from kgreason.retrieval.networkx_engine import NetworkXRetriever as C
    elif name == "igraph":
        from kgreason.retrieval.igraph_engine import IgraphRetriever as C
    elif name == "partitioned":
        from kgreason.retrieval.partitioned import PartitionedRetriever

        p = cfg.get("partitioned", {}) or {}
        return PartitionedRetriever(kg, n_partitions=int(p.get("n_partitions", 8)),
                                    cache_size=int(p.get("cache_size", 2)), **kw)
    else:
        raise ValueError(f"unknown backend {name!r}; expected one of scipy numba torch torch_cuda "
                         "networkx igraph partitioned")
    return C(kg, **kw)


def seed_sets(kg, n: int, lo: int, hi: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    pool = np.flatnonzero(kg.degree() > 0)
    if len(pool) == 0:
        raise ValueError(f"KG {kg.name!r} has no triples")
    return [rng.choice(pool, size=min(int(rng.integers(lo, hi + 1)), len(pool)), replace=False).tolist()
            for _ in range(n)]


def _jaccard(a: np.ndarray, b: np.ndarray) -> float:
    sa, sb = set(a.tolist()), set(b.tolist())
    return 1.0 if not sa and not sb else len(sa & sb) / len(sa | sb)


def _time_queries(ret, sets, k, batch):
    """Per-query times (ms) and results."""
    times, subs = [], []
    if batch <= 1:
        for s in sets:
            t0 = time.perf_counter()
            subs.append(ret.retrieve(s, k))
            times.append((time.perf_counter() - t0) * 1000)
    else:
        for i in range(0, len(sets), batch):
            chunk = sets[i:i + batch]
            t0 = time.perf_counter()
            subs.extend(ret.retrieve_many(chunk, k))
            dt = (time.perf_counter() - t0) * 1000 / len(chunk)
            times.extend([dt] * len(chunk))
    return times, subs


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                            "cpu_count": os.cpu_count(), "python": platform.python_version()}
    try:
        import psutil

        info["memory_gb"] = round(psutil.virtual_memory().total / 2**30, 1)
    except Exception:  # noqa: BLE001
        pass
    try:
        import torch

        info["torch"] = torch.__version__
        if torch.cuda.is_available():
            info["cuda_device"] = torch.cuda.get_device_name(0)
    except Exception:  # noqa: BLE001
        pass
    return info


def run_bench(cfg: DictConfig, kg=None) -> dict[str, Any]:
    """Run the benchmark described by ``cfg`` (conf/bench/config.yaml); returns the JSON dict."""
    kg = kg if kg is not None else instantiate(cfg.kg)
    hops = [int(h) for h in cfg.hops]
    backends = list(cfg.backends)
    sets_by_k = {k: seed_sets(kg, int(cfg.queries), int(cfg.min_seeds), int(cfg.max_seeds), int(cfg.seed) + k)
                 for k in hops}
    common = dict(semantics=str(cfg.semantics), direction=str(cfg.direction), max_paths=0,
                  return_triples=bool(cfg.return_triples))
    ref_name = str(cfg.reference)
    order = [ref_name] + [b for b in backends if b != ref_name]
    labels = {label: parse_backend(label, int(cfg.batch)) for label in order}  # validate all before any timing
    results: dict[str, dict[str, dict]] = {}
    answers: dict[str, dict[int, list]] = {}
    for name in order:
        engine, batch = labels[name]
        t0 = time.perf_counter()
        ret = make_retriever(engine, kg, cfg, batch=batch, timeout_ms=None, **common)
        ret.retrieve(sets_by_k[hops[0]][0], 1)  # build indexes / JIT (untimed warm-up)
        build_s = time.perf_counter() - t0
        answers[name] = {}
        per_k: dict[str, dict] = {}
        for k in hops:
            ret.timeout_ms = float(cfg.timeout_ms_per_hop) * k
            times, subs = _time_queries(ret, sets_by_k[k], k, batch)
            answers[name][k] = [None if s.timed_out else ret.answer_set(s) for s in subs]
            print(f"[bench] {name} k={k}: median {np.median(times):.2f} ms", file=sys.stderr, flush=True)
            per_k[str(k)] = {
                "median_ms": float(np.median(times)), "mean_ms": float(np.mean(times)),
                "timeout_rate": float(np.mean([s.timed_out for s in subs])), "queries": len(subs),
            }
            if hasattr(ret, "stats"):
                per_k[str(k)]["cache"] = ret.stats()
        per_k_meta = {"build_s": build_s, "batch": batch}
        if name in backends:
            results[name] = per_k
            results[name].update({"_" + key: v for key, v in per_k_meta.items()})
    for name in backends:
        for k in hops:
            pairs = [(a, b) for a, b in zip(answers[name][k], answers[ref_name][k]) if a is not None and b is not None]
            row = results[name][str(k)]
            row["jaccard_min"] = min((_jaccard(a, b) for a, b in pairs), default=None)
            row["jaccard_n"] = len(pairs)
    out: dict[str, Any] = {
        "kg": {"n_entities": kg.n_entities, "n_triples": kg.n_triples, "name": kg.name},
        "machine": machine(),
        "config": OmegaConf.to_container(cfg, resolve=True),
        "results": results,
        "speedup_vs": _speedups(results, hops, labels),
    }
    if cfg.get("large"):
        out["large"] = run_large(kg, cfg)
    print(format_table(out, hops))
    if cfg.get("out"):
        p = Path(str(cfg.out))
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(out, indent=2))
        print(f"wrote {p}")
    return out


def _speedups(results, hops, labels) -> dict[str, Any]:
    """Median-time ratios per k.

    * ``igraph`` / ``networkx``: baseline / best CPU LogosKG engine (``best_cpu``, chosen at the
      largest k among the scipy, numba and torch labels).
    * ``batched``: for every label timed with batches (``ENGINE@B`` or ``batch`` > 1):
      ``vs_single`` = the same engine with batch 1 / this label, and ``vs_best_cpu_single`` =
      the fastest single-query CPU engine (``best_cpu_single``) / this label; per query, as
      ``median_ms`` is per query for batched labels too.
    """
    def ratios(num: str, den: str) -> dict[str, float]:
        return {str(k): results[num][str(k)]["median_ms"] / max(results[den][str(k)]["median_ms"], 1e-9) for k in hops}

    k_last = str(hops[-1])
    cpu = [b for b in results if labels[b][0] in LOGOSKG_CPU]
    sp: dict[str, Any] = {}
    if cpu:
        best = min(cpu, key=lambda b: results[b][k_last]["median_ms"])
        sp["best_cpu"] = best
        for base in ("igraph", "networkx"):
            if base in results:
                sp[base] = ratios(base, best)
    single_cpu = [b for b in cpu if labels[b][1] == 1]
    best_single = min(single_cpu, key=lambda b: results[b][k_last]["median_ms"]) if single_cpu else None
    batched: dict[str, Any] = {}
    for b in results:
        engine, batch = labels[b]
        if batch <= 1:
            continue
        row: dict[str, Any] = {"batch": batch}
        single = [s for s in results if labels[s] == (engine, 1)]
        if single:
            row["single"] = single[0]
            row["vs_single"] = ratios(single[0], b)
        if best_single is not None:
            row["vs_best_cpu_single"] = ratios(best_single, b)
        batched[b] = row
    if batched:
        sp["best_cpu_single"] = best_single
        sp["batched"] = batched
    return sp


def run_large(kg, cfg) -> list[dict[str, Any]]:
    """LogosKG-Large sweep (Table 3 shape): hops × batch size × cache size → time, loads, evictions."""
    from kgreason.retrieval.partitioned import PartitionedRetriever, build_partitions
    import tempfile

    L = cfg.large_sweep
    rows = []
    with tempfile.TemporaryDirectory(prefix="kgreason-bench-parts-") as d:
        layouts = {"out": ["by_head"], "in": ["by_tail"], "both": ["by_head", "by_tail"]}[str(cfg.direction)]
        build_partitions(kg, d, int(L.n_partitions), layouts=layouts)
        for k in L.hops:
            sets = seed_sets(kg, int(L.queries), int(cfg.min_seeds), int(cfg.max_seeds), int(cfg.seed) + 1000 + int(k))
            for b in L.batch_sizes:
                for c in L.cache_sizes:
                    ret = PartitionedRetriever(kg, n_partitions=int(L.n_partitions), cache_size=int(c), directory=d,
                                               semantics=str(cfg.semantics), direction=str(cfg.direction),
                                               max_paths=0, return_triples=False)
                    t0 = time.perf_counter()
                    for i in range(0, len(sets), int(b)):
                        ret.retrieve_many(sets[i:i + int(b)], int(k))
                    ms = (time.perf_counter() - t0) * 1000 / len(sets)
                    rows.append({"hops": int(k), "batch": int(b), "cache_size": int(c), "ms_per_query": ms,
                                 **{x: ret.stats()[x] for x in ("loads", "hits", "evictions")}})
    return rows


def format_table(out, hops) -> str:
    kg = out["kg"]
    lines = [f"KG {kg['name']}: {kg['n_entities']} entities, {kg['n_triples']} triples",
             f"{'backend':<16}{'k':>3}{'median_ms':>12}{'mean_ms':>12}{'timeout':>9}{'jaccard_min':>13}"]
    for name, per_k in out["results"].items():
        for k in hops:
            r = per_k[str(k)]
            jm = "n/a" if r["jaccard_min"] is None else f"{r['jaccard_min']:.3f}"
            lines.append(f"{name:<16}{k:>3}{r['median_ms']:>12.2f}{r['mean_ms']:>12.2f}{r['timeout_rate']:>9.2f}{jm:>13}")
    sp = out.get("speedup_vs") or {}
    for base in ("igraph", "networkx"):
        if base in sp:
            lines.append(f"speedup {sp['best_cpu']} vs {base}: " +
                         ", ".join(f"k={k}: {v:.1f}x" for k, v in sp[base].items()))
    for label, row in (sp.get("batched") or {}).items():
        for key, ref in (("vs_single", row.get("single")), ("vs_best_cpu_single", sp.get("best_cpu_single"))):
            if key in row:
                lines.append(f"speedup {label} (per query) vs {ref}: " +
                             ", ".join(f"k={k}: {v:.1f}x" for k, v in row[key].items()))
    for row in out.get("large", []):
        lines.append("large " + " ".join(f"{a}={v:.2f}" if isinstance(v, float) else f"{a}={v}" for a, v in row.items()))
    return "\n".join(lines)
