"""``kgreason tables`` / ``python -m kgreason.tables``: the command line."""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Iterator, Sequence

from kgreason import stats
from kgreason.storage.bundle import readable
from kgreason.tables.build import write_tables
from kgreason.tables.cells import MAX_BOOT, CIOptions
from kgreason.tables.labels import parse_labels

DESCRIPTION = "Paper tables from run / multirun dirs, and the hop-distribution plot."


def boot_count(text: str) -> int:
    """``--boot``: a whole number, also written ``1e4``; its ceiling is checked by :class:`CIOptions`."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of resamples, got {text!r}") from None
    if not v.is_integer():
        raise argparse.ArgumentTypeError(f"expected a whole number of resamples, got {text!r}")
    return int(v)


def error_text(e: BaseException) -> str:
    """The one line a tool prints for ``e``: a KeyError's or our own FileNotFoundError's message
    without quotes, a file-system error as Python words it (``[Errno 20] Not a directory: 'path'``,
    not its bare number)."""
    if len(e.args) == 1 and isinstance(e.args[0], str):
        return e.args[0]
    return str(e)


@contextlib.contextmanager
def readable_all(paths: Sequence[str]) -> Iterator[tuple[Path, Path | None]]:
    """:func:`readable` over one or several sources. One: as :func:`readable`. Several: each is
    opened (a bundle unpacked), and each of its run dirs (:func:`job_dirs`) is linked into a
    temporary folder as ``<k>_<run>``, numbered in the order given, so the runs of all of them are
    read as one sweep (each a run dir, a sweep dir or a bundle); the default output dir is
    ``outputs/tables`` under the working directory. A source that is not there raises
    FileNotFoundError naming it, one that holds no run dir ValueError naming it (else its runs
    would be missing from the table without a word)."""
    from kgreason.tables.collect import job_dirs

    if len(paths) == 1:
        with readable(paths[0]) as got:
            yield got
        return
    for p in paths:
        if not Path(p).exists():
            raise FileNotFoundError(f"{p}: no such run dir, sweep dir or bundle")
    tmp = Path(tempfile.mkdtemp(prefix="kgreason-tables-"))
    try:
        with contextlib.ExitStack() as stack:
            k = 0
            for p in paths:
                root, _ = stack.enter_context(readable(p))
                jobs = job_dirs(root)
                if not jobs:
                    raise ValueError(f"{p}: no run dir in it (a run dir holds run.json or .hydra/; a sweep dir "
                                     "holds run dirs; a bundle, its runs/)")
                for job in jobs:
                    (tmp / f"{k}_{job.name}").symlink_to(job.absolute(), target_is_directory=True)
                    k += 1
            yield tmp, Path("outputs") / "tables"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kgreason.tables", description=DESCRIPTION)
    ap.add_argument("dir", nargs="+",
                    help="a run dir, a multirun (sweep) dir or a run bundle (.tar.gz, kgreason bundle); several "
                         "are read as one sweep, their runs in the order given (default --out: outputs/tables)")
    ap.add_argument("--rows", default="reasoner,ablation,variant", help="comma-separated row axes")
    ap.add_argument("--cols", default="dataset,metric",
                    help="comma-separated column axes; a swept override works too, e.g. "
                         "--rows reasoner.depth --cols reasoner.width,metric for ReKnoS Table 4")
    ap.add_argument("--metrics", default=None, help="metric names (default: every metric/* key)")
    ap.add_argument("--out", default=None, help="output dir (default: the given dir)")
    ap.add_argument("--name", default="results", help="file stem of the written tables")
    ap.add_argument("--digits", type=int, default=None,
                    help="decimals of every figure (default: 3 in the Markdown; in the .tex, the precision the "
                         "questions support: 2 decimals up to 100 questions, 3 above; docs/metrics.md)")
    ap.add_argument("--tex-ci", choices=("below", "sub", "pm"), default="below",
                    help="the .tex cell's interval: on a second line under the means (default), as a subscript, "
                         "or as ± half its width")
    ap.add_argument("--tex-label", default=None, metavar="LABEL",
                    help="the .tex table's \\label (default tab:<--name>), e.g. tab:metaqa-ablation")
    ap.add_argument("--caption", default=None, metavar="TEXT",
                    help="the .tex table's caption, LaTeX as written (default: the datasets, the model, the "
                         "questions and seeds, and what a cell shows; the full explanation is a note under it)")
    ap.add_argument("--ci", choices=("bootstrap", "none"), default="bootstrap",
                    help="interval per cell: percentile bootstrap over the questions (default) or none")
    ap.add_argument("--boot", type=boot_count, default=stats.DEFAULT_B,
                    help=f"bootstrap resamples B (default 2000, at most {MAX_BOOT:,}; 1e4 is read as 10000)")
    ap.add_argument("--ci-level", type=float, default=stats.DEFAULT_LEVEL, help="interval level (default 0.95)")
    ap.add_argument("--ci-seed", type=int, default=stats.DEFAULT_SEED, help="seed of the resampling (default 0)")
    ap.add_argument("--baseline", default=None,
                    help="AXIS=VALUE (reasoner=io, ablation=none): paired differences of every row to that row "
                         "on the same questions, with interval, p-value and McNemar's exact test for 0/1 metrics")
    ap.add_argument("--paper", nargs="?", const=True, default=None, metavar="PRESET",
                    help="print the paper's values beside ours from experiments/PRESET/paper.yaml (default "
                         "PRESET: the sweep's experiment=)")
    ap.add_argument("--allow-partial", action="store_true",
                    help="average a partial run (stopped before its last example) with complete seeds of the same "
                         "setting; without it such a table is refused, naming the partial job dirs")
    ap.add_argument("--label", action="append", default=None, metavar="METRIC=LABEL",
                    help="a column header of your own, e.g. --label hits_at_1=H@1 (repeat it, or give several "
                         "comma-separated); the defaults are Hits@1, F1, EM, Coverage, ... (docs/metrics.md)")
    ap.add_argument("--funnel", action="store_true",
                    help="instead of the results table: each run's funnel, a row per run and a column per stage "
                         "in the reasoner's order (the share of its questions that reached it; metrics.json "
                         "funnel/*), written to NAME_funnel.md and NAME_funnel.csv")
    args = ap.parse_args(argv)
    split = lambda s: [x.strip() for x in s.split(",") if x.strip()]  # noqa: E731
    if args.funnel:
        return _funnel(args)
    try:
        ci = CIOptions(args.ci, args.boot, args.ci_level, args.ci_seed)
        with readable_all(args.dir) as (root, bundle_out):  # a bundle (.tar.gz) is read as its sweep dir
            paths = write_tables(root, split(args.rows), split(args.cols),
                                 split(args.metrics) if args.metrics else None, args.out or bundle_out, args.name,
                                 3 if args.digits is None else args.digits, ci, args.baseline, args.paper,
                                 args.allow_partial, parse_labels(args.label), tex_ci=args.tex_ci,
                                 tex_label_text=args.tex_label, tex_caption=args.caption, tex_digits_=args.digits)
    except (OSError, KeyError, ValueError) as e:  # OSError: --out under a file, not writable, a full disk
        print(f"error: {error_text(e)}", file=sys.stderr)
        return 2
    sys.stdout.write(paths["md"].read_text())
    print("\nwrote " + ", ".join(str(p) for p in paths.values()))
    return 0


def _funnel(args) -> int:
    """``--funnel``: the funnel tables of the runs under ``args.dir`` (kgreason/tables/funnel.py)."""
    from kgreason.tables.funnel import write_funnels

    try:
        with readable_all(args.dir) as (root, bundle_out):
            paths = write_funnels(root, args.out or bundle_out, args.name, 3 if args.digits is None else args.digits)
    except (OSError, KeyError, ValueError) as e:
        print(f"error: {error_text(e)}", file=sys.stderr)
        return 2
    sys.stdout.write(paths["md"].read_text(encoding="utf-8"))
    print("\nwrote " + ", ".join(str(p) for p in paths.values()))
    return 0
