"""Rendering a pivoted table: caption, Markdown, LaTeX, CSV, and the list of missing runs."""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import pandas as pd

from kgreason.metrics import METRICS, higher_is_better
from kgreason.tables.cells import CIOptions
from kgreason.tables.labels import _header, metric_label

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
            seed_spread: bool = True, no_interval: Sequence[str] = (), cols: Sequence[str] = (),
            labels: Mapping[str, str] | None = None) -> str:
    """What a cell is: the mean over seeds, what its ``±`` is, and what its ``[lo, hi]`` is over.
    ``no_interval``: the "No interval" lines printed with the table (the caption points to them
    only when there are some); ``cols``/``labels`` name the run-level columns that have none."""
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
        run_level = [c for c in wide["mean"].columns if not _metric_of(c, cols).startswith("metric/")
                     and wide["mean"][c].notna().any()] if isinstance(wide["mean"], pd.DataFrame) else []
        if run_level:
            names = list(dict.fromkeys(metric_label(_metric_of(c, cols), labels) for c in run_level))
            parts.append(f"{', '.join(names)}: a run-level figure with no per-question values, so no interval.")
        if no_interval:
            parts.append("Score cells without [lo, hi]: the \"No interval\" lines below say why.")
    marks = set(wide.columns.get_level_values(0))
    parts += [text for mark, text in MARK_NOTES.items() if mark in marks]
    return " ".join(parts)


#: judge/<x> figures that count or cost (never bolded)
_JUDGE_COUNTS = ("calls", "cache_hits", "prompt_tokens", "completion_tokens", "reasoning_tokens", "cost_usd", "errors")


def is_score(key: str) -> bool:
    """Whether a column is a score a table may bold: a ``metric/*`` score (not a count of what the
    method did, whose ``worst`` is None: ``search_space``, ``triples_written``) or a judge rating;
    never a size (``retrieval/*``), a cost (``llm/*``, ``run/wall_s``) or a run count (``run/*``)."""
    key = str(key)
    if key.startswith("metric/"):
        m = METRICS.get(key.removeprefix("metric/"))
        return m is None or m.worst is not None
    if key.startswith("judge/"):
        return key.rsplit("/", 1)[-1] not in _JUDGE_COUNTS
    return False


def _metric_of(col, cols: Sequence[str]) -> str:
    parts = col if isinstance(col, tuple) else (col,)
    key = dict(zip(cols, parts))
    return str(key["metric"]) if "metric" in key else str(parts[-1])


def _best_mask(wide: pd.DataFrame, rows: Sequence[str], cols: Sequence[str], digits: int | None = None) -> pd.DataFrame:
    """Boolean frame shaped like ``wide['mean']``: True at the best cell of each score column
    (:func:`is_score`; per metric where the metric is a row axis), by the metric's direction.
    Nothing is bolded where fewer than two rows have a value, or where every row has the same
    (rounded by the caller) value: there is no best to point at."""
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
            if not is_score(str(metric)):
                continue
            vals = series.loc[list(idxs)].dropna()
            if digits is not None:
                vals = vals.round(digits)
            if len(vals) < 2 or vals.nunique() < 2:
                continue
            best = vals.max() if higher_is_better(str(metric)) else vals.min()
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


def constant_col_axes(wide: pd.DataFrame, cols: Sequence[str]) -> list[int]:
    """Positions of the column axes other than ``metric`` that have one value in every column of
    the table (``dataset`` in a one-dataset sweep): left out of the headers, said in the caption."""
    means = wide["mean"]
    if not isinstance(means, pd.DataFrame) or not isinstance(means.columns, pd.MultiIndex):
        return []
    return [i for i, name in enumerate(cols) if name != "metric" and i < means.columns.nlevels
            and means.columns.get_level_values(i).nunique() == 1]


def column_note(wide: pd.DataFrame, cols: Sequence[str]) -> str:
    """``Every column: dataset = embedded.``, for the axes :func:`constant_col_axes` leaves out."""
    skip = constant_col_axes(wide, cols)
    if not skip:
        return ""
    cols_idx = wide["mean"].columns
    return "Every column: " + ", ".join(f"{cols[i]} = {cols_idx.get_level_values(i)[0]}" for i in skip) + "."


