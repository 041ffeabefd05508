"""Table cells: the tidy frame restricted to the asked metrics, the table axes, and per cell the
mean and seed spread over runs and the bootstrap interval of its mean over questions."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import pandas as pd

from kgreason import stats
from kgreason.tables.collect import GROUPS, TIDY_COLUMNS


def _metric_filter(df: pd.DataFrame, metrics: Sequence[str] | None) -> pd.DataFrame:
    if metrics:
        want = {m if "/" in m else f"metric/{m}" for m in metrics}
        df = df[df["metric"].isin(want)]
    else:
        df = df[df["metric"].str.startswith("metric/")]
    return df


@dataclass(frozen=True)
class CIOptions:
    """How cells get their interval: ``kind`` ``bootstrap`` (percentile, over questions) or
    ``none``; ``B`` resamples, ``level``, ``seed`` of the resampling."""
    kind: str = "bootstrap"
    B: int = stats.DEFAULT_B
    level: float = stats.DEFAULT_LEVEL
    seed: int = stats.DEFAULT_SEED

    def __post_init__(self):
        if self.kind not in ("bootstrap", "none"):
            raise ValueError(f"--ci must be 'bootstrap' or 'none', got {self.kind!r}")
        if self.kind == "bootstrap":
            stats._check(self.level, self.B)


def _metric_key(m: str) -> str:
    return m if "/" in m else f"metric/{m}"


def prepare(df: pd.DataFrame, rows: Sequence[str], cols: Sequence[str],
            metrics: Sequence[str] | None = None) -> pd.DataFrame:
    """The tidy frame restricted to ``metrics`` with every axis of ``rows + cols`` as an ordered
    categorical of strings (``variant`` rebuilt from the overrides no other axis names). The
    ``metric`` axis keeps the order ``metrics`` gives (``--metrics f1,em``: f1 first)."""
    d = _metric_filter(df, metrics).copy()
    if d.empty:
        raise ValueError("no metric values to tabulate (check --metrics and that the runs finished)")
    params = _param_columns(d)
    if "variant" in list(rows) + list(cols):  # what no other axis names: the remaining swept overrides
        rest = [p for p in params if p not in list(rows) + list(cols)]
        d["variant"] = [",".join(f"{p}={r[p]}" for p in rest if isinstance(r[p], str) and r[p] != "")
                        for _, r in d[rest].iterrows()] if rest else ""
    for c in list(rows) + list(cols):
        if c == "metric":  # the order asked for, else metrics.json's (the preset's dataset.metrics)
            order = list(dict.fromkeys(_metric_key(m) for m in metrics or []))
            order += [m for m in dict.fromkeys(d[c].astype(str)) if m not in order]
            d[c] = pd.Categorical(d[c].astype(str), categories=[m for m in order if m in set(d[c])], ordered=True)
        else:
            d[c] = _ordered(d[c].fillna("").astype(str))
    return d


def cell_questions(d: pd.DataFrame, examples: pd.DataFrame | None, keys: Sequence[str]) -> dict[tuple, pd.Series]:
    """Per-question values of every cell (a group of ``d`` by ``keys``): ``{cell key: Series
    indexed by example id}``, each question's value being its mean over the cell's runs (seeds)
    that scored it; NaN for a question the cell answered but the metric did not apply to
    (``None`` in every run). Cells whose runs wrote no per-example values are absent."""
    out: dict[tuple, pd.Series] = {}
    if examples is None or examples.empty:
        return out
    ex = examples
    by_job = {j: g for j, g in ex.groupby("job", sort=False)}
    for key, sub in d.groupby(list(keys), observed=True, sort=True):
        key = tuple(map(str, key if isinstance(key, tuple) else (key,)))
        names = set(sub["metric"])
        if len(names) != 1:
            continue
        m = next(iter(names))
        if not str(m).startswith("metric/"):
            continue
        m = str(m).removeprefix("metric/")
        parts = [g[g["metric"] == m] for j in dict.fromkeys(sub["job"]) if (g := by_job.get(j)) is not None]
        parts = [p for p in parts if not p.empty]
        if not parts:
            continue
        e = pd.concat(parts)
        out[key] = e.groupby("id", sort=False)["value"].mean()  # dataset order: the draw is reproducible
    return out


def pivot(df: pd.DataFrame, rows: Sequence[str] = ("reasoner", "ablation", "variant"),
          cols: Sequence[str] = ("dataset", "metric"), metrics: Sequence[str] | None = None,
          examples: pd.DataFrame | None = None, ci: CIOptions | None = None) -> pd.DataFrame:
    """Mean ± std over seeds (and any column not in rows/cols); with ``examples``
    (:func:`collect_examples`) and ``ci`` (default: bootstrap, B = 2,000, 95 %), each cell also
    gets the percentile bootstrap interval of its mean over questions.

    Returns:
        DataFrame indexed by ``rows``, with a column MultiIndex ``(stat, *cols)`` where stat is
        ``mean`` | ``std`` | ``n`` (runs, i.e. seeds), and with an interval ``lo`` | ``hi`` |
        ``q`` (questions) wherever per-example values exist.
    """
    rows, cols = table_axes(df, rows, cols)
    d = prepare(df, rows, cols, metrics)
    g = d.groupby(rows + cols, sort=True, observed=True)["value"]
    st = pd.DataFrame({"mean": g.mean(), "std": g.std(ddof=1).fillna(0.0), "n": g.count()})
    ci = ci or CIOptions()
    if examples is not None and ci.kind == "bootstrap":
        qs = cell_questions(d, examples, rows + cols)
        if qs:
            res = {k: stats.bootstrap_ci(v.dropna().to_numpy(), ci.B, ci.level, ci.seed)
                   for k, v in qs.items() if v.notna().any()}
            keys = [k if isinstance(k, tuple) else (k,) for k in st.index]
            st["lo"] = [res[k].lo if k in res else math.nan for k in keys]
            st["hi"] = [res[k].hi if k in res else math.nan for k in keys]
            st["q"] = [res[k].n if k in res else math.nan for k in keys]
    wide = st.unstack(cols) if cols else st
    return wide


def _param_columns(df: pd.DataFrame) -> list[str]:
    """Columns :func:`collect` added for swept overrides and extra groups."""
    return [c for c in df.columns if c not in TIDY_COLUMNS]


def table_axes(df: pd.DataFrame, rows: Sequence[str], cols: Sequence[str]) -> tuple[list[str], list[str]]:
    """The row and column axes of the table: the ones asked for, plus every axis whose value
    differs across jobs (a group choice such as ``kg``, or a swept override such as
    ``reasoner.width``) that neither names, appended to the rows. Cells then average over seeds
    only, never over two settings (a sweep over two KGs is two rows, not ``mean ± std``)."""
    rows, cols = list(rows), list(cols)
    known = [c for c in df.columns if c not in ("value", "job", "seed")]
    bad = [c for c in rows + cols if c not in known]
    if bad:
        raise KeyError(f"unknown table axes {bad}; choose from {known}")
    placed = set(rows + cols)
    params = _param_columns(df)
    covered = set(params) if "variant" in placed else set()
    for c in [*GROUPS, *params]:
        if c in placed or c in covered:
            continue
        if df[c].fillna("").astype(str).nunique() > 1:
            rows.append(c)
    return rows, cols


def _ordered(values: pd.Series) -> pd.Series:
    """A categorical whose order sorts numbers as numbers (``2 < 10``), then text."""
    def key(v: str):
        try:
            return (0, float(v), v)
        except ValueError:
            return (1, 0.0, v)

    cats = sorted(set(values), key=key)
    return pd.Categorical(values, categories=cats, ordered=True)


def _header(col, cols) -> str:
    parts = col if isinstance(col, tuple) else (col,)
    return " / ".join(str(p).removeprefix("metric/") for p in parts if str(p) != "")


def drop_constant_columns(wide: pd.DataFrame, digits: int = 3) -> tuple[pd.DataFrame, list[str]]:
    """Drop the table columns whose (rounded) mean, and interval where there is one, is the same
    in every row; return the smaller table and one caption note per
    dropped column (``run/n_examples = 20 in every row``). A one-row table keeps everything."""
    means = wide["mean"]
    if len(means.index) < 2 or not isinstance(means, pd.DataFrame):
        return wide, []
    drop, notes = [], []
    has_ci = "lo" in wide.columns.get_level_values(0)
    for c in means.columns:
        col = means[c]
        if col.isna().any():
            continue
        vals = {f"{v:.{digits}f}" for v in col}
        if has_ci and len({(f"{a:.{digits}f}", f"{b:.{digits}f}") for a, b in zip(wide["lo"][c], wide["hi"][c])}) > 1:
            continue  # same mean, different questions: the intervals tell the rows apart
        if len(vals) == 1:
            drop.append(c)
            notes.append(f"{_header(c, None)} = {vals.pop()} in every row")
    if not drop or len(drop) == len(means.columns):
        return wide, []
    keep = [c for c in wide.columns if c[1:] not in [d if isinstance(d, tuple) else (d,) for d in drop]]
    return wide[keep], notes


def seeds_change_nothing(df: pd.DataFrame, wide: pd.DataFrame, examples: pd.DataFrame | None) -> bool:
    """True when the sweep has several seeds per cell and every seed gave the same result: every
    cell's spread is 0 and (where per-example values exist) every question's value is the same
    for every seed. Typical of temperature 0 with no sampling: the seeds repeat one run."""
    n = wide["n"]
    if not (n > 1).any().any():
        return False
    if (wide["std"].where(n > 1) > 0).any().any():
        return False
    if examples is not None and not examples.empty:
        ex = examples[examples["job"].isin(set(df["job"]))].dropna(subset=["value"])
        key = [c for c in ex.columns if c not in ("job", "seed", "value", "gold_hops", "kg_hops")]
        if not ex.empty and (ex.groupby(key, dropna=False)["value"].nunique() > 1).any():
            return False
    return True
