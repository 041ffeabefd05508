"""PKG-scale LogosKG-Large benchmark on one machine (logoskg.txt §4, Table 3; issue "Scale out" item 4).

``scale`` 1.0 is PKG size: **54.4M entities, 86.5M triples** (smaller scales keep the ratio).
For each scale, four phases each run in a **fresh subprocess** so the peak RSS (``ru_maxrss`` of
that child, via ``os.wait4``) is per scale and per phase:

1. ``gen``: :func:`~kgreason.kg.synthetic.write_synthetic_kg` streams the power-law KG to
   ``<workdir>/s<scale>/kg`` (``KG.save`` format, memmapped ``.npy``, lazy ``e<i>`` names), then
   ``KG.load`` (mmap) — "generation + compile".
2. ``partition``: :func:`~kgreason.retrieval.partitioned.build_partitions` (``by_head`` layout,
   ``direction=out`` as in the paper) from the memory-mapped arrays.
3. ``query``: LogosKG-Large (:class:`~kgreason.retrieval.partitioned.PartitionedRetriever`) with an
   LRU cache of ``cache_size`` partitions (≤ 1/10 of them) answers ``queries`` seed sets of
   ``min_seeds..max_seeds`` random entities with out-degree > 0 for each k; cold cache per k;
   reports ms/query, loads, hits, evictions and the memory budget (cache partitions × largest
   partition file vs all partitions).
4. ``check`` (scales ≤ ``--check-max-scale``): the same queries on the in-memory Numba and SciPy
   engines; ``equal`` is true when every query's per-hop entity sets match.

``--sweep-scale`` adds a Table-3-shaped sweep (hops × batch × cache size × backend → ms/query,
loads, evictions) in its own subprocess. Example::

    python -m kgreason.bench.scale --scale 0.01 0.03 0.1 --sweep-scale 0.03 --out scale.json

JSON: ``{"machine", "config", "baseline_rss_mb", "scales": [{"scale", "n_entities", "n_triples", "gen", "partition",
"query", "check"}], "sweep": {"scale", "rows": [...]}|null, "growth": {...}}``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

PKG_ENTITIES = 54_400_000
PKG_TRIPLES = 86_500_000


def sizes(scale: float) -> tuple[int, int]:
    """``(n_entities, n_triples)`` at ``scale`` (1.0 = PKG)."""
    return max(2, round(PKG_ENTITIES * scale)), max(1, round(PKG_TRIPLES * scale))


def _rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _dir_bytes(d: Path, pattern: str = "*") -> int:
    return sum(p.stat().st_size for p in Path(d).glob(pattern) if p.is_file())


def _seed_sets(pool: np.ndarray, n: int, lo: int, hi: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [np.sort(rng.choice(pool, size=min(int(rng.integers(lo, hi + 1)), len(pool)), replace=False)).tolist()
            for _ in range(n)]


# ---------------------------------------------------------------------------------- phases
def phase_baseline(a: dict) -> dict:
    """Interpreter + imports + cached Numba kernels: the RSS floor of every phase."""
    from kgreason.kg.store import KG  # noqa: F401
    from kgreason.retrieval.partitioned import assign_partitions

    assign_partitions(np.array([2, 1, 0]), 2)
    return {"self_peak_rss_mb": _rss_mb()}


def phase_gen(a: dict) -> dict:
    from kgreason.kg.store import KG
    from kgreason.kg.synthetic import write_synthetic_kg

    t0 = time.perf_counter()
    write_synthetic_kg(a["kg_dir"], a["n_entities"], a["n_triples"], n_relations=a["n_relations"],
                       seed=a["seed"], alpha=a["alpha"], chunk=a["chunk"])
    gen_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    kg = KG.load(a["kg_dir"])  # validates id ranges over the mapped arrays
    load_s = time.perf_counter() - t0
    return {"gen_s": gen_s, "load_s": load_s, "seconds": gen_s + load_s, "kg_bytes": _dir_bytes(Path(a["kg_dir"])),
            "vocab_bytes": (Path(a["kg_dir"]) / "vocab.json").stat().st_size, "n_triples": kg.n_triples,
            "self_peak_rss_mb": _rss_mb()}


def phase_partition(a: dict) -> dict:
    from kgreason.kg.store import KG
    from kgreason.retrieval.partitioned import build_partitions

    kg = KG.load(a["kg_dir"])
    t0 = time.perf_counter()
    build_partitions(kg, a["part_dir"], a["n_partitions"], layouts=["by_head"])
    secs = time.perf_counter() - t0
    pb = [p.stat().st_size for p in sorted((Path(a["part_dir"]) / "by_head").glob("part_*.npz"))]
    meta = json.loads((Path(a["part_dir"]) / "by_head" / "meta.json").read_text())
    return {"seconds": secs, "n_partitions": a["n_partitions"], "partition_bytes_total": int(sum(pb)),
            "partition_bytes_max": int(max(pb)), "partition_bytes_min": int(min(pb)),
            "partition_triples_max": int(max(meta["partition_triples"])),
            "partition_triples_min": int(min(meta["partition_triples"])), "self_peak_rss_mb": _rss_mb()}


def _retriever(kg, a: dict, cache_size: int):
    from kgreason.bench.retrieval import build_retriever

    return build_retriever("partitioned", kg, n_partitions=a["n_partitions"], cache_size=cache_size,
                           directory=a["part_dir"], load=a.get("load", "mmap"), semantics="within",
                           direction="out", max_paths=0, return_triples=False, timeout_ms=a.get("timeout_ms"),
                           # built from this kg_dir by the partition phase; the check would page the
                           # whole triple arrays into the query phase, whose memory this measures
                           check_kg=False)


def _sets_by_k(ret, a: dict) -> dict[int, list[list[int]]]:
    pool = np.flatnonzero(ret.entity_partition["by_head"] >= 0)  # out-degree > 0
    return {k: _seed_sets(pool, a["queries"], a["min_seeds"], a["max_seeds"], a["seed"] + 100 * k) for k in a["hops"]}


def phase_query(a: dict) -> dict:
    from kgreason.kg.store import KG
    from kgreason.retrieval.partitioned import LRUCache

    kg = KG.load(a["kg_dir"], validate=False)  # mapped; queries read only partitions + entity_partition
    t0 = time.perf_counter()
    ret = _retriever(kg, a, a["cache_size"])
    open_s = time.perf_counter() - t0
    sets = _sets_by_k(ret, a)
    per_k = {}
    for k in a["hops"]:
        ret.cache = LRUCache(a["cache_size"], ret._load)  # cold cache per k
        times, answers, timeouts = [], [], 0
        for s in sets[k]:
            t0 = time.perf_counter()
            sub = ret.retrieve(s, k)
            times.append((time.perf_counter() - t0) * 1000)
            answers.append(int(sum(len(x) for x in sub.entities_by_hop)))
            timeouts += bool(sub.timed_out)
        st = ret.stats()
        per_k[str(k)] = {"median_ms": float(np.median(times)), "mean_ms": float(np.mean(times)),
                         "max_ms": float(np.max(times)), "queries": len(times), "timeouts": timeouts,
                         "loads": st["loads"], "hits": st["hits"], "evictions": st["evictions"],
                         "loads_per_query": st["loads"] / len(times), "answer_mean": float(np.mean(answers)),
                         "answer_max": int(np.max(answers))}
        print(f"[scale] k={k}: median {per_k[str(k)]['median_ms']:.1f} ms, loads {st['loads']}, "
              f"evictions {st['evictions']}", file=sys.stderr, flush=True)
    return {"cache_size": a["cache_size"], "open_s": open_s, "per_k": per_k, "self_peak_rss_mb": _rss_mb()}


def phase_check(a: dict) -> dict:
    """Partitioned answers vs the in-memory Numba and SciPy engines on the query-phase seed sets."""
    from kgreason.bench.retrieval import build_retriever
    from kgreason.kg.store import KG

    kg = KG.load(a["kg_dir"], mmap=False)
    ret = _retriever(kg, {**a, "timeout_ms": None}, a["cache_size"])
    sets = _sets_by_k(ret, a)
    kw = dict(semantics="within", direction="out", max_paths=0, return_triples=True, timeout_ms=None)
    refs = {name: build_retriever(name, kg, **kw) for name in ("numba", "scipy")}
    ret.return_triples = True
    n, mismatches = 0, []
    for k, ss in sets.items():
        for s in ss:
            got = ret.retrieve(s, k)
            for name, eng in refs.items():
                ref = eng.retrieve(s, k)
                same = (len(got.entities_by_hop) == len(ref.entities_by_hop)
                        and all(np.array_equal(np.sort(x), np.sort(y)) for x, y in zip(got.entities_by_hop, ref.entities_by_hop))
                        and all(np.array_equal(np.sort(x, axis=0) if len(x) else x, np.sort(y, axis=0) if len(y) else y)
                                for x, y in zip(got.triples_by_hop, ref.triples_by_hop)))
                n += 1
                if not same:
                    mismatches.append({"engine": name, "k": k, "seeds": s})
    return {"engines": sorted(refs), "compared": n, "equal": not mismatches, "mismatches": mismatches[:5],
            "self_peak_rss_mb": _rss_mb()}


def phase_sweep(a: dict) -> dict:
    """Table-3-shaped sweep: hops × batch × cache size × backend → ms/query, loads, hits, evictions."""
    from kgreason.bench.retrieval import build_retriever
    from kgreason.kg.store import KG

    kg = KG.load(a["kg_dir"])
    rows = []
    base = _retriever(kg, a, 1)
    sets = _sets_by_k(base, {**a, "queries": a["sweep_queries"]})
    for k in a["hops"]:
        for b in a["batch_sizes"]:
            for c in a["sweep_cache_sizes"]:
                ret = _retriever(kg, a, c)
                t0 = time.perf_counter()
                for i in range(0, len(sets[k]), b):
                    ret.retrieve_many(sets[k][i:i + b], k)
                ms = (time.perf_counter() - t0) * 1000 / len(sets[k])
                st = ret.stats()
                rows.append({"backend": "partitioned", "hops": k, "batch": b, "cache_size": c, "ms_per_query": ms,
                             "loads": st["loads"], "hits": st["hits"], "evictions": st["evictions"]})
                print(f"[sweep] {rows[-1]}", file=sys.stderr, flush=True)
    if "numba" in a["sweep_backends"]:
        t0 = time.perf_counter()
        eng = build_retriever("numba", kg, semantics="within", direction="out", max_paths=0, return_triples=False,
                              timeout_ms=None)
        eng.retrieve(sets[a["hops"][0]][0], 1)  # CSR build + JIT
        build_s = time.perf_counter() - t0
        for k in a["hops"]:
            t0 = time.perf_counter()
            for s in sets[k]:
                eng.retrieve(s, k)
            ms = (time.perf_counter() - t0) * 1000 / len(sets[k])
            rows.append({"backend": "numba (in-memory)", "hops": k, "batch": 1, "cache_size": None,
                         "ms_per_query": ms, "loads": None, "hits": None, "evictions": None, "build_s": build_s})
    return {"rows": rows, "queries": a["sweep_queries"], "self_peak_rss_mb": _rss_mb()}


PHASES = {"baseline": phase_baseline, "gen": phase_gen, "partition": phase_partition, "query": phase_query, "check": phase_check,
          "sweep": phase_sweep}


# ---------------------------------------------------------------------------------- driver
def run_phase(phase: str, args: dict, inline: bool = False) -> dict:
    """Run one phase in a fresh interpreter; adds ``peak_rss_mb`` (the child's ru_maxrss) and ``wall_s``.

    ``inline=True`` runs it in this process instead (fast tests; ``peak_rss_mb`` is then this
    process's peak so far, not per phase)."""
    if inline:
        t0 = time.perf_counter()
        out = json.loads(json.dumps(PHASES[phase](args)))
        out["peak_rss_mb"] = out["self_peak_rss_mb"]
        out["wall_s"] = time.perf_counter() - t0
        return out
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        res_path = f.name
    cmd = [sys.executable, "-m", "kgreason.bench.scale", "_worker", phase, json.dumps(args), res_path]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd)
    try:
        _, status, ru = os.wait4(proc.pid, 0)
    finally:
        proc.returncode = proc.returncode if proc.returncode is not None else 0
    wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    try:
        if code != 0:
            raise RuntimeError(f"phase {phase} failed with exit code {code} ({args.get('scale')})")
        out = json.loads(Path(res_path).read_text())
    finally:
        Path(res_path).unlink(missing_ok=True)
    out["peak_rss_mb"] = ru.ru_maxrss / 1024  # Linux: KiB
    out["wall_s"] = wall
    return out


def _growth(scales: list[dict]) -> dict:
    """Ratios largest/smallest scale and the log-log slope (1.0 = linear in KG size)."""
    if len(scales) < 2:
        return {}
    lo, hi = scales[0], scales[-1]
    size = hi["n_triples"] / lo["n_triples"]
    out: dict[str, Any] = {"from_scale": lo["scale"], "to_scale": hi["scale"], "size_ratio": size}
    metrics = {"gen_s": ("gen", "seconds"), "gen_peak_rss_mb": ("gen", "peak_rss_mb"),
               "partition_s": ("partition", "seconds"), "partition_peak_rss_mb": ("partition", "peak_rss_mb"),
               "query_peak_rss_mb": ("query", "peak_rss_mb")}
    for k in lo["query"]["per_k"]:
        metrics[f"query_k{k}_median_ms"] = ("query", "per_k", k, "median_ms")
    for name, path in metrics.items():
        a, b = lo, hi
        for p in path:
            a, b = a[p], b[p]
        out[name] = {"ratio": b / a if a else None,
                     "loglog_slope": float(np.log(b / a) / np.log(size)) if a and b and size > 1 else None}
    return out


def main(argv: list[str] | None = None) -> dict | None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_worker":
        phase, args, res = argv[1], json.loads(argv[2]), argv[3]
        Path(res).write_text(json.dumps(PHASES[phase](args)))
        return None
    ap = argparse.ArgumentParser(prog="python -m kgreason.bench.scale", description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=float, nargs="+", default=[0.01, 0.03, 0.1], help="1.0 = 54.4M entities / 86.5M triples")
    ap.add_argument("--out", default=None, help="JSON output path")
    ap.add_argument("--workdir", default=None, help="where KGs/partitions go (default: a temp dir under /tmp)")
    ap.add_argument("--keep", action="store_true", help="keep generated KGs and partitions")
    ap.add_argument("--n-relations", type=int, default=50)
    ap.add_argument("--alpha", type=float, default=0.8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--chunk", type=int, default=1_000_000, help="triples per generation chunk")
    ap.add_argument("--n-partitions", type=int, default=64)
    ap.add_argument("--cache-size", type=int, default=4, help="LRU partitions in memory (must be <= n_partitions/10)")
    ap.add_argument("--hops", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--queries", type=int, default=16)
    ap.add_argument("--min-seeds", type=int, default=1)
    ap.add_argument("--max-seeds", type=int, default=5)
    ap.add_argument("--timeout-ms", type=float, default=None, help="per-query limit (None = none)")
    ap.add_argument("--load", choices=["mmap", "read"], default="mmap",
                    help="how a cache load brings a partition in: map it (default) or read it whole")
    ap.add_argument("--check-max-scale", type=float, default=None,
                    help="compare with in-memory engines at scales <= this (default: the smallest scale)")
    ap.add_argument("--sweep-scale", type=float, default=None, help="run the Table-3 sweep at this scale")
    ap.add_argument("--sweep-queries", type=int, default=16)
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--sweep-cache-sizes", type=int, nargs="+", default=[1, 4, 64])
    ap.add_argument("--sweep-backends", nargs="+", default=["partitioned", "numba"])
    ap.add_argument("--inline", action="store_true",
                    help="run phases in this process (tests; peak RSS is then not per scale)")
    o = ap.parse_args(argv)
    if o.cache_size * 10 > o.n_partitions:
        ap.error(f"--cache-size {o.cache_size} must be <= n_partitions/10 ({o.n_partitions / 10:g})")
    from kgreason.bench.retrieval import machine

    scales = sorted(set(o.scale) | ({o.sweep_scale} if o.sweep_scale else set()))
    check_max = min(scales) if o.check_max_scale is None else o.check_max_scale
    work = Path(o.workdir or tempfile.mkdtemp(prefix="kgreason-scale-", dir="/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    config = {k: v for k, v in vars(o).items() if k not in ("out",)}
    inline = o.inline
    config.update(pkg_entities=PKG_ENTITIES, pkg_triples=PKG_TRIPLES, direction="out", semantics="within")
    result: dict[str, Any] = {"machine": machine(), "config": config, "scales": [], "sweep": None,
                              "baseline_rss_mb": run_phase("baseline", {}, inline)["peak_rss_mb"]}
    for s in scales:
        n, m = sizes(s)
        sd = work / f"s{s:g}"
        a = {"scale": s, "n_entities": n, "n_triples": m, "kg_dir": str(sd / "kg"), "part_dir": str(sd / "parts"),
             "n_relations": o.n_relations, "alpha": o.alpha, "seed": o.seed, "chunk": o.chunk,
             "n_partitions": o.n_partitions, "cache_size": o.cache_size, "hops": o.hops, "queries": o.queries,
             "min_seeds": o.min_seeds, "max_seeds": o.max_seeds, "timeout_ms": o.timeout_ms, "load": o.load,
             "sweep_queries": o.sweep_queries, "batch_sizes": o.batch_sizes,
             "sweep_cache_sizes": [c for c in o.sweep_cache_sizes if c <= o.n_partitions],
             "sweep_backends": o.sweep_backends}
        shutil.rmtree(sd, ignore_errors=True)
        print(f"[scale] {s:g}: {n:,} entities, {m:,} triples -> {sd}", file=sys.stderr, flush=True)
        row: dict[str, Any] = {"scale": s, "n_entities": n, "n_triples": m}
        row["gen"] = run_phase("gen", a, inline)
        row["partition"] = run_phase("partition", a, inline)
        in_main = s in o.scale
        if in_main:
            row["query"] = run_phase("query", a, inline)
            q = row["query"]
            q["cache_budget_bytes"] = o.cache_size * row["partition"]["partition_bytes_max"]
            q["partitions_total_bytes"] = row["partition"]["partition_bytes_total"]
            q["cache_fraction"] = q["cache_budget_bytes"] / max(1, q["partitions_total_bytes"])
            row["check"] = run_phase("check", a, inline) if s <= check_max else None
        if o.sweep_scale is not None and s == o.sweep_scale:
            result["sweep"] = {"scale": s, "n_entities": n, "n_triples": m, **run_phase("sweep", a, inline)}
        if in_main:
            result["scales"].append(row)
        print(f"[scale] {s:g} done: gen {row['gen']['seconds']:.1f}s/{row['gen']['peak_rss_mb']:.0f}MB, "
              f"partition {row['partition']['seconds']:.1f}s/{row['partition']['peak_rss_mb']:.0f}MB"
              + (f", query RSS {row['query']['peak_rss_mb']:.0f}MB" if in_main else ""), file=sys.stderr, flush=True)
        if not o.keep:
            shutil.rmtree(sd, ignore_errors=True)
        if o.out:  # checkpoint after every scale
            Path(o.out).write_text(json.dumps({**result, "growth": _growth(result["scales"])}, indent=2))
    if not o.keep and o.workdir is None:
        shutil.rmtree(work, ignore_errors=True)
    result["growth"] = _growth(result["scales"])
    print(format_table(result))
    if o.out:
        Path(o.out).parent.mkdir(parents=True, exist_ok=True)
        Path(o.out).write_text(json.dumps(result, indent=2))
        print(f"wrote {o.out}")
    return result


def format_table(r: dict) -> str:
    hops = r["config"]["hops"]
    head = (f"{'scale':>7}{'entities':>12}{'triples':>12}{'gen_s':>8}{'genMB':>8}{'part_s':>8}{'partMB':>8}"
            f"{'qMB':>7}{'cache%':>8}" + "".join(f"{'k' + str(k) + '_ms':>10}{'ld':>6}{'ev':>6}" for k in hops) + "  equal")
    lines = [head]
    for s in r["scales"]:
        q = s["query"]
        line = (f"{s['scale']:>7g}{s['n_entities']:>12,}{s['n_triples']:>12,}{s['gen']['seconds']:>8.1f}"
                f"{s['gen']['peak_rss_mb']:>8.0f}{s['partition']['seconds']:>8.1f}{s['partition']['peak_rss_mb']:>8.0f}"
                f"{q['peak_rss_mb']:>7.0f}{100 * q['cache_fraction']:>8.1f}")
        for k in hops:
            pk = q["per_k"][str(k)]
            line += f"{pk['median_ms']:>10.1f}{pk['loads']:>6}{pk['evictions']:>6}"
        line += "  " + ("-" if s["check"] is None else str(s["check"]["equal"]))
        lines.append(line)
    if r.get("sweep"):
        lines.append(f"sweep at scale {r['sweep']['scale']:g} ({r['sweep']['queries']} queries):")
        for row in r["sweep"]["rows"]:
            lines.append("  " + " ".join(f"{a}={v:.2f}" if isinstance(v, float) else f"{a}={v}" for a, v in row.items()))
    return "\n".join(lines)


if __name__ == "__main__":
    main()
