"""``kgreason report RUN_OR_SWEEP_DIR``: one self-contained page (Markdown + HTML) of a run or sweep.

The page holds the paper-style table with its 95 % bootstrap intervals over questions
(:func:`kgreason.tables.build_tables`), the paired comparisons (``--baseline``) and the paper's
values (``--paper``) when asked, each run's funnel (the stages its questions reached, when its
reasoner records them: :mod:`kgreason.tables.funnel`), a figure of every metric column with its
intervals, and per row the LLM calls, tokens, cost and wall time (``metrics.json``, ``timing.json``). Figures are
embedded as base64 PNG (``data:`` URIs); the HTML loads nothing from the network (no scripts, no
stylesheets, no fonts), so the file can be mailed or archived as is.

Writes ``<out>/<name>.md`` and ``<out>/<name>.html`` (default ``<dir>/report.*``).
"""

from __future__ import annotations

import argparse
import base64
import html
import io
import json
import math
import re
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

import pandas as pd

from kgreason import stats
from kgreason.storage.bundle import readable
from kgreason.tables import CIOptions, Tables, _header, boot_count, build_tables, parse_labels, pivot, render_markdown
from kgreason.tables.cli import error_text
from kgreason.tables.summary import cache_note, replayed_answers
from kgreason.textio import write_text_file

COST_METRICS = ["llm/calls", "llm/cache_hits", "llm/calls_per_question", "llm/prompt_tokens",
                "llm/completion_tokens", "llm/tokens_per_question", "llm/cost_usd", "run/wall_s"]
# decimals per cost column: counts whole (12 calls, not 12.000), rates per question and seconds to
# one decimal, dollars to four (the cost of a few small calls is below a cent)
COST_DIGITS = {"llm/calls": 0, "llm/cache_hits": 0, "llm/prompt_tokens": 0, "llm/completion_tokens": 0,
               "llm/calls_per_question": 1, "llm/tokens_per_question": 1, "llm/cost_usd": 4, "run/wall_s": 1}


def _with_wall_time(t: Tables) -> pd.DataFrame:
    """The tidy frame plus ``run/wall_s`` (each job's ``timing.json``) as a metric."""
    extra = []
    for job in dict.fromkeys(t.df["job"]):
        p = t.root / job / "timing.json" if (t.root / job).is_dir() else t.root / "timing.json"
        if not p.is_file():
            continue
        try:
            wall = json.loads(p.read_text()).get("wall_s")
        except json.JSONDecodeError:
            continue
        if isinstance(wall, (int, float)):
            row = t.df[t.df["job"] == job].iloc[0].to_dict()
            extra.append({**row, "metric": "run/wall_s", "value": float(wall)})
    return pd.concat([t.df, pd.DataFrame(extra)], ignore_index=True) if extra else t.df


def _replayed_rows(wide: pd.DataFrame, cols: Sequence[str]) -> dict:
    """``{row key: "replayed" | "k% replayed"}`` for the rows whose LLM requests the call cache
    answered (``llm/cache_hits`` > 0): all of them (no call sent), or that share."""
    means = wide["mean"]
    if not isinstance(means, pd.DataFrame):
        return {}
    pos = list(cols).index("metric")

    def total(metric: str) -> pd.Series:
        picked = [c for c in means.columns if (c[pos] if isinstance(c, tuple) else c) == metric]
        return means[picked].fillna(0).sum(axis=1) if picked else pd.Series(0.0, index=means.index)

    hits, calls = total("llm/cache_hits"), total("llm/calls")
    out = {}
    for idx in means.index:
        h, c = float(hits[idx]), float(calls[idx])
        if h > 0:
            out[idx] = "replayed" if c <= 0 else f"{h / (h + c):.0%} replayed"
    return out


def cost_table(t: Tables) -> str:
    """Per row (mean over seeds): LLM calls, call-cache hits, tokens, cost, wall time; columns that
    exist only. Nothing is bolded (a cost is not a score), and a row whose requests the call cache
    answered is marked ``(replayed)``: its 0 calls and short wall time are the cache's, not the
    method's (its ``Calls / q`` counts the replayed requests)."""
    df = _with_wall_time(t)
    have = [m for m in COST_METRICS if m in set(df["metric"])]
    if not have:
        return ""
    cols = [c for c in t.cols if c != "metric"] + ["metric"]
    wide = pivot(df, t.rows, cols, have, None, CIOptions(kind="none"))
    return render_markdown(wide, t.rows, cols, t.digits, labels=t.labels, row_suffix=_replayed_rows(wide, cols),
                           metric_digits=COST_DIGITS)