def _cell_grid(wide: pd.DataFrame, rows, cols, digits: int, seed_spread: bool = True,
               labels: Mapping[str, str] | None = None, row_suffix: Mapping | None = None,
               metric_digits: Mapping[str, int] | None = None):
    """The table as parts: ``(header, [(row labels, [cell dict or None (no value)])])``. A cell is
    ``{"mean", "std" (None: no ± shown), "lo", "hi" (NaN: no interval), "digits", "bold", "suffix"}``;
    the Markdown and the LaTeX format it each their own way."""
    mask = _best_mask(wide, rows, cols, digits)
    means, stds, ns = wide["mean"], wide["std"], wide["n"]
    has_ci = "lo" in wide.columns.get_level_values(0)
    skip = constant_col_axes(wide, cols)
    header = [*rows, *(_header(c, cols, labels or {}, skip) for c in means.columns)]
    metric_row = list(rows).index("metric") if "metric" in rows else None
    body = []
    for idx in means.index:
        keys = list(idx) if isinstance(idx, tuple) else [idx]
        line = [str(k) for k in keys]
        if metric_row is not None and metric_row < len(line):
            line[metric_row] = metric_label(line[metric_row], labels)
        if row_suffix and row_suffix.get(idx):
            line[-1] += f" ({row_suffix[idx]})"
        cells = []
        for c in means.columns:
            m = means.loc[idx, c]
            if m is None or (isinstance(m, float) and math.isnan(m)):
                cells.append(None)
                continue
            n = ns.loc[idx, c]
            d = digits
            if metric_digits:
                col_key = dict(zip(cols, c if isinstance(c, tuple) else (c,)))
                metric = col_key.get("metric", keys[list(rows).index("metric")] if "metric" in rows else None)
                d = metric_digits.get(metric, digits)
                if d == 0 and not pd.isna(m) and abs(m - round(m)) > 1e-9:
                    d = 1  # a count's mean over seeds that is not whole keeps its fraction (10.5, not 10)
            lo, hi = (wide["lo"].loc[idx, c], wide["hi"].loc[idx, c]) if has_ci else (math.nan, math.nan)
            # no sampled LLM call: nothing to spread, unless the seeds' values differ anyway (a seeded
            # draw inside the method: ToG's neighbour sample, ReKnoS's k-means), which is then shown
            std = wide["std"].loc[idx, c] if "std" in set(wide.columns.get_level_values(0)) else math.nan
            spread = seed_spread and (not _mark(wide, "unsampled", idx, c) or (not pd.isna(std) and std > 0))
            shown_n = 0 if pd.isna(n) else int(n)
            cells.append({"mean": float(m), "std": float(stds.loc[idx, c]) if shown_n > 1 and spread else None,
                          "lo": lo, "hi": hi, "digits": d, "bold": bool(mask.loc[idx, c]),
                          "suffix": _suffix(wide, idx, c)})
        body.append((line, cells))
    return header, body


def _cells(wide: pd.DataFrame, rows, cols, digits: int, bold: tuple[str, str], seed_spread: bool = True,
           labels: Mapping[str, str] | None = None, row_suffix: Mapping | None = None,
           metric_digits: Mapping[str, int] | None = None):
    header, grid = _cell_grid(wide, rows, cols, digits, seed_spread, labels, row_suffix, metric_digits)
    body = []
    for line, cells in grid:
        out = list(line)
        for x in cells:
            if x is None:
                out.append("–")
                continue
            cell = _fmt(x["mean"], x["std"] or 0.0, 2 if x["std"] is not None else 0, x["digits"], x["lo"], x["hi"])
            if x["bold"]:
                cell = f"{bold[0]}{cell}{bold[1]}"
            out.append(cell + x["suffix"])
        body.append(out)
    return header, body


def render_markdown(wide: pd.DataFrame, rows, cols, digits: int = 3, seed_spread: bool = True,
                    labels: Mapping[str, str] | None = None, row_suffix: Mapping | None = None,
                    metric_digits: Mapping[str, int] | None = None) -> str:
    """A pipe table: metric columns headed by their labels (:mod:`~kgreason.tables.labels`), the
    best of at least two rows of each score column in bold; ``row_suffix``: ``{row key: note}``
    put in parentheses after the row's last label (``replayed``); ``metric_digits``: ``{metric:
    decimals}`` where a metric is not printed with ``digits`` (0 = a count: whole unless its mean is not)."""
    header, body = _cells(wide, rows, cols, digits, ("**", "**"), seed_spread, labels, row_suffix, metric_digits)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join(lines) + "\n"


def _tex_escape(s: str) -> str:
    for a, b in (("\\", r"\textbackslash{}"), ("_", r"\_"), ("%", r"\%"), ("&", r"\&"), ("#", r"\#"),
                 ("$", r"\$"), ("{", r"\{"), ("}", r"\}")):
        s = s.replace(a, b)
    return s


