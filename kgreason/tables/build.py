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
from kgreason.tables.render import (TEX_CI_FORMS, caption, check_tex_label, column_note, is_score, render_csv,
                                    render_latex, render_markdown, render_missing, tex_digits, tex_label)
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
    models: list[str] = field(default_factory=list)   # the llm.model of every shown run that called a model
    questions: int | None = None   # the most questions a run of the table answered

    def table_md(self) -> str:
        md = render_markdown(self.wide_shown, self.rows, self.cols, self.digits, self.seed_spread, self.labels)
        md += "\n" + self.caption + "\n"
        if self.warnings:
            md += "\n" + "\n".join(self.warnings) + "\n"
        return md

    def tex_caption(self, ci_form: str = "below") -> str:
        """The ``.tex`` caption: short, naming what a paper's reader needs first: the dataset(s),
        the model, the questions and seeds, and what a cell shows (the full explanation is the
        note under the table)."""
        datasets = sorted({str(x) for x in self.df["dataset"].dropna()}) if "dataset" in self.df else []
        seeds = sorted({int(x) for x in self.df["seed"].dropna()}) if "seed" in self.df else []
        if not self.models:
            model = "no model calls"
        elif len(self.models) == 1:
            model = self.models[0]
        else:
            model = f"{len(self.models)} models (" + ", ".join(self.models) + ")"
        facts = [f"{self.questions} questions" if self.questions else None,
                 f"{len(seeds)} seeds" if len(seeds) > 1 else None]
        facts_s = "; ".join(f for f in facts if f)
        text = f"Results on {', '.join(datasets) or '?'} with {model}" + (f" ({facts_s})" if facts_s else "")
        spread = self.seed_spread and len(seeds) > 1
        has_ci = "lo" in self.wide_shown.columns.get_level_values(0)
        if ci_form == "pm" and has_ci:
            cell = "mean ± half its 95% bootstrap interval over questions"
        else:
            cell = "mean" + (" ± s.d. over seeds" if spread else "")
            if has_ci:
                cell += ", 95% bootstrap interval over questions " + ("below" if ci_form == "below" else "beside it")
        return f"{text}: {cell}."

    def tex_note(self, ci_form: str = "below") -> str:
        """The note under the ``.tex`` table: the full caption (what every figure is), and in the
        ``pm`` form what ± is there."""
        note = self.caption
        if ci_form == "pm" and "lo" in self.wide_shown.columns.get_level_values(0):
            note = ("In this table ± is half the width of the 95% percentile bootstrap interval, (hi - lo)/2 (the "
                    "interval need not be symmetric; the .md and .csv give lo and hi), and the seed spread is not "
                    "shown (the .csv's std). The figures, as the .md shows them: " + note)
        return "Note: " + note

    def latex(self, ci_form: str = "below", label: str = "tab:results", caption_text: str | None = None,
              digits: int | None = None) -> str:
        """The ``.tex`` table (:func:`~kgreason.tables.render.render_latex`): ``digits`` None = the
        precision the questions support for scores (:func:`~kgreason.tables.render.tex_digits`),
        ``self.digits`` for other figures; ``caption_text`` (``--caption``, LaTeX as written)
        replaces :meth:`tex_caption`."""
        if ci_form not in TEX_CI_FORMS:
            raise ValueError(f"--tex-ci {ci_form!r}: one of {', '.join(TEX_CI_FORMS)}")
        check_tex_label(label)
        metric_digits = None
        if digits is None:
            metric_digits = {k: tex_digits(self.questions) for k in _metric_keys(self.wide_shown, self.cols, self.rows)
                             if is_score(k)}
        return render_latex(self.wide_shown, self.rows, self.cols, self.digits if digits is None else digits,
                            self.seed_spread, self.labels, caption_text or self.tex_caption(ci_form), label,
                            ci_form=ci_form, note=self.tex_note(ci_form), metric_digits=metric_digits,
                            caption_is_latex=caption_text is not None)

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


def _metric_keys(wide: pd.DataFrame, cols: Sequence[str], rows: Sequence[str]) -> list[str]:
    """The metric keys of a pivoted table (``metric/hits_at_1``), from its columns or its rows."""
    means = wide["mean"]
    if "metric" in cols:
        i = list(cols).index("metric")
        return sorted({str(c[i] if isinstance(c, tuple) else c) for c in means.columns})
    if "metric" in rows:
        i = list(rows).index("metric")
        return sorted({str(r[i] if isinstance(r, tuple) else r) for r in means.index})
    return []


def _models(c: Collected, shown: set[str]) -> list[str]:
    """The ``llm.model`` (else the ``llm`` choice) of every shown run that called a model or was
    answered from the call cache; a run that called none (retrieval_only) names no model."""
    import yaml

    out = set()
    for name, job in c.jobs.items():
        if name not in shown or not (job.metrics.get("llm/calls", 0) or job.metrics.get("llm/cache_hits", 0)):
            continue
        model = None
        try:
            cfg = yaml.safe_load((job.path / "config.yaml").read_text(encoding="utf-8"))
            model = ((cfg or {}).get("llm") or {}).get("model") if isinstance(cfg, dict) else None
        except (OSError, UnicodeDecodeError, yaml.YAMLError, AttributeError):
            model = None
        model = model or job.info.get("llm")
        if model:
            out.add(str(model))
    return sorted(out)


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
               failed=[j.name for j in c.jobs.values() if j.failed is not None], labels=dict(labels or {}),
               models=_models(c, set(df["job"])),
               questions=max((len(r.ids) for r in examples.values()), default=None) or None)
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
                 allow_partial: bool = False, labels: dict[str, str] | None = None, *, tex_ci: str = "below",
                 tex_label_text: str | None = None, tex_caption: str | None = None,
                 tex_digits_: int | None = None) -> dict[str, Path]:
    """collect → pivot → write ``<name>.md/.tex/.csv`` (+ ``missing.txt``) into ``out_dir``
    (default: the multirun dir itself). With ``baseline`` (``reasoner=io``) also the paired
    comparisons (``<name>_paired.csv``, and a section of ``<name>.md``); with ``paper`` (a preset
    name, or True for the sweep's own ``experiment=``) the paper's values beside ours
    (``<name>_paper.csv`` and a section). The ``.tex`` (:meth:`Tables.latex`): ``tex_ci`` its
    interval form, ``tex_label_text`` its label (default ``tab:<name>``), ``tex_caption`` its caption
    (default: :meth:`Tables.tex_caption`), ``tex_digits_`` its decimals (None: what the questions
    support). Returns the written paths."""
    from kgreason.paths import safe_component

    name = safe_component(name, "--name")  # <name>.md/.tex/.csv are written into out_dir, never beside it
    label = check_tex_label(tex_label_text) if tex_label_text is not None else tex_label(name)
    if tex_ci not in TEX_CI_FORMS:
        raise ValueError(f"--tex-ci {tex_ci!r}: one of {', '.join(TEX_CI_FORMS)}")
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
    write_text_file(paths["tex"], t.latex(tex_ci, label, tex_caption, tex_digits_))
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