def cache_lines(t: Tables) -> list[str]:
    """One line per run whose LLM requests the call cache answered (:func:`cache_note`): how many
    answers were replayed, where the cache lives (the run's ``llm_cache.dir``), how to turn it off."""
    out = []
    for job in dict.fromkeys(t.df["job"]):
        sub = t.df[t.df["job"] == job]
        m = dict(zip(sub["metric"], sub["value"]))
        if not m.get("llm/cache_hits"):
            continue
        d = t.root / job if (t.root / job).is_dir() else t.root
        cfg = None
        try:
            cfg = (json.loads((d / "run.json").read_text(encoding="utf-8")).get("config") or {}).get("llm_cache")
        except (OSError, ValueError, AttributeError):
            cfg = None
        note = cache_note(m["llm/cache_hits"], m.get("llm/calls", 0), cfg, replayed_answers(d / "predictions.jsonl"))
        out.append(f"- {job}: {note}")
    return out


def funnel_section(root: Path, digits: int = 3) -> str:
    """The runs' funnels (``kgreason tables --funnel``: a row per run, a column per stage, the
    share of the questions that reached it), or ``""`` when no run recorded one."""
    from kgreason.tables.funnel import build_funnels, render_funnels

    f = build_funnels(root, digits)
    if not f.tables:
        return ""
    f.missing, f.warnings = [], []  # the report names them in its own sections
    return render_funnels(f)


def _bar(top: float, bottom: float) -> float:
    """One side of an error bar: ``top - bottom``, 0 where either is missing or the mean lies
    outside its interval (the runs' mean over seeds need not lie inside the interval over
    questions when the runs answered different questions: the table says so beside the cell)."""
    if not (math.isfinite(top) and math.isfinite(bottom)):
        return 0.0
    return max(0.0, top - bottom)


def _figure_png(t: Tables) -> list[tuple[str, str]]:
    """One bar chart per metric column (rows as bars, the bootstrap interval as error bars):
    ``[(title, base64 PNG)]``."""
    from matplotlib.figure import Figure

    wide = t.wide_shown
    has_ci = "lo" in wide.columns.get_level_values(0)
    means = wide["mean"]
    if not isinstance(means, pd.DataFrame):
        return []
    labels = [" / ".join(str(k) for k in (i if isinstance(i, tuple) else (i,)) if str(k) != "") for i in means.index]
    out = []
    for c in means.columns:
        title = _header(c, t.cols, t.labels)
        key = dict(zip(t.cols, c if isinstance(c, tuple) else (c,)))
        if not str(key.get("metric", "metric/")).startswith("metric/"):
            continue  # only answer-quality metrics get a figure
        y = means[c].to_numpy(dtype=float)
        fig = Figure(figsize=(6.0, 0.45 * len(labels) + 1.2))
        ax = fig.subplots()
        err = None
        if has_ci:
            lo, hi = wide["lo"][c].to_numpy(dtype=float), wide["hi"][c].to_numpy(dtype=float)
            err = [[_bar(m, a) for m, a in zip(y, lo)], [_bar(b, m) for m, b in zip(y, hi)]]
        ax.barh(range(len(labels)), [v if math.isfinite(v) else 0 for v in y], xerr=err, color="#4c72b0",
                ecolor="#333333", capsize=3)
        ax.set_yticks(range(len(labels)), labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel(title + (" (bars: 95% CI over questions)" if has_ci else ""))
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=90)
        out.append((title, base64.b64encode(buf.getvalue()).decode("ascii")))
    return out


def _hops_png(t: Tables) -> list[tuple[str, str]]:
    out = []
    for job in dict.fromkeys(t.df["job"]):
        p = (t.root / job if (t.root / job).is_dir() else t.root) / "hops.png"
        if p.is_file():
            out.append((f"hop distribution: {job}", base64.b64encode(p.read_bytes()).decode("ascii")))
            break  # one is enough: every job of a sweep shares the dataset and KG unless swept
    return out


def _usage_note(t: Tables) -> str:
    return ("Calls, cache hits, tokens and cost are each run's `metrics.json` `llm/*` values (docs/llm.md, "
            "\"Accounting\"): LLM calls are the requests sent, cache hits those the call cache answered; wall time "
            "is its `timing.json` `wall_s`. Each cell is the mean over the row's seeds.")


REPLAYED_NOTE = (" A row marked (replayed) was answered from the call cache: its calls, cost and time are not what "
                 "the method costs.")


