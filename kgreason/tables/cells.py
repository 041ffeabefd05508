"""Table cells: the tidy frame restricted to the asked metrics, the table axes, and per cell the
mean and seed spread over runs and the bootstrap interval of its mean over questions."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from kgreason import stats
from kgreason.tables.collect import GROUPS, TIDY_COLUMNS, Job
from kgreason.tables.labels import _header
from kgreason.tables.marks import cell_marks
from kgreason.tables.rows import RunRows


#: a rate measured over a retrieved set -> the mean size of that set (docs/metrics.md), shown beside it
BESIDE = {"metric/answer_coverage": "retrieval/retrieved_size",
          "metric/answer_coverage_n_paths": "retrieval/retrieved_size_n_paths"}


def metric_order(df: pd.DataFrame, metrics: Sequence[str] | None) -> list[str]:
    """The metric keys of the table in column order: ``metrics`` as asked (else every ``metric/*``
    key in ``metrics.json``'s order), each retrieval rate followed by the mean size of the set it
    is measured over (:data:`BESIDE`) where the runs recorded it."""
    have = list(dict.fromkeys(df["metric"].astype(str)))
    keys = [_metric_key(m) for m in metrics] if metrics else [m for m in have if m.startswith("metric/")]
    out: list[str] = []
    for k in dict.fromkeys(keys):
        out.append(k)
        if k in BESIDE and BESIDE[k] in have and BESIDE[k] not in keys:
            out.append(BESIDE[k])
    return out


def _metric_filter(df: pd.DataFrame, metrics: Sequence[str] | None) -> pd.DataFrame:
    return df[df["metric"].isin(set(metric_order(df, metrics)))]


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
            if self.B > MAX_BOOT:
                raise ValueError(f"--boot {self.B:,}: at most {MAX_BOOT:,} resamples (the interval's 3 digits are "
                                 "settled long before; each resample draws one index per question)")


#: the most bootstrap resamples a table asks for (``--boot``)
MAX_BOOT = 100_000


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
    order = metric_order(df, metrics)
    params = _param_columns(d)
    if "variant" in list(rows) + list(cols):  # what no other axis names: the remaining swept overrides
        rest = [p for p in params if p not in list(rows) + list(cols)]
        d["variant"] = [",".join(f"{p}={r[p]}" for p in rest if isinstance(r[p], str) and r[p] != "")
                        for _, r in d[rest].iterrows()] if rest else ""
    for c in list(rows) + list(cols):
        if c == "metric":  # the order asked for, else metrics.json's (the preset's dataset.metrics)
            d[c] = pd.Categorical(d[c].astype(str), categories=[m for m in order if m in set(d[c])], ordered=True)
        else:
            d[c] = _ordered(d[c].fillna("").astype(str))
    return d


def per_question(examples) -> dict[str, RunRows]:
    """``{job: RunRows}``: the compact per-question values (:func:`~kgreason.tables.collect.gather`),
    or the same built from :func:`~kgreason.tables.collect.collect_examples`' tidy frame."""
    if examples is None:
        return {}
    if isinstance(examples, dict):
        return examples
    out = {}
    for job, g in examples.groupby("job", sort=False):
        ids = list(dict.fromkeys(g["id"].astype(str)))
        values = {m: gm.assign(id=gm["id"].astype(str)).groupby("id", sort=False)["value"].last()
                  .reindex(ids).to_numpy(dtype=float) for m, gm in g.groupby("metric", sort=False)}
        out[str(job)] = RunRows(Path(str(job)), np.array(ids, dtype=object), values)
    return out


def cell_questions(d: pd.DataFrame, examples, keys: Sequence[str]) -> dict[tuple, pd.Series]:
    """Per-question values of every cell (a group of ``d`` by ``keys``): ``{cell key: Series
    indexed by example id}``, each question's value being its mean over the cell's runs (seeds)
    that scored it; NaN for a question the cell answered but the metric did not apply to
    (``None`` in every run). Cells whose runs wrote no per-example values are absent.
    ``examples``: :func:`per_question`'s ``{job: RunRows}`` or a :func:`collect_examples` frame."""
    out: dict[tuple, pd.Series] = {}
    pq = per_question(examples)
    if not pq:
        return out
    for key, sub in d.groupby(list(keys), observed=True, sort=True):
        key = tuple(map(str, key if isinstance(key, tuple) else (key,)))
        names = set(sub["metric"])
        if len(names) != 1:
            continue
        m = next(iter(names))
        if not str(m).startswith("metric/"):
            continue
        m = str(m).removeprefix("metric/")
        parts = [pd.Series(r.values[m], index=r.ids) for j in dict.fromkeys(sub["job"])
                 if (r := pq.get(j)) is not None and m in r.values and len(r.ids)]
        if not parts:
            continue
        if len(parts) == 1:
            out[key] = parts[0]
        else:  # dataset order (first seen): the draw is reproducible
            out[key] = pd.concat(parts).groupby(level=0, sort=False).mean()
    return out


def pivot(df: pd.DataFrame, rows: Sequence[str] = ("reasoner", "ablation", "variant"),
          cols: Sequence[str] = ("dataset", "metric"), metrics: Sequence[str] | None = None,
          examples=None, ci: CIOptions | None = None, jobs: Mapping[str, Job] | None = None) -> pd.DataFrame:
    """Mean ± std over seeds (and any column not in rows/cols); with ``examples``
    (:func:`collect_examples`) and ``ci`` (default: bootstrap, B = 2,000, 95 %), each cell also
    gets the percentile bootstrap interval of its mean over questions. With ``jobs``
    (:func:`~kgreason.tables.collect.gather`) each cell also gets what its runs were
    (:func:`kgreason.tables.marks.cell_marks`: ``errors``, ``partial``, ``unsampled``, ``qdiff``).

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
    if jobs is not None:
        st = st.join(cell_marks(d, jobs, rows + cols, st.index))
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
        key = dict(zip(wide["mean"].columns.names, c if isinstance(c, tuple) else (c,))).get("metric", c)
        if str(key).startswith("metric/"):
            continue  # a score the same in every row is a result, not a constant: it stays
        vals = {f"{v:.{digits}f}" for v in col}
        if has_ci and len({(f"{a:.{digits}f}", f"{b:.{digits}f}") for a, b in zip(wide["lo"][c], wide["hi"][c])}) > 1:
            continue  # same mean, different questions: the intervals tell the rows apart
        if len(vals) == 1:
            drop.append(c)
            notes.append(f"{_header(c, None, {})} = {vals.pop()} in every row")
    if not drop or len(drop) == len(means.columns):
        return wide, []
    keep = [c for c in wide.columns if c[1:] not in [d if isinstance(d, tuple) else (d,) for d in drop]]
    return wide[keep], notes


def seeds_change_nothing(df: pd.DataFrame, wide: pd.DataFrame, examples) -> bool:
    """True when the sweep has several seeds per cell and every seed gave the same result: every
    cell's spread is 0 and (where per-example values exist) every question's value is the same
    for every seed. Typical of temperature 0 with no sampling: the seeds repeat one run."""
    n = wide["n"]
    if not (n > 1).any().any():
        return False
    if (wide["std"].where(n > 1) > 0).any().any():
        return False
    pq = per_question(examples)
    if pq:
        setting = [c for c in df.columns if c not in ("job", "seed", "metric", "value")]
        per_job = df.drop_duplicates("job")
        for _, group in per_job.groupby([per_job[c].fillna("").astype(str) for c in setting], sort=False):
            runs = [pq[j] for j in group["job"] if j in pq]
            if len(runs) < 2:
                continue
            for m in sorted({m for r in runs for m in r.values}):
                parts = [pd.Series(r.values[m], index=r.ids).dropna() for r in runs if m in r.values]
                both = pd.concat(parts)
                if both.groupby(level=0, sort=False).nunique().gt(1).any():
                    return False
    return True
