"""Rendering a pivoted table: caption, Markdown, LaTeX, CSV, and the list of missing runs."""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import pandas as pd

from kgreason.metrics import higher_is_better
from kgreason.tables.cells import CIOptions
from kgreason.tables.labels import _header

#: the caption's sentence for each cell mark present in a table (kgreason/tables/marks.py)
MARK_NOTES = {
    "errors": "(k errored): the cell's runs include k errored examples in all (metrics.json run/errors, summed "
              "over its runs), counted in the metric as docs/metrics.md says.",
    "partial": "(partial): a run of the cell stopped before its last example (run/partial, or run/n_examples < "
               "run/n_expected); its mean is over the examples it answered.",
    "failed": "(failed): a run of the cell wrote its metrics and then failed (failed.json; its reason is "
              "listed below the table).",
    "qdiff": "(≠ questions): the cell's runs answered different question ids, so its seed spread mixes the "
             "question draw with the method's own variance.",
    "unsampled": "A cell whose runs made no sampled LLM calls (llm/sampled_calls = 0) and whose seeds gave the "
                 "same value shows no ±: no sampled calls: seeds change nothing there.",
}


def caption(df: pd.DataFrame, wide: pd.DataFrame, ci: CIOptions | None = None,
            seed_spread: bool = True) -> str:
    """What a cell is: the mean over seeds, what its ``±`` is, and what its ``[lo, hi]`` is over."""
    seeds = sorted({int(s) for s in df["seed"].dropna()}) if "seed" in df else []
    n = wide["n"].max().max() if not wide.empty else 0
    has_ci = "lo" in wide.columns.get_level_values(0)
    parts = []
    if n is None or pd.isna(n) or int(n) <= 1 or not seed_spread:
        parts.append("Each cell is one run (no ± shown)." if seed_spread or not n or int(n) <= 1 else
                     f"Each cell is the mean over the seeds of one setting ({len(seeds)} seed(s): "
                     f"{', '.join(map(str, seeds))}, identical results: no ± shown).")
    else:
        parts.append(f"Each cell is the mean over the seeds of one setting ({len(seeds)} seed(s) in the sweep: "
                     f"{', '.join(map(str, seeds))}); ± is the sample standard deviation over those seeds "
                     "(ddof=1), the seed spread.")
    if has_ci:
        ci = ci or CIOptions()
        q = wide["q"].stack(list(range(wide["q"].columns.nlevels)), future_stack=True) \
            if isinstance(wide["q"], pd.DataFrame) else wide["q"]
        q = q.dropna()
        nq = (f"{int(q.min())}" if q.min() == q.max() else f"{int(q.min())}–{int(q.max())}") if len(q) else "?"
        over = ("each question's value averaged over the seeds first, the same question resampled for every seed"
                if n and not pd.isna(n) and int(n) > 1 else "one run's per-question values")
        parts.append(f"[lo, hi] is the {ci.level:.0%} percentile bootstrap interval of the mean over the "
                     f"cell's {nq} questions (B = {ci.B:,} resamples of the questions, seed {ci.seed}; "
                     f"{over}); it is over questions, not seeds.")
        if wide["lo"].isna().any().any():
            parts.append("Cells without [lo, hi]: see \"No interval\" below for why (metric/* columns), or the column "
                         "is a run-level figure with no per-question values.")
    marks = set(wide.columns.get_level_values(0))
    parts += [text for mark, text in MARK_NOTES.items() if mark in marks]
    return " ".join(parts)


def _best_mask(wide: pd.DataFrame, rows: Sequence[str], cols: Sequence[str]) -> pd.DataFrame:
    """Boolean frame shaped like ``wide['mean']``: True at the best cell per column and metric."""
    means = wide["mean"]
    mask = pd.DataFrame(False, index=means.index, columns=means.columns)
    for col in means.columns:
        col_key = dict(zip(cols, col if isinstance(col, tuple) else (col,)))
        series = means[col]
        if "metric" in col_key:
            groups = {col_key["metric"]: series.index}
        elif "metric" in rows:
            lvl = list(rows).index("metric")
            groups = {}
            for idx in series.index:
                m = idx[lvl] if isinstance(idx, tuple) else idx
                groups.setdefault(m, []).append(idx)
        else:
            groups = {"": series.index}
        for metric, idxs in groups.items():
            vals = series.loc[list(idxs)].dropna()
            if vals.empty:
                continue
            best = vals.max() if higher_is_better(metric) else vals.min()
            for idx in vals.index[vals == best]:
                mask.loc[idx, col] = True
    return mask