def question_pages(t: Tables, out: Path, n: int) -> list[str]:
    """Write the page (:mod:`kgreason.tables.question`) of each run's first ``n`` examples under
    ``<out>/questions/<run>/``; the Markdown list items that link them (relative to ``out``)."""
    from kgreason.runs import PredictionStore
    from kgreason.tables.question import load_record, load_stages, page_name, question_page

    items = []
    for job in dict.fromkeys(t.df["job"]) if n > 0 else ():
        run_dir = t.root / job if (t.root / job).is_dir() else t.root
        path = run_dir / "predictions.jsonl"
        if not path.is_file():
            continue
        # the last row per id (a retried example's, not its error row), damaged lines skipped, read once
        rows = PredictionStore(path, repair=False).rows
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", str(job)).strip("._") or "run"
        record, stages = load_record(run_dir), load_stages(run_dir)
        for ex_id in list(rows)[:n]:
            rel = Path("questions") / slug / page_name(ex_id)
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            write_text_file(out / rel, question_page(rows[ex_id], record, source=str(run_dir), stages=stages))
            items.append(f"- [{slug}: {ex_id}]({rel.as_posix()})")
    return items


def build_report(root: str | Path, rows=("reasoner", "ablation", "variant"), cols=("dataset", "metric"),
                 metrics: Sequence[str] | None = None, ci: CIOptions | None = None, baseline: str | None = None,
                 paper: str | bool | None = None, digits: int = 3, allow_partial: bool = False,
                 labels: dict[str, str] | None = None, questions_out: Path | None = None,
                 n_questions: int = 3) -> tuple[str, str]:
    """The report as ``(markdown, html)``. Refuses (``ValueError``) what :func:`build_tables`
    refuses, e.g. a partial run among complete seeds without ``allow_partial``. With
    ``questions_out``, the first ``n_questions`` examples of each run get their page
    (:func:`question_pages`), linked in a "Questions" section."""
    root = Path(root)
    t = build_tables(root, rows, cols, metrics, digits, ci, baseline, paper, allow_partial, labels)
    figs = _figure_png(t) + _hops_png(t)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    n_jobs = t.df["job"].nunique()
    parts = [f"# kgreason report: {root.name}", "",
             f"{n_jobs} run(s) with metrics, {len(t.partial)} partial"
             + (f", {len(t.failed)} failed after writing them" if t.failed else "")
             + f"; {len(t.missing)} failed or missing; "
             f"from `{root}`; generated {stamp}.", "",
             "## Results", "", t.table_md()]
    if t.paired_md:
        parts += ["## Paired comparisons", "", t.paired_md]
    if t.paper_md:
        parts += ["## The paper's numbers beside ours", "", t.paper_md]
    funnel = funnel_section(root, digits)
    if funnel:
        parts += ["## Funnel: where the questions were lost", "", funnel]
    cost = cost_table(t)
    if cost:
        parts += ["## Cost per row", "", cost, _usage_note(t) + (REPLAYED_NOTE if " replayed) |" in cost else ""), ""]
    cached = cache_lines(t)
    if cached:
        parts += ["## Answers from the call cache", "",
                  "A repeated job is replayed from the call cache: its answers are the earlier run's, and its "
                  "calls, cost and wall time are not the method's (docs/running.md, \"The call cache\").", ""]
        parts += cached + [""]
    if figs:
        parts += ["## Figures", ""]
        for title, b64 in figs:
            parts += [f"![{title}](data:image/png;base64,{b64})", ""]
    links = question_pages(t, Path(questions_out), n_questions) if questions_out is not None else []
    if links:
        parts += ["## Questions", "", "Each run's first examples, one page each (answer, every model call, the "
                  "subgraph the method used); `kgreason show RUN_DIR EXAMPLE_ID` writes the page of any other.", ""]
        parts += links + [""]
    if t.missing:
        parts += ["## Missing or failed runs", ""] + [f"- {m['job']}: {m['reason']}" for m in t.missing] + [""]
    md = "\n".join(parts).rstrip() + "\n"
    return md, markdown_to_html(md, title=f"kgreason report: {root.name}")


# ----------------------------------------------------------------------------- Markdown → HTML
_CSS = ("body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;max-width:75em;margin:2em auto;"
        "padding:0 1em;line-height:1.45;color:#222}table{border-collapse:collapse;margin:1em 0;font-size:.9em}"
        "th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right}th{background:#f3f3f3}"
        "td:first-child,th:first-child{text-align:left}code{background:#f3f3f3;padding:0 .2em}"
        "img{max-width:100%;display:block;margin:1em 0}")


