"""Paired comparisons of every row with a baseline row on the same questions (``--baseline``)."""

from __future__ import annotations

from typing import Sequence

import pandas as pd

from kgreason import stats
from kgreason.tables.cells import CIOptions, cell_questions
from kgreason.tables.labels import _header


def _row_label(rows: Sequence[str], key: tuple) -> str:
    return ", ".join(f"{r}={k}" for r, k in zip(rows, key) if str(k) != "")


def _matches(rows: Sequence[str], key: tuple, axis: str, value: str) -> bool:
    vals = dict(zip(rows, map(str, key)))
    if axis in vals and vals[axis] == value:
        return True
    return "variant" in vals and f"{axis}={value}" in vals["variant"].split(",")


def paired_comparisons(d: pd.DataFrame, examples: pd.DataFrame | None, rows: Sequence[str],
                       cols: Sequence[str], baseline: str, ci: CIOptions | None = None) -> pd.DataFrame:
    """Each row against the baseline row (``axis=value``, e.g. ``reasoner=io``) on the same
    questions: the paired difference of per-question values (seed means), its paired-bootstrap
    interval and p-value, and McNemar's exact p-value for 0/1 metrics.

    The baseline row of a row is the row with ``axis=value`` that agrees with it on the other row
    axes (or the only row with ``axis=value``). Raises ``ValueError`` when a row and its baseline
    did not answer the same questions (naming the rows, how many ids differ and a few of them), and
    when the baseline or per-example values are missing.
    """
    ci = ci or CIOptions()
    if "=" not in baseline:
        raise ValueError(f"--baseline {baseline!r}: expected AXIS=VALUE, e.g. reasoner=io or ablation=none")
    axis, value = (x.strip() for x in baseline.split("=", 1))
    rows, cols = list(rows), list(cols)
    if axis not in rows and not ("variant" in rows and axis in d.columns):
        raise ValueError(f"--baseline {baseline}: {axis!r} is not a row axis of this table (rows: {', '.join(rows)})")
    qs = cell_questions(d, examples, rows + cols)
    if not qs:
        raise ValueError(f"--baseline {baseline}: no per-example values (predictions.jsonl) to pair questions on")
    row_keys = list(dict.fromkeys(tuple(map(str, k if isinstance(k, tuple) else (k,)))
                                  for k in d.groupby(rows, observed=True, sort=True).groups))
    cands = [k for k in row_keys if _matches(rows, k, axis, value)]
    if not cands:
        raise ValueError(f"--baseline {baseline}: no row has {axis}={value} "
                         f"(rows: {'; '.join(_row_label(rows, k) for k in row_keys)})")
    others = [i for i, r in enumerate(rows) if r not in (axis, "variant")]
    col_keys = list(dict.fromkeys(k[len(rows):] for k in qs))  # the table's column order
    # label rows by the axes that tell them apart
    shown = [i for i in range(len(rows)) if len({k[i] for k in row_keys}) > 1] or list(range(len(rows)))
    label = lambda k: _row_label([rows[i] for i in shown], tuple(k[i] for i in shown))  # noqa: E731
    out = []
    for r in row_keys:
        if r in cands:
            continue
        base = cands if len(cands) == 1 else [c for c in cands if all(c[i] == r[i] for i in others)]
        if len(base) != 1:
            raise ValueError(f"--baseline {baseline}: row {label(r)} has "
                             f"{'no' if not base else 'more than one'} baseline row with {axis}={value}")
        b = base[0]
        for c in col_keys:
            x, y = qs.get(r + c), qs.get(b + c)
            if x is None or y is None:
                continue
            if set(x.index) != set(y.index):
                only_r = sorted(set(x.index) - set(y.index), key=str)
                only_b = sorted(set(y.index) - set(x.index), key=str)
                raise ValueError(
                    f"--baseline {baseline}: row {label(r)} and baseline row {label(b)} "
                    f"did not answer the same questions for {_header(c, cols)}: {len(only_r) + len(only_b)} ids "
                    f"differ ({len(x)} vs {len(y)} questions; only in the row: {', '.join(map(str, only_r[:3])) or '-'}; "
                    f"only in the baseline: {', '.join(map(str, only_b[:3])) or '-'}); not compared")
            y = y.loc[x.index]
            both = x.notna() & y.notna()  # questions the metric applies to in both rows
            if not both.any():
                continue
            pr = stats.paired_bootstrap(x[both].to_numpy(), y[both].to_numpy(), ci.B, ci.level, ci.seed)
            out.append({"row": label(r), "baseline": label(b), "column": _header(c, cols),
                        "diff": pr.diff, "lo": pr.lo, "hi": pr.hi, "p": pr.p, "mcnemar_p": pr.mcnemar_p,
                        "questions": pr.n, "excludes_zero": pr.excludes_zero})
    return pd.DataFrame(out, columns=["row", "baseline", "column", "diff", "lo", "hi", "p", "mcnemar_p",
                                      "questions", "excludes_zero"])


def _p(p) -> str:
    if p is None or pd.isna(p):
        return "–"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def render_paired(paired: pd.DataFrame, baseline: str, ci: CIOptions | None = None, digits: int = 3) -> str:
    ci = ci or CIOptions()
    lines = [f"Paired comparisons against {baseline} (same questions):", "",
             f"| row | column | Δ vs {baseline} | {ci.level:.0%} CI | p (paired bootstrap) | p (McNemar exact) | questions |",
             "|---|---|---|---|---|---|---|"]
    for _, r in paired.iterrows():
        mark = " *" if r["excludes_zero"] else ""
        lines.append(f"| {r['row']} | {r['column']} | {r['diff']:+.{digits}f}{mark} | "
                     f"[{r['lo']:+.{digits}f}, {r['hi']:+.{digits}f}] | {_p(r['p'])} | {_p(r['mcnemar_p'])} | "
                     f"{int(r['questions'])} |")
    lines += ["", f"Δ = row − baseline, the mean over the questions both answered of the per-question difference "
                  f"(each question's value averaged over seeds). * the {ci.level:.0%} paired percentile bootstrap "
                  f"interval (B = {ci.B:,}, questions resampled jointly for both rows) excludes 0. p (paired bootstrap): "
                  "two-sided, from the centred resampled differences; p (McNemar exact): the exact binomial test of "
                  "the discordant questions, for 0/1 metrics only."]
    return "\n".join(lines) + "\n"
