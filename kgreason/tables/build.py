"""From a run or sweep dir to the written tables: collect, pivot, intervals, comparisons, files."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pandas as pd

from kgreason.tables.cells import CIOptions, drop_constant_columns, pivot, prepare, seeds_change_nothing, table_axes
from kgreason.tables.collect import collect, collect_examples
from kgreason.tables.paired import paired_comparisons, render_paired
from kgreason.tables.paper import paper_comparison, render_paper
from kgreason.tables.render import caption, render_csv, render_latex, render_markdown, render_missing


@dataclass
class Tables:
    """Everything :func:`build_tables` computed: the frames and the rendered Markdown sections."""
    root: Path
    df: pd.DataFrame
    examples: pd.DataFrame | None
    rows: list[str]
    cols: list[str]
    wide: pd.DataFrame          # every column (the CSV)
    wide_shown: pd.DataFrame    # constant columns dropped (the Markdown / LaTeX)
    caption: str
    warnings: list[str]
    seed_spread: bool
    missing: list[dict[str, str]]
    paired: pd.DataFrame | None = None
    paired_md: str = ""
    paper: pd.DataFrame | None = None
    paper_md: str = ""
    digits: int = 3

    def table_md(self) -> str:
        md = render_markdown(self.wide_shown, self.rows, self.cols, self.digits, self.seed_spread)
        md += "\n" + self.caption + "\n"
        if self.warnings:
            md += "\n" + "\n".join(self.warnings) + "\n"
        return md

    def markdown(self) -> str:
        md = self.table_md()
        for part in (self.paired_md, self.paper_md):
            if part:
                md += "\n" + part
        return md + ("\n" + render_missing(self.missing) if self.missing else "")


def build_tables(root: str | Path, rows=("reasoner", "ablation", "variant"), cols=("dataset", "metric"),
                 metrics: Sequence[str] | None = None, digits: int = 3, ci: CIOptions | None = None,
                 baseline: str | None = None, paper: str | bool | None = None) -> Tables:
    """collect → pivot (+ intervals) → paired comparisons / paper values, nothing written."""
    root = Path(root)
    ci = ci or CIOptions()
    df, missing = collect(root)
    rows, cols = table_axes(df, _drop_constant_empty(df, list(rows)), list(cols))
    need_ex = ci.kind == "bootstrap" or baseline or paper
    examples = collect_examples(root) if need_ex else None
    wide = pivot(df, rows, cols, metrics, examples if ci.kind == "bootstrap" else None, ci)
    warnings = []
    spread = True
    if seeds_change_nothing(df, wide, examples):
        spread = False
        seeds = sorted({int(s) for s in df["seed"].dropna()})
        warnings.append(f"Warning: the seeds ({', '.join(map(str, seeds))}) changed nothing: every cell and every "
                        "question has the same value for every seed (temperature 0, no sampling?). The seed sweep "
                        "repeats one run; it adds no evidence and is shown once, without ± 0.")
    wide_shown, constant = drop_constant_columns(wide, digits)
    cap = caption(df, wide, ci, spread)
    if constant:
        cap += " Constant columns (not shown): " + "; ".join(constant) + "."
    t = Tables(root, df, examples, rows, cols, wide, wide_shown, cap, warnings, spread, missing, digits=digits)
    if baseline:
        d = prepare(df, rows, cols, metrics)
        t.paired = paired_comparisons(d, examples, rows, cols, baseline, ci)
        t.paired_md = render_paired(t.paired, baseline, ci, digits)
    if paper:
        t.paper, doc = paper_comparison(root, df, examples, None if paper is True else str(paper), ci)
        t.paper_md = render_paper(t.paper, doc, ci, digits)
    return t


def write_tables(root: str | Path, rows=("reasoner", "ablation", "variant"), cols=("dataset", "metric"),
                 metrics: Sequence[str] | None = None, out_dir: str | Path | None = None,
                 name: str = "results", digits: int = 3, ci: CIOptions | None = None,
                 baseline: str | None = None, paper: str | bool | None = None) -> dict[str, Path]:
    """collect → pivot → write ``<name>.md/.tex/.csv`` (+ ``missing.txt``) into ``out_dir``
    (default: the multirun dir itself). With ``baseline`` (``reasoner=io``) also the paired
    comparisons (``<name>_paired.csv``, and a section of ``<name>.md``); with ``paper`` (a preset
    name, or True for the sweep's own ``experiment=``) the paper's values beside ours
    (``<name>_paper.csv`` and a section). Returns the written paths."""
    from kgreason.paths import safe_component

    name = safe_component(name, "--name")  # <name>.md/.tex/.csv are written into out_dir, never beside it
    root = Path(root)
    t = build_tables(root, rows, cols, metrics, digits, ci, baseline, paper)
    for w in t.warnings:
        print(w, file=sys.stderr)
    out = Path(out_dir) if out_dir else root
    out.mkdir(parents=True, exist_ok=True)
    paths = {"md": out / f"{name}.md", "tex": out / f"{name}.tex", "csv": out / f"{name}.csv"}
    if t.paired is not None:
        paths["paired"] = out / f"{name}_paired.csv"
        paths["paired"].write_text(t.paired.to_csv(index=False))
    if t.paper is not None:
        paths["paper"] = out / f"{name}_paper.csv"
        paths["paper"].write_text(t.paper.to_csv(index=False))
    paths["md"].write_text(t.markdown())
    paths["tex"].write_text(render_latex(t.wide_shown, t.rows, t.cols, digits, t.seed_spread))
    paths["csv"].write_text(render_csv(t.wide))
    mpath = out / "missing.txt"
    if t.missing:
        mpath.write_text(render_missing(t.missing))
        paths["missing"] = mpath
    elif mpath.exists():
        mpath.unlink()
    return paths


def _drop_constant_empty(df: pd.DataFrame, rows: list[str]) -> list[str]:
    """Drop row axes that are empty everywhere (e.g. ``variant`` with no extra overrides)."""
    keep = [r for r in rows if not (r in df.columns and df[r].fillna("").astype(str).eq("").all())]
    return keep or rows[:1]