def _tex_text(s: str) -> str:
    """Escaped, with the table's few non-ASCII signs written as plain LaTeX."""
    s = _tex_escape(s)
    for a, b in (("±", r"$\pm$"), ("≠", r"$\neq$"), ("–", "--"), ("—", "---"), ("≥", r"$\geq$"), ("≤", r"$\leq$"),
                 ("×", r"$\times$"), ("·", r"$\cdot$"), ("“", "``"), ("”", "''"), ("’", "'")):
        s = s.replace(a, b)
    return s


def tex_label(name: str) -> str:
    """``tab:results``: a LaTeX label from the table's file stem (letters, digits, ``-`` ``:`` ``.``)."""
    return "tab:" + ("".join(ch if ch.isalnum() or ch in "-:." else "-" for ch in str(name)) or "results")


def check_tex_label(label: str) -> str:
    """``--tex-label``: ``label`` when LaTeX takes it as it is in ``\\label{}`` and ``\\ref{}``
    (letters, digits and ``-:._/+``); else a one-line ValueError."""
    import re

    if not re.fullmatch(r"[A-Za-z0-9:._/+-]+", label or ""):
        raise ValueError(f"--tex-label {label!r}: a LaTeX label is letters, digits and -:._/+ (no space, brace, "
                         "%, # or backslash), e.g. tab:metaqa-ablation")
    return label


#: how a ``.tex`` table shows a cell's interval (``kgreason tables --tex-ci``)
TEX_CI_FORMS = ("below", "sub", "pm")
#: the ``.tex``'s font size and column gap: a paper's table size, so that a few methods and four
#: metrics fit one column of a two-column article (about 241 pt) at their own size
TEX_SIZE, TEX_COLSEP = r"\small", r"\setlength{\tabcolsep}{4pt}"
#: a table wider than the column (many metric columns) is scaled down to it, never overfull
TEX_FIT = r"\ifdim\wd0>\columnwidth\resizebox{\columnwidth}{!}{\usebox0}\else\usebox0\fi"


def tex_digits(questions: int | None) -> int:
    """Decimals a score in [0, 1] supports over ``questions`` questions: the 95 % interval of a
    mean over N questions is about ±1/√N wide (at most; ±1.96·0.5/√N for a proportion), and a
    decimal whose unit is under a tenth of that says nothing: ``ceil(log10(10·√N))``, between 1
    and 3 (12 or 100 questions: 2 decimals; 300: 3)."""
    if not questions or questions < 1:
        return 3
    return max(1, min(3, math.ceil(math.log10(10 * math.sqrt(questions)) - 1e-9)))


def _tex_num(v: float, d: int, short: bool) -> str:
    """``v`` to ``d`` decimals; ``short``: a score's leading zero left out (``.38``, ``-.05``, but
    ``1.00``), as papers print proportions, so four metric columns fit one column of the page."""
    t = f"{v:.{d}f}"
    if short and d > 0:
        t = t.replace("0.", ".", 1) if t.startswith("0.") else (t.replace("-0.", "-.", 1) if t.startswith("-0.") else t)
    return t


def _tex_cell(x: Mapping | None, form: str) -> tuple[str, str]:
    """``(the cell, its second line)`` in LaTeX; the second line holds the interval in the
    ``below`` form and is empty otherwise."""
    if x is None:
        return "--", ""
    d, short = x["digits"], bool(x.get("short"))
    num = lambda v: _tex_num(v, d, short)  # noqa: E731
    has_ci = x["lo"] is not None and not pd.isna(x["lo"])
    s = num(x["mean"])
    if form == "pm" and has_ci:
        s += rf"\,$\pm$\,{num((x['hi'] - x['lo']) / 2)}"
    elif x["std"] is not None:  # the seed spread in small type beside the mean: a column stays narrow
        s += rf"\,{{\scriptsize$\pm${num(x['std'])}}}"
    if x["bold"]:
        s = rf"\textbf{{{s}}}"
    below = ""
    if has_ci and form == "sub":
        s += rf"$_{{[{num(x['lo'])},\,{num(x['hi'])}]}}$"
    elif has_ci and form == "below":
        below = rf"\scriptsize[{num(x['lo'])}, {num(x['hi'])}]"
    if x["suffix"]:
        s += rf" {{\scriptsize {_tex_text(x['suffix'].strip())}}}"
    return s, below


def _tex_head(h: str) -> str:
    """A metric column's header; one of two words or more and over 8 characters is set on two
    lines (``All`` over ``answers``), so a header is no wider than its numbers."""
    words = h.split()
    if len(words) < 2 or len(h) <= 8:
        return _tex_text(h)
    cut = min(range(1, len(words)), key=lambda i: abs(len(" ".join(words[:i])) - len(" ".join(words[i:]))))
    top, bottom = _tex_text(" ".join(words[:cut])), _tex_text(" ".join(words[cut:]))
    return rf"\begin{{tabular}}[b]{{@{{}}r@{{}}}}{top}\\{bottom}\end{{tabular}}"


