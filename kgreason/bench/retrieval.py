"""k-hop retrieval benchmark (logoskg.txt §4: Table 2 time/timeout rate, Table 3 LogosKG-Large,
Table 4 Jaccard agreement; issue 22: efficiency, not only time).

Every engine is built from ``conf/retriever/<name>.yaml`` with ``hydra.utils.instantiate``, as
the app builds ``retriever=<name>``; the bench's settings (semantics, direction, time limit)
override the file's. For every backend × k the same seeded seed sets (``min_seeds..max_seeds``
random entities with degree > 0) are answered under a ``timeout_ms_per_hop·k`` ms limit
(``null`` = none). Single-query backends are timed side by side: for each query every backend
in turn, ``repeats`` rounds, the fastest round kept. Per backend and k we report the median,
the mean (the paper's QT, also in ``table2``) and the p90 query time (ms; timed-out queries count with their
elapsed time), the time-out rate, the triples each query activates (``Σ_h |t^(h)|``, identical
for every engine) and nanoseconds per activated triple, and the minimum Jaccard similarity of the
answer set against the ``reference`` engine plus ``identical`` (every answer set equal).
``scale: [1, 10, 100]`` re-runs the same seed sets on the KG padded with disjoint copies
(:func:`pad_kg`), so time that follows the work stays flat. Engine construction is timed
separately (``_build_s``) and one untimed warm-up query runs first. JSON layout::

    {"kg": {"n_entities", "n_triples", "name"}, "machine": {...}, "config": {...},
     "results": {"<backend>": {"<k>": {"median_ms", "mean_ms", "p90_ms", "timeout_rate",
                                        "triples_activated_mean", "ns_per_triple", "jaccard_min", ...}}},
     "table2": {"<backend>": {"<k>": {"qt_ms", "tr", "queries"}}},   # the paper's cells: mean, TR
     "speedup_vs": {"best_cpu", "igraph": {"<k>": ratio}, "graphblas": ..., "logoskg_lib": ...},
     "scale": {"<factor>": {"n_entities", "n_triples", "results"}}, "scale_ratio": {...},
     "large": [{"experiment", "hops", "batch", "cache_size", "backend", "qt_ms", "ms_per_query", "queries",
                "loads", "hits", "evictions"} | {..., "skipped"}]}   # LogosKG Table 3 (run_large)
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

LOGOSKG_CPU = ("scipy", "numba", "torch")   # kgreason's LogosKG engines that run on CPU
BASELINES = ("igraph", "networkx", "graphblas", "logoskg_lib")   # compared against the best of those
RETRIEVER_CONF = Path(__file__).resolve().parents[2] / "conf" / "retriever"
BENCH_ENGINES = Path(__file__).resolve().parents[2] / "conf" / "bench" / "engines"   # bench-only baselines


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


def engine_names() -> list[str]:
    """The engines the bench can build: ``conf/retriever/<name>.yaml`` (the app's retrievers)
    and ``conf/bench/engines/<name>.yaml`` (bench-only baselines such as ``logoskg_lib``)."""
    return sorted({p.stem for d in (RETRIEVER_CONF, BENCH_ENGINES) for p in d.glob("*.yaml")})


def retriever_conf(name: str) -> DictConfig:
    """The node for engine ``name``: ``conf/retriever/<name>.yaml``, which the app instantiates
    for ``retriever=<name>``, else the bench-only ``conf/bench/engines/<name>.yaml``."""
    for d in (RETRIEVER_CONF, BENCH_ENGINES):
        path = d / f"{name}.yaml"
        if path.is_file():
            return OmegaConf.load(path)
    raise ValueError(f"unknown backend {name!r}: no {RETRIEVER_CONF / (name + '.yaml')}; "
                     f"expected one of {' '.join(engine_names())}")


def build_retriever(name: str, kg, **overrides):
    """``instantiate(conf/retriever/<name>.yaml + overrides, kg=kg)``: how every bench (retrieval,
    scale, dx_offline) builds an engine, the same way ``kgreason.runner.run`` builds ``retriever=<name>``."""
    node = OmegaConf.merge(retriever_conf(name), OmegaConf.create(dict(overrides)))
    return instantiate(node, kg=kg)


def make_retriever(name: str, kg, cfg: DictConfig, batch: int | None = None, **kw):
    """Build engine ``name`` from ``conf/retriever/<name>.yaml`` with ``hydra.utils.instantiate``
    (as ``kgreason.runner.run`` does), the bench's common settings ``kw`` overriding the file's.

    ``batch``: seed sets per batched product of the torch engines (default ``cfg.batch``);
    ``cfg.partitioned`` sets ``n_partitions`` / ``cache_size`` of the partitioned engine.
    """
    node = retriever_conf(name)
    over: dict[str, Any] = dict(kw)
    if "batch_size" in node:
        over["batch_size"] = max(1, int(cfg.batch if batch is None else batch))
    if name == "partitioned":
        p = cfg.get("partitioned", {}) or {}
        over.update(n_partitions=int(p.get("n_partitions", 8)), cache_size=int(p.get("cache_size", 2)))
    return build_retriever(name, kg, **over)


def seed_sets(kg, n: int, lo: int, hi: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    pool = np.flatnonzero(kg.degree() > 0)
    if len(pool) == 0:
        raise ValueError(f"KG {kg.name!r} has no triples")
    return [rng.choice(pool, size=min(int(rng.integers(lo, hi + 1)), len(pool)), replace=False).tolist()
            for _ in range(n)]


def pad_kg(kg, factor: int):
    """``kg`` plus ``factor - 1`` disjoint copies of its triples on fresh entity ids
    (``copy c`` shifts every id by ``c·n``): a KG ``factor``× the size in entities and triples in
    which nothing outside the original ids is reachable from them, so seeds drawn from ``kg``
    have exactly the same neighbourhoods (issue 22: time should follow the work, not the graph)."""
    from kgreason.kg.store import KG, RangeNames

    factor = int(factor)
    if factor < 1:
        raise ValueError(f"scale factors must be integers >= 1, got {factor}")
    if factor == 1:
        return kg
    n, m = kg.n_entities, kg.n_triples
    if n * factor >= 2**31:
        raise ValueError(f"scale {factor}: {n * factor} entities do not fit int32 ids")
    shift = np.repeat(np.arange(factor, dtype=np.int64) * n, m)
    heads = (np.tile(kg.heads.astype(np.int64), factor) + shift).astype(np.int32)
    tails = (np.tile(kg.tails.astype(np.int64), factor) + shift).astype(np.int32)
    del shift
    rels = np.tile(kg.rels, factor)
    return KG(heads, rels, tails, RangeNames(n * factor, "p"), list(kg.relation_names),
              name=f"{kg.name}x{factor}", validate=False)


def _jaccard(a: np.ndarray, b: np.ndarray) -> float:
    sa, sb = set(a.tolist()), set(b.tolist())
    return 1.0 if not sa and not sb else len(sa & sb) / len(sa | sb)


def _time_batched(ret, sets, k, batch):
    """Per-query times (ms, batch time / batch size) and results for a batched label."""
    times, subs = [], []
    for i in range(0, len(sets), batch):
        chunk = sets[i:i + batch]
        t0 = time.perf_counter()
        subs.extend(ret.retrieve_many(chunk, k))
        dt = (time.perf_counter() - t0) * 1000 / len(chunk)
        times.extend([dt] * len(chunk))
    return times, subs


def _time_interleaved(rets: dict, sets, k, repeats: int):
    """Single-query labels timed side by side: for each query, every label in turn (the order
    rotates from query to query), ``repeats`` rounds; a query's time is its fastest round.
    Returns ``{label: (times_ms, subs)}``."""
    labels = list(rets)
    times = {lb: [] for lb in labels}
    subs = {lb: [] for lb in labels}
    for i, s in enumerate(sets):
        best = {lb: float("inf") for lb in labels}
        last = {}
        for r in range(max(1, repeats)):
            rot = labels[(i + r) % len(labels):] + labels[:(i + r) % len(labels)]
            for lb in rot:
                t0 = time.perf_counter()
                sub = rets[lb].retrieve(s, k)
                best[lb] = min(best[lb], (time.perf_counter() - t0) * 1000)
                last[lb] = sub
        for lb in labels:
            times[lb].append(best[lb])
            subs[lb].append(last[lb])
    return {lb: (times[lb], subs[lb]) for lb in labels}


def activated_triples(kg, sets, k, semantics: str, direction: str, counter=None) -> list[int]:
    """Triples each query activates over its k hops (the sum of |t^(h)|, identical for every
    engine), counted untimed with the Numba engine (``counter``: one built for ``kg`` already)."""
    ret = counter if counter is not None else build_retriever(
        "numba", kg, semantics=semantics, direction=direction, max_paths=0, return_triples=True, timeout_ms=None)
    return [int(sum(len(t) for t in ret.retrieve(s, k).triples_by_hop)) for s in sets]


def _row(times, subs, activated) -> dict[str, Any]:
    t = np.asarray(times, dtype=np.float64)
    ok = np.array([not s.timed_out for s in subs])
    act = np.asarray(activated, dtype=np.float64)
    done = float(act[ok].sum())
    return {
        "median_ms": float(np.median(t)), "mean_ms": float(np.mean(t)), "p90_ms": float(np.percentile(t, 90)),
        "timeout_rate": float(1 - ok.mean()) if len(ok) else 0.0, "queries": len(subs),
        "triples_activated_mean": float(act.mean()) if len(act) else 0.0,
        "triples_activated_median": float(np.median(act)) if len(act) else 0.0,
        # total time of the queries that finished / the triples they activated
        "ns_per_triple": float(t[ok].sum() * 1e6 / done) if done > 0 else None,
    }


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


def _timeout_ms(cfg, k: int) -> float | None:
    """``timeout_ms_per_hop · k`` ms, or ``None`` (no limit) when the setting is null."""
    per_hop = cfg.get("timeout_ms_per_hop")
    return None if per_hop is None else float(per_hop) * k


def _run_scale(kg, cfg, hops, order, labels, sets_by_k) -> tuple[dict, dict, dict]:
    """Time every label on ``kg``: ``(results, answers, build_s)``."""
    common = dict(semantics=str(cfg.semantics), direction=str(cfg.direction), max_paths=0,
                  return_triples=bool(cfg.return_triples))
    rets, build = {}, {}
    for name in order:
        engine, batch = labels[name]
        t0 = time.perf_counter()
        rets[name] = make_retriever(engine, kg, cfg, batch=batch, timeout_ms=None, **common)
        rets[name].retrieve(sets_by_k[hops[0]][0], 1)  # build indexes / JIT (untimed warm-up)
        build[name] = time.perf_counter() - t0
        print(f"[bench] {kg.name}: built {name} in {build[name]:.1f} s", file=sys.stderr, flush=True)
    single = {lb: rets[lb] for lb in order if labels[lb][1] <= 1}
    counter = build_retriever("numba", kg, semantics=str(cfg.semantics), direction=str(cfg.direction),
                              max_paths=0, return_triples=True, timeout_ms=None)
    results: dict[str, dict] = {lb: {} for lb in order}
    answers: dict[str, dict[int, list]] = {lb: {} for lb in order}
    for k in hops:
        sets = sets_by_k[k]
        for r in rets.values():
            r.timeout_ms = _timeout_ms(cfg, k)
        act = activated_triples(kg, sets, k, str(cfg.semantics), str(cfg.direction), counter)
        timed = _time_interleaved(single, sets, k, int(cfg.get("repeats", 1))) if single else {}
        for lb in order:
            if lb not in timed:
                timed[lb] = _time_batched(rets[lb], sets, k, labels[lb][1])
            times, subs = timed[lb]
            answers[lb][k] = [None if s.timed_out else rets[lb].answer_set(s) for s in subs]
            results[lb][str(k)] = _row(times, subs, act)
            if hasattr(rets[lb], "stats"):
                results[lb][str(k)]["cache"] = rets[lb].stats()
            print(f"[bench] {kg.name} {lb} k={k}: median {np.median(times):.3f} ms, mean {np.mean(times):.3f} ms",
                  file=sys.stderr, flush=True)
    del rets, counter
    return results, answers, build


def run_bench(cfg: DictConfig, kg=None) -> dict[str, Any]:
    """Run the benchmark described by ``cfg`` (conf/bench/config.yaml); returns the JSON dict."""
    kg = kg if kg is not None else instantiate(cfg.kg)
    hops = [int(h) for h in cfg.hops]
    backends = list(cfg.backends)
    ref_name = str(cfg.reference)
    order = [ref_name] + [b for b in backends if b != ref_name]
    labels = {label: parse_backend(label, int(cfg.batch)) for label in order}  # validate all before any timing
    for engine, _ in labels.values():
        retriever_conf(engine)
    if any(e.startswith("logoskg_lib") for e, _ in labels.values()):
        from kgreason.retrieval.logoskg_lib import load_library

        load_library()  # no LOGOSKG_SRC: fail before the first query, saying how to get it
    sets_by_k = {k: seed_sets(kg, int(cfg.queries), int(cfg.min_seeds), int(cfg.max_seeds), int(cfg.seed) + k)
                 for k in hops}
    factors = [int(f) for f in (cfg.get("scale") or [1])]
    by_scale: dict[str, dict] = {}
    answers: dict[str, dict] = {}
    for f in factors:
        big = pad_kg(kg, f)
        res, ans, build = _run_scale(big, cfg, hops, order, labels, sets_by_k)
        _jaccards(res, ans, backends, hops, ref_name)
        for lb in backends:
            res[lb]["_build_s"] = build[lb]
            res[lb]["_batch"] = labels[lb][1]
        by_scale[str(f)] = {"n_entities": big.n_entities, "n_triples": big.n_triples,
                            "results": {lb: res[lb] for lb in backends}}
        answers[str(f)] = ans
        del big
    first = str(factors[0])
    results = by_scale[first]["results"]
    out: dict[str, Any] = {
        "kg": {"n_entities": kg.n_entities, "n_triples": kg.n_triples, "name": kg.name},
        "machine": machine(),
        "config": OmegaConf.to_container(cfg, resolve=True),
        "results": results,
        "speedup_vs": _speedups(results, hops, labels),
        "table2": table2(results, hops),
    }
    if len(factors) > 1:
        out["scale"] = by_scale
        out["scale_ratio"] = {  # median time at each factor / at the first factor, per backend and k
            str(f): {lb: {str(k): by_scale[str(f)]["results"][lb][str(k)]["median_ms"]
                          / max(results[lb][str(k)]["median_ms"], 1e-9) for k in hops} for lb in backends}
            for f in factors[1:]}
        out["scale_answers_equal"] = all(
            _same_answers(answers[str(f)][lb][k], answers[first][lb][k])
            for f in factors[1:] for lb in backends for k in hops)
    if cfg.get("large"):
        out["large"] = run_large(kg, cfg)
    print(format_table(out, hops))
    p = out_path(cfg.get("out"))
    if p is not None:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(out, indent=2))
        print(f"bench results: {p}   (another file: out=<path>.json; none: out=none)")
    return out


def out_path(out: Any) -> Path | None:
    """Where the bench writes its JSON: ``out=<path>``, or by default (``auto``) a new file under
    ``<paths.output>/bench/`` (``$KGREASON_OUTPUT``, else ``outputs/``) named by date and time;
    ``out=none`` writes nothing."""
    import time

    from kgreason.paths import resolve

    if out is None or str(out).lower() in ("none", "null", "false", ""):
        return None
    if str(out) == "auto":
        return Path(resolve("output")) / "bench" / time.strftime("%Y-%m-%d/%H-%M-%S_retrieval.json")
    return Path(str(out))


def _same_answers(a: list, b: list) -> bool:
    return all(x is None or y is None or np.array_equal(np.sort(x), np.sort(y)) for x, y in zip(a, b))


def _jaccards(results, answers, backends, hops, ref_name) -> None:
    """``jaccard_min`` over queries where neither engine timed out, and ``identical``: every such
    answer set equals the reference's."""
    for name in backends:
        for k in hops:
            pairs = [(a, b) for a, b in zip(answers[name][k], answers[ref_name][k]) if a is not None and b is not None]
            row = results[name][str(k)]
            row["jaccard_min"] = min((_jaccard(a, b) for a, b in pairs), default=None)
            row["jaccard_n"] = len(pairs)
            row["identical"] = bool(pairs) and all(np.array_equal(np.sort(a), np.sort(b)) for a, b in pairs)


def _speedups(results, hops, labels) -> dict[str, Any]:
    """Median-time ratios per k.

    * ``igraph`` / ``networkx`` / ``graphblas`` / ``logoskg_lib``: baseline / best CPU LogosKG
      engine of kgreason (``best_cpu``, chosen at the largest k among the scipy, numba and torch
      labels) by median; ``<baseline>_mean``: the same by mean (the paper's QT).
    * ``batched``: for every label timed with batches (``ENGINE@B`` or ``batch`` > 1):
      ``vs_single`` = the same engine with batch 1 / this label, and ``vs_best_cpu_single`` =
      the fastest single-query CPU engine (``best_cpu_single``) / this label; per query, as
      ``median_ms`` is per query for batched labels too.
    """
    def ratios(num: str, den: str, key: str = "median_ms") -> dict[str, float]:
        return {str(k): results[num][str(k)][key] / max(results[den][str(k)][key], 1e-9) for k in hops}

    k_last = str(hops[-1])
    cpu = [b for b in results if labels[b][0] in LOGOSKG_CPU]
    sp: dict[str, Any] = {}
    if cpu:
        best = min(cpu, key=lambda b: results[b][k_last]["median_ms"])
        sp["best_cpu"] = best
        for base in BASELINES:
            if base in results:
                sp[base] = ratios(base, best)
                sp[f"{base}_mean"] = ratios(base, best, "mean_ms")
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


#: the factors of LogosKG Table 3 ("Exp. 1: hops", "Exp. 2: batch size", "Exp. 3: cache size",
#: "Exp. 4: backend"), in the paper's order: ``large_sweep.vary`` varies each around ``large_sweep.base``
TABLE3_FACTORS = ("hops", "batch", "cache_size", "backend")


def large_settings(L) -> list[tuple[str | None, dict[str, Any]]]:
    """The LogosKG-Large runs ``large_sweep`` asks for, as ``(experiment, {hops, batch, cache_size,
    backend})``. With ``base`` and ``vary`` (the Table 3 preset): one experiment per varied factor,
    every other factor at ``base`` (logoskg.txt Table 3 varies one factor at a time: "Exp. 2:
    batch size (Numba, cache size n = 16, hops k = 2)"); else the grid hops × ``batch_sizes`` ×
    ``cache_sizes`` on the ``numpy`` backend (experiment None)."""
    vary = L.get("vary")
    if vary:
        base = dict(L.base)
        unknown = sorted(set(vary) - set(TABLE3_FACTORS)) + sorted(set(TABLE3_FACTORS) - set(base))
        if unknown:
            raise ValueError(f"large_sweep: vary names factors of {list(TABLE3_FACTORS)} and base sets all of them; "
                             f"got vary {list(vary)}, base {sorted(base)}")
        return [(f, {**base, f: v}) for f in TABLE3_FACTORS if f in vary for v in vary[f]]
    return [(None, {"hops": int(k), "batch": int(b), "cache_size": int(c), "backend": str(L.get("backend", "numpy"))})
            for k in L.hops for b in L.batch_sizes for c in L.cache_sizes]


def run_large(kg, cfg) -> list[dict[str, Any]]:
    """LogosKG-Large (Table 3): for each setting of :func:`large_settings`, a cold LRU cache of
    ``cache_size`` partitions, the seed sets answered ``batch`` at a time with ``retrieve_many``:
    total time (``qt_ms``, the whole set, as Table 3's QT grows 70× from batch 10 to batch 1),
    time per query, partition loads, hits and evictions. A backend this machine cannot run
    (``torch_cuda`` without a GPU) gives a row with ``skipped`` and the reason, not a failure."""
    import tempfile

    from kgreason.retrieval.partitioned import build_partitions

    L = cfg.large_sweep
    rows = []
    sets_by_k: dict[int, list[list[int]]] = {}
    warmed: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="kgreason-bench-parts-") as d:
        layouts = {"out": ["by_head"], "in": ["by_tail"], "both": ["by_head", "by_tail"]}[str(cfg.direction)]
        build_partitions(kg, d, int(L.n_partitions), layouts=layouts)
        for exp, s in large_settings(L):
            k, b, c, backend = int(s["hops"]), int(s["batch"]), int(s["cache_size"]), str(s["backend"])
            if k not in sets_by_k:
                sets_by_k[k] = seed_sets(kg, int(L.queries), int(cfg.min_seeds), int(cfg.max_seeds),
                                         int(cfg.seed) + 1000 + k)
            sets = sets_by_k[k]
            row: dict[str, Any] = {**({"experiment": exp} if exp else {}), "hops": k, "batch": b, "cache_size": c,
                                   "backend": backend}
            try:
                ret = build_retriever("partitioned", kg, n_partitions=int(L.n_partitions), cache_size=c, directory=d,
                                      semantics=str(cfg.semantics), direction=str(cfg.direction), max_paths=0,
                                      return_triples=False, timeout_ms=None, backend=backend)
            except Exception as e:  # noqa: BLE001 - a backend this machine lacks (hydra wraps the RuntimeError)
                if "CUDA" not in str(e):
                    raise
                rows.append({**row, "skipped": "no CUDA device on this machine"})
                continue
            if backend not in warmed:  # compile / import the backend once, outside the timed region
                warmed.add(backend)
                build_retriever("partitioned", kg, n_partitions=int(L.n_partitions), cache_size=1, directory=d,
                                semantics=str(cfg.semantics), direction=str(cfg.direction), max_paths=0,
                                return_triples=False, timeout_ms=None, backend=backend).retrieve_many(sets[:1], 1)
            t0 = time.perf_counter()
            for i in range(0, len(sets), b):
                ret.retrieve_many(sets[i:i + b], k)
            total = (time.perf_counter() - t0) * 1000
            rows.append({**row, "qt_ms": total, "ms_per_query": total / len(sets), "queries": len(sets),
                         **{x: ret.stats()[x] for x in ("loads", "hits", "evictions")}})
    return rows