def _inline(s: str) -> str:
    s = html.escape(s, quote=False)
    s = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", s)
    s = re.sub(r"`([^`]+)`", r"<code>\1</code>", s)
    s = re.sub(r"\[([^\]]+)\]\((questions/[A-Za-z0-9._/-]+\.html)\)", r'<a href="\2">\1</a>', s)  # question pages
    return s


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def markdown_to_html(md: str, title: str = "kgreason report") -> str:
    """The subset of Markdown the report writes (headings, pipe tables, images with data: URIs,
    list items, paragraphs) as one HTML page with inline CSS and nothing fetched."""
    out = ["<!DOCTYPE html>", "<html><head><meta charset=\"utf-8\">", f"<title>{html.escape(title)}</title>",
           f"<style>{_CSS}</style></head><body>"]
    lines = md.splitlines()
    i = 0
    while i < len(lines):
        ln = lines[i]
        if ln.startswith("|"):
            block = []
            while i < len(lines) and lines[i].startswith("|"):
                block.append(lines[i])
                i += 1
            out.append("<table><thead><tr>" + "".join(f"<th>{_inline(c)}</th>" for c in _cells(block[0]))
                       + "</tr></thead><tbody>")
            for row in block[2:]:
                out.append("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in _cells(row)) + "</tr>")
            out.append("</tbody></table>")
            continue
        m = re.match(r"^(#{1,6}) (.*)$", ln)
        if m:
            k = len(m.group(1))
            out.append(f"<h{k}>{_inline(m.group(2))}</h{k}>")
        elif (m := re.match(r"^!\[(.*?)\]\((data:image/png;base64,[A-Za-z0-9+/=]+)\)$", ln)):
            out.append(f"<figure><img alt=\"{html.escape(m.group(1))}\" src=\"{m.group(2)}\">"
                       f"<figcaption>{_inline(m.group(1))}</figcaption></figure>")
        elif ln.startswith("- "):
            out.append(f"<ul><li>{_inline(ln[2:])}</li></ul>")
        elif ln.strip():
            out.append(f"<p>{_inline(ln)}</p>")
        i += 1
    out.append("</body></html>")
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------- CLI
def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kgreason report", description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", help="a run dir, a multirun (sweep) dir or a run bundle (.tar.gz, kgreason bundle)")
    ap.add_argument("--rows", default="reasoner,ablation,variant")
    ap.add_argument("--cols", default="dataset,metric")
    ap.add_argument("--metrics", default=None, help="metric names, in column order (default: every metric/* key)")
    ap.add_argument("--ci", choices=("bootstrap", "none"), default="bootstrap")
    ap.add_argument("--boot", type=boot_count, default=stats.DEFAULT_B)
    ap.add_argument("--ci-level", type=float, default=stats.DEFAULT_LEVEL)
    ap.add_argument("--ci-seed", type=int, default=stats.DEFAULT_SEED, help="seed of the resampling (default 0)")
    ap.add_argument("--baseline", default=None, help="AXIS=VALUE, e.g. reasoner=io: paired comparisons")
    ap.add_argument("--paper", nargs="?", const=True, default=None, metavar="PRESET")
    ap.add_argument("--out", default=None, help="output dir (default: the given dir)")
    ap.add_argument("--name", default="report")
    ap.add_argument("--questions", type=int, default=3, metavar="N",
                    help="write and link the page of each run's first N examples (0: none; default 3)")
    ap.add_argument("--allow-partial", action="store_true",
                    help="average a partial run with complete seeds of the same setting (marked); refused otherwise")
    ap.add_argument("--label", action="append", default=None, metavar="METRIC=LABEL",
                    help="a column header of your own, e.g. --label hits_at_1=H@1 (as kgreason tables)")
    args = ap.parse_args(argv)
    from kgreason.paths import safe_component

    split = lambda s: [x.strip() for x in s.split(",") if x.strip()]  # noqa: E731
    try:
        safe_component(args.name, "--name")  # <name>.md/.html are written into --out, never beside it
        with readable(args.dir) as (root, bundle_out):  # a bundle (.tar.gz) is read as its sweep dir
            out = Path(args.out) if args.out else (bundle_out or Path(args.dir))
            md, page = build_report(root, split(args.rows), split(args.cols),
                                    split(args.metrics) if args.metrics else None,
                                    CIOptions(args.ci, args.boot, args.ci_level, args.ci_seed), args.baseline,
                                    args.paper, allow_partial=args.allow_partial, labels=parse_labels(args.label),
                                    questions_out=out, n_questions=args.questions)
            out.mkdir(parents=True, exist_ok=True)
            write_text_file(out / f"{args.name}.md", md)  # whole or not at all, an error names the file
            write_text_file(out / f"{args.name}.html", page)
    except (OSError, KeyError, ValueError) as e:  # OSError: --out under a file, not writable, a full disk
        print(f"error: {error_text(e)}", file=sys.stderr)
        return 2
    print(f"wrote {out / (args.name + '.md')}, {out / (args.name + '.html')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