def _short_columns(wide: pd.DataFrame, rows, cols, metric_digits: Mapping[str, int] | None) -> list[bool]:
    """Per column of ``wide['mean']``: whether its figures are scores to print without their
    leading zero (the metrics ``metric_digits`` names: the .tex's own precision for scores)."""
    out = []
    for c in wide["mean"].columns:
        col_key = dict(zip(cols, c if isinstance(c, tuple) else (c,)))
        metric = col_key.get("metric")
        if metric is None and "metric" in rows:  # the metric is a row axis: decided per row, not done here
            out.append(False)
            continue
        out.append(bool(metric_digits) and str(metric) in metric_digits and str(metric).startswith("metric/"))
    return out


def render_latex(wide: pd.DataFrame, rows, cols, digits: int = 3, seed_spread: bool = True,
                 labels: Mapping[str, str] | None = None, caption_text: str = "", label: str = "tab:results",
                 *, ci_form: str = "below", note: str = "", metric_digits: Mapping[str, int] | None = None,
                 caption_is_latex: bool = False) -> str:
    """A ``table`` float for one column of a paper: booktabs rules (``\\toprule``, ``\\midrule``,
    ``\\bottomrule``), the paper's table size (``\\small``, 4 pt column gap), scaled down to
    ``\\columnwidth`` only when it is wider (:data:`TEX_FIT`), ``\\caption`` above it and
    ``\\label``, and ``note`` (the long explanation) in small type under it. ``ci_form``: a cell's
    interval on a second line under the means (``below``), as a subscript (``sub``), or as ``±`` half
    its width (``pm``, the seed spread then left to the CSV); the seed spread in small type beside
    the mean; a score (a ``metric/*`` key of ``metric_digits``) without its leading zero; a long
    metric header on two lines. Needs ``booktabs`` and ``graphicx``
    (the first line says so); every sign is written in ASCII. ``caption_is_latex``: the caption is
    the user's LaTeX (``--caption``), put in as written."""
    if ci_form not in TEX_CI_FORMS:
        raise ValueError(f"--tex-ci {ci_form!r}: one of {', '.join(TEX_CI_FORMS)}")
    header, grid = _cell_grid(wide, rows, cols, digits, seed_spread, labels, metric_digits=metric_digits)
    spec = "l" * len(rows) + "r" * (len(header) - len(rows))
    heads = [_tex_text(h) for h in header[:len(rows)]] + [_tex_head(h) for h in header[len(rows):]]
    lines = [" & ".join(heads) + r" \\", r"\midrule"]
    short = _short_columns(wide, rows, cols, metric_digits)
    for keys, cells in grid:
        parts = [_tex_cell(None if x is None else {**x, "short": short[i]}, ci_form) for i, x in enumerate(cells)]
        lines.append(" & ".join([*(_tex_text(k) for k in keys), *(p[0] for p in parts)]) + r" \\")
        if any(p[1] for p in parts):
            lines.append(" & ".join([""] * len(keys) + [p[1] for p in parts]) + r" \\")
    out = [r"% kgreason tables: needs \usepackage{booktabs} and \usepackage{graphicx}; scaled to the column only "
           r"when wider than it", r"\begin{table}[t]", r"\centering", TEX_SIZE, TEX_COLSEP]
    if caption_text:
        out.append(rf"\caption{{{caption_text if caption_is_latex else _tex_text(caption_text)}}}")
    out += [rf"\label{{{label}}}", r"\smallskip"]  # the caption is above the table: a gap before its top rule
    out += [rf"\sbox0{{\begin{{tabular}}{{{spec}}}", r"\toprule", *lines, r"\bottomrule", r"\end{tabular}}%", TEX_FIT]
    if note:
        out.append(rf"\par\smallskip{{\footnotesize\raggedright {_tex_text(note)}\par}}")
    out.append(r"\end{table}")
    return "\n".join(out) + "\n"


def render_csv(wide: pd.DataFrame) -> str:
    """Numbers, not formatted strings: one row per table row × column with mean/std/n."""
    flat = wide.stack(list(range(1, wide.columns.nlevels)), future_stack=True) if wide.columns.nlevels > 1 else wide
    return flat.reset_index().to_csv(index=False)


def render_missing(missing: Sequence[Mapping[str, str]]) -> str:
    if not missing:
        return ""
    return "\n".join(["Missing/failed runs:"] + [f"- {m['job']}: {m['reason']}" for m in missing]) + "\n"