def table2(results, hops) -> dict[str, dict[str, dict[str, Any]]]:
    """The paper's Table 2 cells per backend and k (logoskg.txt §4 Efficiency: "the average query
    time (QT) across all test samples and the timeout rate (TR)"): ``qt_ms`` = the mean over
    every query of the run (timed-out queries with their elapsed time), ``tr`` = the time-out
    rate, ``queries`` = how many were averaged."""
    return {b: {str(k): {"qt_ms": per_k[str(k)]["mean_ms"], "tr": per_k[str(k)]["timeout_rate"],
                         "queries": per_k[str(k)]["queries"]} for k in hops}
            for b, per_k in results.items()}


def format_table(out, hops) -> str:
    kg = out["kg"]
    t2 = out.get("table2") or table2(out["results"], hops)
    n = sorted({c["queries"] for per_k in t2.values() for c in per_k.values()})
    lines = [f"KG {kg['name']}: {kg['n_entities']} entities, {kg['n_triples']} triples",
             f"Table 2: QT = mean ms over {'/'.join(map(str, n))} queries per k (the paper's QT), "
             f"TR = time-out rate %",
             f"{'backend':<16}" + "".join(f"{'k=' + str(k) + ' QT':>14}{'TR':>7}" for k in hops)]
    for name, per_k in t2.items():
        lines.append(f"{name:<16}" + "".join(f"{per_k[str(k)]['qt_ms']:>14.3f}{100 * per_k[str(k)]['tr']:>7.2f}"
                                             for k in hops))
    lines += ["all figures per backend and k:",
             f"{'backend':<16}{'k':>3}{'median_ms':>11}{'mean_ms':>10}{'p90_ms':>10}{'timeout':>8}"
             f"{'act/query':>11}{'ns/triple':>10}{'jaccard_min':>12}"]
    for name, per_k in out["results"].items():
        for k in hops:
            r = per_k[str(k)]
            jm = "n/a" if r["jaccard_min"] is None else f"{r['jaccard_min']:.3f}"
            ns = "n/a" if r["ns_per_triple"] is None else f"{r['ns_per_triple']:.1f}"
            lines.append(f"{name:<16}{k:>3}{r['median_ms']:>11.3f}{r['mean_ms']:>10.3f}{r['p90_ms']:>10.3f}"
                         f"{r['timeout_rate']:>8.2f}{r['triples_activated_mean']:>11.0f}{ns:>10}{jm:>12}")
    sp = out.get("speedup_vs") or {}
    for base in BASELINES:
        if base in sp:
            lines.append(f"speedup {sp['best_cpu']} vs {base} (mean, QT): " +
                         ", ".join(f"k={k}: {v:.1f}x" for k, v in sp[f"{base}_mean"].items()))
            lines.append(f"speedup {sp['best_cpu']} vs {base} (median): " +
                         ", ".join(f"k={k}: {v:.1f}x" for k, v in sp[base].items()))
    for label, row in (sp.get("batched") or {}).items():
        for key, ref in (("vs_single", row.get("single")), ("vs_best_cpu_single", sp.get("best_cpu_single"))):
            if key in row:
                lines.append(f"speedup {label} (per query) vs {ref}: " +
                             ", ".join(f"k={k}: {v:.1f}x" for k, v in row[key].items()))
    for f, per in (out.get("scale_ratio") or {}).items():
        for lb, row in per.items():
            lines.append(f"scale x{f} / x1 median, {lb}: " + ", ".join(f"k={k}: {v:.2f}" for k, v in row.items()))
    lines += format_table3(out.get("large", []))
    return "\n".join(lines)


