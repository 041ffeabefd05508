"""``python experiments/validation/run_validation.py``: the validation runner's command line
(measure rows, collect run dirs, restore a partial row from its bundle, check every bundled row's
currency, retire a row to the history section, write the generated tables)."""

from __future__ import annotations

import argparse
import json
import os
import sys

from validation_runner import DOC, places
from validation_runner.rows import DEV_SIZE, ROUTES, ROWS, SPLITS, tag


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=DOC, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20, help="questions per row (dev: the first N <= 20; heldout: N)")
    ap.add_argument("--split", choices=SPLITS, default="dev",
                    help="dev: the first 20 questions (prompts and settings are chosen on these only); "
                         "heldout: N seeded questions disjoint from dev (the reported table)")
    ap.add_argument("--heldout-skip", type=int, default=0, metavar="K",
                    help="heldout: skip the first K questions of the seeded order, a fresh draw disjoint from the "
                         "first K (re-measuring a row whose first draw was looked at); its table is heldout_n<N>_skip<K>")
    ap.add_argument("--rows", default=",".join(ROWS), help="comma-separated row names")
    ap.add_argument("--cache", default=os.path.expanduser(places.DEFAULT_CACHE))
    ap.add_argument("--workers", type=int, default=8, help="example_workers (batched on the local model)")
    ap.add_argument("--threads", type=int, default=2, help="llm.n_threads (torch CPU threads)")
    ap.add_argument("--route", choices=sorted(ROUTES), default="transformers",
                    help="the model's route; llamacpp rows go to validation_n<N>_llamacpp.json")
    ap.add_argument("--print", action="store_true", help="print the commands and exit")
    ap.add_argument("--fresh", action="store_true",
                    help="delete each row's run dir first (re-parse every cached reply, e.g. after a parser fix)")
    ap.add_argument("--table", action="store_true", help="print the committed rows as markdown and exit")
    ap.add_argument("--stamp-code", action="store_true",
                    help="stamp the committed rows that have no `code` record from git history (the method "
                         "files as they were in the first commit holding each row's metrics) and exit")
    ap.add_argument("--write-docs", action="store_true",
                    help="rewrite the generated tables in README.md and docs/validation.md from the JSON and exit")
    ap.add_argument("--stop-after", type=float, default=None, metavar="SECONDS",
                    help="a sitting with a time budget: each row's run gets SIGTERM after SECONDS, writes "
                         "what it answered, and is committed as a partial row (resume it with the same "
                         "command); a row that finishes sooner is a full row")
    ap.add_argument("--stop-at", type=int, default=None, metavar="K",
                    help="a sitting with a question budget: each row's run gets SIGTERM once its run dir holds K "
                         "answered questions and is committed as a partial row (a row answering from the call cache "
                         "may pass K by a question or two; a row already at K is not run). With several --rows, a baseline first grows its arms' cache: --rows "
                         "metaqa_sgr,metaqa_sgr_no_schema --stop-at 50 grows both to the same 50 questions")
    ap.add_argument("--collect", action="store_true",
                    help="run nothing: summarise each row's run dir as it stands (a row stopped early is "
                         "committed with partial: true and its own N; pairings are taken again)")
    ap.add_argument("--from-bundle", action="store_true",
                    help="resume a partial row on a machine without its run dir: first restore the run dir and "
                         "its model replies (into --cache) from the row's committed bundle, then go on")
    ap.add_argument("--no-bundle", action="store_true",
                    help="do not export the row's bundle (experiments/validation/bundles/<table>/<row>.tar.gz, "
                         "the default: the committed row's runs and every model reply they used)")
    ap.add_argument("--check-current", action="store_true",
                    help="replay every bundled row (or --rows) on the working tree against its bundle's replies "
                         "and record its currency (current / stale, with the commit) in the JSON, then exit")
    ap.add_argument("--first", type=int, default=None, metavar="K",
                    help="--check-current: replay the first K questions of each row (default: every question; "
                         "CI's prefix is 5 where a row's whole replay does not fit)")
    ap.add_argument("--rankings", choices=("recorded", "verify"), default="recorded",
                    help="--check-current: recorded (default: the bundles' recorded rankings, no embedding store "
                         "built) or verify (recompute them, building the stores the rows used)")
    ap.add_argument("--retire", default=None, metavar="TABLE/ROW",
                    help="move a row to the history section (it will not be re-measured; --why says why), then exit")
    ap.add_argument("--why", default=None, help="--retire: why the row is not re-measured")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    if (done := _tool(ap, args)) is not None:
        return done
    rows = [r for r in args.rows.split(",") if r]
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        ap.error(f"--rows: unknown {unknown}; expected some of {list(ROWS)}")
    if args.split == "dev" and args.n > DEV_SIZE:
        ap.error(f"--split dev has {DEV_SIZE} questions; --n {args.n} would reach into the held-out questions")
    if args.heldout_skip and args.split != "heldout":
        ap.error("--heldout-skip applies to --split heldout only")
    if args.stop_at is not None and not 1 <= args.stop_at <= args.n:
        ap.error(f"--stop-at {args.stop_at}: expected a question count from 1 to --n {args.n}")
    from validation_runner import sitting

    missing = [] if (args.print or args.collect) else sitting.missing_deps()
    if missing:
        print(f"run_validation.py: this Python ({sys.executable}) cannot import {', '.join(missing)}, which every "
              "row's `python -m kgreason` needs; run it with the project's environment (`.venv/bin/python "
              "experiments/validation/run_validation.py ...`, after `make setup`). Nothing was run or written.",
              file=sys.stderr)
        return 2
    name = tag(args.split, args.n, args.route, args.heldout_skip)
    out = places.HERE / f"validation_{name}.json"
    if args.from_bundle and (rc := _restore(ap, args, rows, name, out)) is not None:
        return rc
    for row in rows:
        sitting.sit_row(row, args, name, out)
    return 0