def _fmt(mean: float, std: float, n: int, digits: int, lo: float = math.nan, hi: float = math.nan,
         seed_spread: bool = True) -> str:
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "–"
    s = f"{mean:.{digits}f}"
    if n and n > 1 and seed_spread:
        s += f" ± {std:.{digits}f}"
    if lo is not None and not pd.isna(lo):
        s += f" [{lo:.{digits}f}, {hi:.{digits}f}]"
    return s


def _mark(wide: pd.DataFrame, name: str, idx, c) -> float:
    if name not in wide.columns.get_level_values(0):
        return 0.0
    v = wide[name].loc[idx, c]
    return 0.0 if pd.isna(v) else float(v)


def _suffix(wide: pd.DataFrame, idx, c) -> str:
    out = []
    if _mark(wide, "partial", idx, c):
        out.append("(partial)")
    if _mark(wide, "failed", idx, c):
        out.append("(failed)")
    if (k := int(_mark(wide, "errors", idx, c))):
        out.append(f"({k} errored)")
    if _mark(wide, "qdiff", idx, c):
        out.append("(≠ questions)")
    return "".join(" " + x for x in out)


def _cells(wide: pd.DataFrame, rows, cols, digits: int, bold: tuple[str, str], seed_spread: bool = True):
    mask = _best_mask(wide, rows, cols)
    means, stds, ns = wide["mean"], wide["std"], wide["n"]
    has_ci = "lo" in wide.columns.get_level_values(0)
    header = [*rows, *(_header(c, cols) for c in means.columns)]
    body = []
    for idx in means.index:
        keys = list(idx) if isinstance(idx, tuple) else [idx]
        line = [str(k) for k in keys]
        for c in means.columns:
            n = ns.loc[idx, c]
            lo, hi = (wide["lo"].loc[idx, c], wide["hi"].loc[idx, c]) if has_ci else (math.nan, math.nan)
            # no sampled LLM call: nothing to spread, unless the seeds' values differ anyway (a seeded
            # draw inside the method: ToG's neighbour sample, ReKnoS's k-means), which is then shown
            std = wide["std"].loc[idx, c] if "std" in set(wide.columns.get_level_values(0)) else math.nan
            spread = seed_spread and (not _mark(wide, "unsampled", idx, c) or (not pd.isna(std) and std > 0))
            cell = _fmt(means.loc[idx, c], stds.loc[idx, c], 0 if pd.isna(n) else int(n), digits, lo, hi, spread)
            if mask.loc[idx, c] and cell != "–":
                cell = f"{bold[0]}{cell}{bold[1]}"
            if cell != "–":
                cell += _suffix(wide, idx, c)
            line.append(cell)
        body.append(line)
    return header, body


def render_markdown(wide: pd.DataFrame, rows, cols, digits: int = 3, seed_spread: bool = True) -> str:
    header, body = _cells(wide, rows, cols, digits, ("**", "**"), seed_spread)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join(lines) + "\n"


def _tex_escape(s: str) -> str:
    for a, b in (("\\", r"\textbackslash{}"), ("_", r"\_"), ("%", r"\%"), ("&", r"\&"), ("#", r"\#"),
                 ("$", r"\$"), ("{", r"\{"), ("}", r"\}")):
        s = s.replace(a, b)
    return s


def render_latex(wide: pd.DataFrame, rows, cols, digits: int = 3, seed_spread: bool = True) -> str:
    header, body = _cells(wide, rows, cols, digits, ("\x00B", "\x00E"), seed_spread)

    def cell(s: str) -> str:
        s = _tex_escape(s).replace("±", r"$\pm$").replace("≠", r"$\neq$")
        return s.replace("\x00B", r"\textbf{").replace("\x00E", "}")

    spec = "l" * len(rows) + "r" * (len(header) - len(rows))
    out = [rf"\begin{{tabular}}{{{spec}}}", r"\toprule", " & ".join(cell(h) for h in header) + r" \\", r"\midrule"]
    out += [" & ".join(cell(c) for c in r) + r" \\" for r in body]
    out += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(out) + "\n"


def render_csv(wide: pd.DataFrame) -> str:
    """Numbers, not formatted strings: one row per table row × column with mean/std/n."""
    flat = wide.stack(list(range(1, wide.columns.nlevels)), future_stack=True) if wide.columns.nlevels > 1 else wide
    return flat.reset_index().to_csv(index=False)


def render_missing(missing: Sequence[Mapping[str, str]]) -> str:
    if not missing:
        return ""
    return "\n".join(["Missing/failed runs:"] + [f"- {m['job']}: {m['reason']}" for m in missing]) + "\n"
