"""From a run or sweep dir to the written tables: collect, pivot, intervals, comparisons, files."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import pandas as pd

from kgreason.tables.cells import CIOptions, drop_constant_columns, pivot, prepare, seeds_change_nothing, table_axes
from kgreason.tables.collect import Collected, Job, gather
from kgreason.tables.marks import mark_notes, no_interval_notes
from kgreason.tables.paired import paired_comparisons, render_paired
from kgreason.tables.paper import paper_comparison, render_paper
from kgreason.tables.render import (caption, column_note, render_csv, render_latex, render_markdown, render_missing,
                                    tex_label)
from kgreason.tables.repeats import supersede
from kgreason.tables.rows import RunRows
from kgreason.textio import write_text_file


@dataclass
class Tables:
    """Everything :func:`build_tables` computed: the frames and the rendered Markdown sections."""
    root: Path
    df: pd.DataFrame
    examples: dict[str, RunRows] | None   # per-question values of each job (kgreason.tables.rows)
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
    partial: list[str] = field(default_factory=list)   # the partial runs' job names
    failed: list[str] = field(default_factory=list)    # runs with metrics.json and a failed.json
    labels: dict[str, str] = field(default_factory=dict)   # header overrides (--label hits_at_1=H@1)

    def table_md(self) -> str:
        md = render_markdown(self.wide_shown, self.rows, self.cols, self.digits, self.seed_spread, self.labels)
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


def _no_values(c: Collected) -> str:
    n = len(c.missing)
    if not n:
        return "no metric values to tabulate: no job dir (.hydra/hydra.yaml or failed.json) under it"
    first = c.missing[0]
    return (f"no metric values to tabulate: {n} job dir(s), none with a readable metrics.json; "
            f"e.g. {first['job']}: {first['reason']}")


def _cell_jobs(c: Collected, rows: Sequence[str], cols: Sequence[str]) -> list[list[Job]]:
    """The jobs of each table cell (every axis but the metric equal), in job order."""
    axes = [a for a in [*rows, *cols] if a != "metric"]
    per_job = c.df.drop_duplicates("job")
    if per_job.empty:
        return []
    if not axes:
        return [[c.jobs[j] for j in per_job["job"] if j in c.jobs]]
    keys = [per_job[a].fillna("").astype(str) for a in axes if a in per_job.columns]
    if not keys:
        return [[c.jobs[j] for j in per_job["job"] if j in c.jobs]]
    return [[c.jobs[j] for j in g["job"] if j in c.jobs] for _, g in per_job.groupby(keys, sort=False)]


def partial_notes(c: Collected, rows: Sequence[str], cols: Sequence[str], allow_partial: bool = False) -> list[str]:
    """Refuse (``ValueError``, one line naming the job dirs) to average a partial run with complete
    runs of the same cell unless ``allow_partial``; the lines naming every partial run otherwise."""
    mixed = [j for cell in _cell_jobs(c, rows, cols)
             if any(j.partial for j in cell) and not all(j.partial for j in cell) for j in cell if j.partial]
    if mixed and not allow_partial:
        raise ValueError(f"refusing to average partial run(s) with complete seeds of the same setting: "
                         f"{', '.join(j.partial_text() for j in mixed)}; resume them, or pass --allow-partial "
                         "to average them anyway (the cells are marked)")
    out = []
    partial = [j for j in c.jobs.values() if j.partial]
    if partial:
        how = " (averaged with complete seeds: --allow-partial)" if mixed else ""
        out.append(f"Partial run(s), marked (partial) in their cells{how}: "
                   f"{', '.join(j.partial_text() for j in partial)}")
    failed = [j for j in c.jobs.values() if j.failed is not None]
    if failed:
        out.append(f"Failed run(s) with metrics, marked (failed) in their cells: "
                   f"{', '.join(j.failed_text() for j in failed)}")
    return out


def build_tables(root: str | Path, rows=("reasoner", "ablation", "variant"), cols=("dataset", "metric"),
                 metrics: Sequence[str] | None = None, digits: int = 3, ci: CIOptions | None = None,
                 baseline: str | None = None, paper: str | bool | None = None,
                 allow_partial: bool = False, labels: dict[str, str] | None = None) -> Tables:
    """gather → pivot (+ intervals, cell marks) → paired comparisons / paper values, nothing written.

    Every job dir is read once (:func:`~kgreason.tables.collect.gather`); the per-question values
    are kept as numbers. Raises ``ValueError`` (one line) when nothing can be tabulated (naming
    why the runs failed) or when a partial run would be averaged with complete seeds without
    ``allow_partial``."""
    root = Path(root)
    ci = ci or CIOptions()
    c = gather(root)
    superseded = supersede(c)  # repeats of one configuration: the newest complete run (kgreason/tables/repeats.py)
    df, missing = c.df, c.missing
    if df.empty:
        raise ValueError(_no_values(c))
    kept_rows, same = _drop_constant_empty(df, list(rows))
    rows, cols = table_axes(df, kept_rows, list(cols))
    warnings = [f"Warning: {w}" for w in c.warnings] + superseded
    warnings += partial_notes(c, rows, cols, allow_partial)
    examples = {name: j.rows for name, j in c.jobs.items() if j.rows is not None}
    wide = pivot(df, rows, cols, metrics, examples if ci.kind == "bootstrap" else None, ci, jobs=c.jobs)
    warnings += mark_notes(wide, rows, cols, digits)
    no_interval = []
    if ci.kind == "bootstrap":
        no_interval = no_interval_notes(prepare(df, rows, cols, metrics), c.jobs, rows, cols, wide)
        warnings += no_interval
    spread = True
    if seeds_change_nothing(df, wide, examples):
        spread = False
        seeds = sorted({int(s) for s in df["seed"].dropna()})
        warnings.append(f"Warning: the seeds ({', '.join(map(str, seeds))}) changed nothing: every cell and every "
                        "question has the same value for every seed (temperature 0, no sampling?). The seed sweep "
                        "repeats one run; it adds no evidence and is shown once, without ± 0.")
    wide_shown, constant = drop_constant_columns(wide, digits)
    cap = caption(df, wide_shown, ci, spread, no_interval, cols, labels)
    fixed = [f"{r} = {v}" for r, v in same.items()]
    if fixed:
        cap += " Every row: " + ", ".join(fixed) + "."
    if (note := column_note(wide_shown, cols)):
        cap += " " + note
    if constant:
        cap += " Constant columns (not shown): " + "; ".join(constant) + "."
    t = Tables(root, df, examples, rows, cols, wide, wide_shown, cap, warnings, spread, missing, digits=digits,
               partial=[j.name for j in c.jobs.values() if j.partial],
               failed=[j.name for j in c.jobs.values() if j.failed is not None], labels=dict(labels or {}))
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
                 baseline: str | None = None, paper: str | bool | None = None,
                 allow_partial: bool = False, labels: dict[str, str] | None = None) -> dict[str, Path]:
    """collect → pivot → write ``<name>.md/.tex/.csv`` (+ ``missing.txt``) into ``out_dir``
    (default: the multirun dir itself). With ``baseline`` (``reasoner=io``) also the paired
    comparisons (``<name>_paired.csv``, and a section of ``<name>.md``); with ``paper`` (a preset
    name, or True for the sweep's own ``experiment=``) the paper's values beside ours
    (``<name>_paper.csv`` and a section). Returns the written paths."""
    from kgreason.paths import safe_component

    name = safe_component(name, "--name")  # <name>.md/.tex/.csv are written into out_dir, never beside it
    root = Path(root)
    t = build_tables(root, rows, cols, metrics, digits, ci, baseline, paper, allow_partial, labels)
    for w in t.warnings:
        print(w, file=sys.stderr)
    out = Path(out_dir) if out_dir else root
    out.mkdir(parents=True, exist_ok=True)
    paths = {"md": out / f"{name}.md", "tex": out / f"{name}.tex", "csv": out / f"{name}.csv"}
    # each file whole or not at all; a full disk is one line naming the file (kgreason/textio.py)
    if t.paired is not None:
        paths["paired"] = out / f"{name}_paired.csv"
        write_text_file(paths["paired"], t.paired.to_csv(index=False))
    if t.paper is not None:
        paths["paper"] = out / f"{name}_paper.csv"
        write_text_file(paths["paper"], t.paper.to_csv(index=False))
    write_text_file(paths["md"], t.markdown())
    write_text_file(paths["tex"], render_latex(t.wide_shown, t.rows, t.cols, digits, t.seed_spread, t.labels,
                                               t.caption, tex_label(name)))
    write_text_file(paths["csv"], render_csv(t.wide))
    mpath = out / "missing.txt"
    if t.missing:
        write_text_file(mpath, render_missing(t.missing))
        paths["missing"] = mpath
    elif mpath.exists():
        mpath.unlink()
    return paths


def _drop_constant_empty(df: pd.DataFrame, rows: list[str]) -> tuple[list[str], dict[str, str]]:
    """The row axes that tell rows apart: those empty everywhere (``variant`` with no extra
    overrides) and those with one value in every job (``ablation = none``) are left out, the
    latter returned as ``{axis: value}`` for the caption. At least one axis is kept (a single
    run's table is one row named by its first axis)."""
    keep, same = [], {}
    for r in rows:
        if r not in df.columns:
            keep.append(r)  # a swept override named by --rows: table_axes checks it
            continue
        values = df[r].fillna("").astype(str)
        if values.eq("").all():
            continue
        if values.nunique() == 1:
            same[r] = values.iloc[0]
            continue
        keep.append(r)
    if not keep:
        keep = rows[:1]
        same.pop(keep[0], None)
    return keep, same