def _tool(ap: argparse.ArgumentParser, args) -> int | None:
    """The flags that print or rewrite the committed tables and exit (None when none was given)."""
    if args.table:
        from validation_runner.docs import markdown

        print(markdown())
        return 0
    if args.stamp_code:
        from validation_runner.stamp import stamp_from_history

        for f in sorted(places.HERE.glob("validation_*.json")):
            done = stamp_from_history(f)
            print(f"{f.name}: stamped {len(done)} row(s) from git history")
        return 0
    if args.write_docs:
        from validation_runner.docs import write_docs

        for f in write_docs():
            print(f"rewrote {f}")
        return 0
    if args.check_current:
        from validation_runner.currency import check_current

        picked = [r for r in args.rows.split(",") if r] if args.rows != ",".join(ROWS) else None
        results = check_current(rows=picked, first=args.first or None, rankings=args.rankings)
        stale = [f"{t}/{r}" for t, r, rec in results if rec["verdict"] != "current"]
        print(f"{len(results) - len(stale)} of {len(results)} bundled rows current"
              + (f"; not current: {', '.join(stale)}" if stale else ""))
        return 0
    if args.retire:
        from validation_runner.currency import retire

        table, _, row = args.retire.partition("/")
        if not row or not args.why:
            ap.error("--retire TABLE/ROW needs --why TEXT (e.g. --retire heldout_n30_llamacpp/cwq_rag --why ...)")
        try:
            print(retire(table, row, args.why))
        except (OSError, ValueError) as err:
            print(f"run_validation.py: {err}", file=sys.stderr)
            return 2
        return 0
    return None


def _restore(ap: argparse.ArgumentParser, args, rows: list[str], name: str, out) -> int | None:
    """``--from-bundle``: each row's run dir and replies restored from its committed bundle."""
    from validation_runner.bundles import restore_from_bundle

    if args.fresh or args.collect or args.print:
        ap.error("--from-bundle restores a row's run dir to resume it; it cannot go with --fresh, --collect or --print")
    table = json.loads(out.read_text()) if out.exists() else {}
    for row in rows:
        run_dir = places.ROOT / "outputs" / "validation" / name / row
        try:
            print(restore_from_bundle(row, table.get(row, {}), run_dir, args.cache), file=sys.stderr, flush=True)
        except ValueError as err:
            print(f"run_validation.py: {err}. Nothing was run.", file=sys.stderr)
            return 2
    return None
