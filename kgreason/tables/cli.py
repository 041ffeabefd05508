"""``kgreason tables`` / ``python -m kgreason.tables``: the command line."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from kgreason import stats
from kgreason.tables.build import write_tables
from kgreason.tables.cells import CIOptions

DESCRIPTION = "Paper tables from run / multirun dirs, and the hop-distribution plot."


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kgreason.tables", description=DESCRIPTION)
    ap.add_argument("dir", help="a run dir or a multirun (sweep) dir")
    ap.add_argument("--rows", default="reasoner,ablation,variant", help="comma-separated row axes")
    ap.add_argument("--cols", default="dataset,metric",
                    help="comma-separated column axes; a swept override works too, e.g. "
                         "--rows reasoner.depth --cols reasoner.width,metric for ReKnoS Table 4")
    ap.add_argument("--metrics", default=None, help="metric names (default: every metric/* key)")
    ap.add_argument("--out", default=None, help="output dir (default: the given dir)")
    ap.add_argument("--name", default="results", help="file stem of the written tables")
    ap.add_argument("--digits", type=int, default=3)
    ap.add_argument("--ci", choices=("bootstrap", "none"), default="bootstrap",
                    help="interval per cell: percentile bootstrap over the questions (default) or none")
    ap.add_argument("--boot", type=int, default=stats.DEFAULT_B, help="bootstrap resamples B (default 2000)")
    ap.add_argument("--ci-level", type=float, default=stats.DEFAULT_LEVEL, help="interval level (default 0.95)")
    ap.add_argument("--ci-seed", type=int, default=stats.DEFAULT_SEED, help="seed of the resampling (default 0)")
    ap.add_argument("--baseline", default=None,
                    help="AXIS=VALUE (reasoner=io, ablation=none): paired differences of every row to that row "
                         "on the same questions, with interval, p-value and McNemar's exact test for 0/1 metrics")
    ap.add_argument("--paper", nargs="?", const=True, default=None, metavar="PRESET",
                    help="print the paper's values beside ours from experiments/PRESET/paper.yaml (default "
                         "PRESET: the sweep's experiment=)")
    args = ap.parse_args(argv)
    split = lambda s: [x.strip() for x in s.split(",") if x.strip()]  # noqa: E731
    try:
        ci = CIOptions(args.ci, args.boot, args.ci_level, args.ci_seed)
        paths = write_tables(args.dir, split(args.rows), split(args.cols),
                             split(args.metrics) if args.metrics else None, args.out, args.name, args.digits,
                             ci, args.baseline, args.paper)
    except (FileNotFoundError, KeyError, ValueError) as e:
        print(f"error: {e.args[0] if e.args else e}", file=sys.stderr)
        return 2
    sys.stdout.write(paths["md"].read_text())
    print("\nwrote " + ", ".join(str(p) for p in paths.values()))
    return 0
