"""``kgreason bench callstore``: lookups per second of the call store (kgreason/storage/callstore.py).

Fills a store in a temporary directory with ``--n`` entries shaped like cached LLM replies (about
``--size`` characters of text each), then reads ``--reads`` random keys (all hits) from a freshly
opened store, and as many keys that are not there (misses), and prints one JSON line::

    {"n": 5000, "hits_per_s": ..., "misses_per_s": ..., "open_s": ..., "put_per_s": ...}

Compare two versions by running the same command on each (docs/scaling.md gives the ratio); no
wall time is asserted anywhere in the tests.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path


def _open(root: Path, mode: str = "readwrite"):
    try:
        from kgreason.storage.callstore import KeyValueStore
        return KeyValueStore(root / "calls", mode=mode)
    except ImportError:  # before the store moved (kept so the "before" number can be measured)
        from kgreason.callstore import KeyValueStore
        return KeyValueStore(root / "calls.sqlite", mode=mode)


def measure(n: int = 5000, reads: int = 20000, size: int = 1500, seed: int = 0) -> dict:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="kgr-bench-store-") as d:
        root = Path(d)
        store = _open(root)
        keys = [f"{i:064x}" for i in range(n)]
        t0 = time.perf_counter()
        for k in keys:
            store.put(k, {"texts": ["x" * size], "usage": {"calls": 1, "prompt_tokens": 100}, "paid_by": ["r", "e"]},
                      backend="b", model="m", method="generate")
        put_s = time.perf_counter() - t0
        store.close()
        t0 = time.perf_counter()
        store = _open(root, "readonly")
        store.get(keys[0])
        open_s = time.perf_counter() - t0
        picks = [rng.choice(keys) for _ in range(reads)]
        t0 = time.perf_counter()
        for k in picks:
            if store.get(k) is None:
                raise AssertionError(f"bench: lost entry {k}")
        hit_s = time.perf_counter() - t0
        n_miss = max(1, reads // 20)
        t0 = time.perf_counter()
        for i in range(n_miss):
            if store.get(f"miss-{i}") is not None:
                raise AssertionError("bench: a miss was a hit")
        miss_s = time.perf_counter() - t0
        store.close()
    return {"n": n, "reads": reads, "size": size, "hits_per_s": round(reads / hit_s),
            "misses_per_s": round(n_miss / miss_s), "open_s": round(open_s, 4), "put_per_s": round(n / put_s)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kgreason bench callstore", description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--reads", type=int, default=20000)
    ap.add_argument("--size", type=int, default=1500)
    a = ap.parse_args(argv)
    print(json.dumps(measure(a.n, a.reads, a.size)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
