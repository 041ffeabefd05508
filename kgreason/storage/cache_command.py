"""``kgreason cache stats|merge DIR``: describe or compact a call-cache directory.

``DIR`` is an ``llm_cache.dir`` (its stores ``llm_calls/`` and ``sparql_calls/`` are each handled)
or one store's shard directory. ``merge`` folds a store's shards (one per process that wrote it)
into one: run it when a cluster's jobs are done, to keep the directory small and opening fast. It
is safe at any time: beside jobs that write, beside a second merge (which waits), and stopped
at any point (Ctrl-C, a kill, a full disk) every record stays readable and the next merge
finishes the work (:func:`kgreason.storage.callstore.merge`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kgreason.storage.callstore import SHARD_SUFFIX, is_shard, merge, stats

STORES = ("llm_calls", "sparql_calls")


def store_dirs(d: Path) -> list[Path]:
    """The shard directories under an ``llm_cache.dir`` (or ``d`` itself when it is one)."""
    if any(is_shard(p.name) for p in d.iterdir()):
        return [d]
    return [d / s for s in STORES if (d / s).is_dir()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kgreason cache", description=__doc__.split("\n\n")[0])
    ap.add_argument("action", choices=("stats", "merge"))
    ap.add_argument("dir", help="an llm_cache.dir, or one store's shard directory")
    ap.add_argument("--grace-s", type=float, default=2.0,
                    help="merge: seconds between setting a shard aside and reading it (a write under way lands)")
    a = ap.parse_args(argv)
    d = Path(a.dir).expanduser()
    dirs = store_dirs(d) if d.is_dir() else []
    if not dirs:
        legacy = [p.name for p in d.glob("*.sqlite")] if d.is_dir() else []
        hint = f" (found {', '.join(legacy)}: an older cache, migrated when a run opens it)" if legacy else ""
        print(f"kgreason cache: error: {d}: no call store here (expected llm_calls/ or sparql_calls/ of shard "
              f"files *{SHARD_SUFFIX}){hint}", file=sys.stderr)
        return 2
    for s in dirs:
        try:
            if a.action == "stats":
                st = stats(s)
                print(f"{s.name}: {st['shards']} shards, {st['records']} records, {st['keys']} keys, "
                      f"{st['bytes'] / 1e6:.1f} MB, {st['damaged_lines']} damaged lines, {st['torn_tails']} torn tails")
                for k, n in st["by_model"].items():
                    print(f"  {k}: {n}")
            else:
                out = merge(s, grace_s=a.grace_s)
                kept = f"; {out['kept']} written to during the merge stay as shards" if out.get("kept") else ""
                print(f"{s.name}: {out['shards_before']} shards merged into {1 if out['shards_before'] else 0} "
                      f"({out['keys']} keys){kept}")
        except KeyboardInterrupt:
            print(f"kgreason cache: {a.action} of {s} stopped (Ctrl-C); every record is still in a readable shard"
                  + (": run the merge again to finish it" if a.action == "merge" else ""), file=sys.stderr)
            return 130
        except OSError as e:  # a full disk, a read-only or vanished folder: nothing was removed
            print(f"kgreason cache: error: {a.action} of {s}: {e}; every record is still in a readable shard",
                  file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
