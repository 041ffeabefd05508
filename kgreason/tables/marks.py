"""What each table cell's runs were, so that a cell never reads as more than it is.

Per cell (a group of jobs that differ only by seed, for one metric column):

* ``errors``: errored examples in its runs (``metrics.json`` ``run/errors``, else counted from
  ``predictions.jsonl``), summed over the runs; shown as ``(k errored)`` in the cell. Not for the
  ``run/*`` and ``llm/*`` bookkeeping columns, which count calls and examples, not answers.
* ``partial``: how many of its runs are partial (``run/partial``, ``run/status: partial`` or
  ``run/n_examples < run/n_expected``); shown as ``(partial)``.
* ``unsampled``: 1 where every run has ``llm/sampled_calls == 0`` (nothing was sampled, so the
  seeds cannot change anything): the cell shows no seed spread.
* ``failed``: how many of its runs wrote ``metrics.json`` and then failed (a ``failed.json`` beside
  it, e.g. the error-rate check); shown as ``(failed)``.
* ``qdiff``: how many question ids are not in every run of the cell (0: all answered the same
  questions); shown as ``(≠ questions)``.

A column is kept only where some cell has something to say (all-zero columns are dropped).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from kgreason.tables.collect import Job
from kgreason.tables.labels import _header, _label

MARKS = ("errors", "partial", "failed", "unsampled", "qdiff")


def _ids_not_in_every_run(jobs: Sequence[Job]) -> int:
    sets = [j.rows.ids for j in jobs if j.rows is not None]
    if len(sets) < 2:
        return 0
    first = sets[0]
    if all(len(s) == len(first) and np.array_equal(s, first) for s in sets[1:]):
        return 0  # the common case, no set built
    union, inter = set(first), set(first)
    for s in sets[1:]:
        ss = set(s)
        union |= ss
        inter &= ss
    return len(union) - len(inter)


def cell_marks(d: pd.DataFrame, jobs: Mapping[str, Job], keys: Sequence[str], index: pd.Index) -> pd.DataFrame:
    """The marks of every cell of ``d`` grouped by ``keys``, as a frame on ``index`` (the
    cells' index in :func:`~kgreason.tables.cells.pivot`)."""
    out = {}
    qdiff_of: dict[tuple[str, ...], int] = {}
    for key, sub in d.groupby(list(keys), observed=True, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        runs = [jobs[j] for j in dict.fromkeys(sub["job"]) if j in jobs]
        metric = str(sub["metric"].iloc[0])
        answers = not metric.startswith(("run/", "llm/"))
        errors = sum(j.errors or 0 for j in runs) if answers else 0
        sampled = [j.sampled_calls for j in runs]
        unsampled = int(len(runs) > 1 and all(s is not None and s == 0 for s in sampled))
        names = tuple(j.name for j in runs)
        if names not in qdiff_of:
            qdiff_of[names] = _ids_not_in_every_run(runs)
        out[key] = {"errors": errors, "partial": sum(j.partial for j in runs),
                    "failed": sum(j.failed is not None for j in runs), "unsampled": unsampled,
                    "qdiff": qdiff_of[names]}
    keys_of = [k if isinstance(k, tuple) else (k,) for k in index]
    frame = pd.DataFrame([out.get(k, dict.fromkeys(MARKS, 0)) for k in keys_of], index=index, columns=list(MARKS))
    return frame.loc[:, frame.fillna(0).ne(0).any()]


def _where(rows, cols, idx, c) -> str:
    """``reasoner=io`` or ``reasoner=io / cwq`` (the column's non-metric part, where there is one)."""
    col = dict(zip(cols, c if isinstance(c, tuple) else (c,)))
    rest = " / ".join(str(v) for k, v in col.items() if k != "metric" and str(v) != "")
    return _label(rows, idx) + (f" / {rest}" if rest else "")


def mark_notes(wide: pd.DataFrame, rows: Sequence[str], cols: Sequence[str], digits: int = 3) -> list[str]:
    """One line per row (and non-metric column) whose cells show no spread for want of sampling,
    or whose runs answered different questions."""
    have = set(wide.columns.get_level_values(0))
    notes: dict[str, str] = {}
    for name in ("unsampled", "qdiff"):
        if name not in have:
            continue
        frame = wide[name]
        for idx in frame.index:
            for c in frame.columns:
                v = frame.loc[idx, c]
                if pd.isna(v) or not v:
                    continue
                where = _where(rows, cols, idx, c)
                n = int(wide["n"].loc[idx, c])
                if name == "qdiff":
                    notes.setdefault(f"q:{where}", f"{where}: its {n} runs answered different questions "
                                                   f"({int(v)} ids not in every run): its seed spread is not the "
                                                   "method's alone, and its rows cannot be paired by question")
                    continue
                key = f"u:{where}"
                if key not in notes:
                    notes[key] = (f"{where}: no sampled calls: seeds change nothing (llm/sampled_calls = 0 in its "
                                  f"{n} runs); no ± shown")
                std = wide["std"].loc[idx, c]
                if not pd.isna(std) and std > 0 and "yet" not in notes[key]:
                    metric = dict(zip(cols, c if isinstance(c, tuple) else (c,))).get("metric", "")
                    notes[key] += (f", yet its seeds' values differ ({str(metric).removeprefix('metric/')} spread "
                                   f"{std:.{digits}f}, shown): a seeded draw inside the method (ToG's neighbour "
                                   "sample, ReKnoS's k-means) or something else varies between them")
    return list(notes.values())


def no_interval_notes(d: pd.DataFrame, jobs: Mapping[str, Job], rows: Sequence[str], cols: Sequence[str],
                      wide: pd.DataFrame) -> list[str]:
    """Why a ``metric/*`` cell that has a mean has no interval, naming its runs' files."""
    if "lo" not in set(wide.columns.get_level_values(0)):
        return []
    out = []
    for key, sub in d.groupby(list(rows) + list(cols), observed=True, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        metric = str(sub["metric"].iloc[0])
        if not metric.startswith("metric/"):
            continue
        idx, c = key[:len(rows)], key[len(rows):]
        idx = idx if len(idx) > 1 else idx[0]
        c = c if len(c) > 1 else c[0]
        try:
            lo = wide["lo"].loc[idx, c]
        except KeyError:
            continue
        if not pd.isna(lo):
            continue
        m = metric.removeprefix("metric/")
        why = []
        for name in dict.fromkeys(sub["job"]):
            j = jobs.get(name)
            if j is None or j.rows is None:
                why.append(f"{name}: no predictions.jsonl")
            elif m not in j.rows.values:
                why.append(f"{name}: no per-question {m} in predictions.jsonl")
            elif not np.isfinite(j.rows.values[m]).any():
                why.append(f"{name}: no finite per-question {m}")
        if why:
            out.append(f"No interval: {_label(rows, idx)} / {_header(c, cols)} ({'; '.join(why)})")
    return out