def format_table3(rows: list[dict[str, Any]]) -> list[str]:
    """LogosKG Table 3's layout for ``large`` rows: one block per experiment (the fixed factors in
    its title), then ``Value | QT (ms) | Loads | Evicts`` per row; grid rows (no experiment) one a line."""
    out: list[str] = []
    names = {"hops": "hops", "batch": "batch size", "cache_size": "cache size", "backend": "backend"}
    blocks = list(dict.fromkeys(r.get("experiment") for r in rows if r.get("experiment")))
    for i, exp in enumerate(blocks, 1):
        rs = [r for r in rows if r.get("experiment") == exp]
        fixed = ", ".join(f"{names[f]} {rs[0][f]}" for f in TABLE3_FACTORS if f != exp)
        out += [f"Table 3, Exp. {i}: {names[exp]} ({fixed}; {rs[0].get('queries', '?')} queries)",
                f"{names[exp]:>12}{'QT (ms)':>14}{'ms/query':>11}{'Loads':>8}{'Evicts':>8}"]
        for r in rs:
            if "skipped" in r:
                out.append(f"{str(r[exp]):>12}  skipped: {r['skipped']}")
            else:
                out.append(f"{str(r[exp]):>12}{r['qt_ms']:>14.2f}{r['ms_per_query']:>11.3f}{r['loads']:>8}"
                           f"{r['evictions']:>8}")
    for r in rows:
        if not r.get("experiment"):
            out.append("large " + " ".join(f"{a}={v:.2f}" if isinstance(v, float) else f"{a}={v}" for a, v in r.items()))
    return out
