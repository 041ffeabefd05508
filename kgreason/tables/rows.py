"""A run's ``predictions.jsonl`` read once, line by line, into numbers.

:func:`read_rows` keeps, per question (the last row per id wins, as every reader of the file does,
kgreason/runs.py ``last_rows``), only its id and one float per metric (NaN where the metric does not
apply, ``None``), and counts what it could not use: torn or unreadable lines (numbered), rows without
an id, non-finite or non-numeric metric values (numbered), errored examples. Nothing else of a row
(prediction, trace, answers) is kept, so a run of 10^6 questions costs its ids plus 8 bytes per
metric and question, not its rows.
"""

from __future__ import annotations

import json
import math
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

#: how many line numbers a message names (the count is always exact)
SHOWN_LINES = 10


@dataclass
class RunRows:
    """Per-question values of one run (see the module doc)."""
    path: Path
    ids: np.ndarray                                  # str ids, in the order they first appear
    values: dict[str, np.ndarray]                    # metric -> float64 per id (NaN: not scored)
    errors: int = 0                                  # ids whose last row has an error
    error_example: str | None = None
    torn: int = 0                                    # lines that are not a JSON object with an id
    torn_lines: list[int] = field(default_factory=list)
    bad_values: dict[str, list[int]] = field(default_factory=dict)   # metric -> [count, line, line, ...]
    gold_hops: list | None = None                    # per id, only when asked (collect_examples)

    def messages(self, name: str) -> list[str]:
        """One line per problem, naming the file (``name``) and its line numbers."""
        out = []
        if self.torn:
            out.append(f"{name}: {self.torn} unreadable line(s) ({_lines(self.torn_lines, self.torn)}) not "
                       "counted: torn, not JSON, or without an id; their questions have no value from them")
        for m, (count, *lines) in sorted(self.bad_values.items()):
            out.append(f"{name}: {count} non-finite value(s) of {m} ({_lines(lines, count)}) left out of "
                       "that metric's per-question values and interval")
        return out


def _lines(lines: list[int], count: int) -> str:
    s = ("line " if len(lines) == 1 else "lines ") + ", ".join(map(str, lines))
    return s + (f", … {count - len(lines)} more" if count > len(lines) else "")


def _number(v: Any) -> float | None:
    """A metric value as a float; None where it is not a finite number (``None`` itself is NaN)."""
    if v is None:
        return math.nan
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        f = float(v)
        return f if math.isfinite(f) else None
    return None


def read_rows(pred: str | Path, keep_hops: bool = False) -> RunRows:
    """Read ``pred`` once (streamed, one line at a time); see :class:`RunRows`."""
    pred = Path(pred)
    pos: dict[str, int] = {}
    ids: list[str] = []
    cols: dict[str, array] = {}
    err = bytearray()
    hops: list | None = [] if keep_hops else None
    r = RunRows(pred, np.empty(0, dtype=object), {})
    with open(pred, "rb") as f:
        for no, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                row = None
            if not isinstance(row, dict) or row.get("id") is None:
                r.torn += 1
                if len(r.torn_lines) < SHOWN_LINES:
                    r.torn_lines.append(no)
                continue
            qid = str(row["id"])
            i = pos.get(qid)
            if i is None:
                i = pos[qid] = len(ids)
                ids.append(qid)
                err.append(0)
                for a in cols.values():
                    a.append(math.nan)
                if hops is not None:
                    hops.append(None)
            e = row.get("error")
            err[i] = 1 if e else 0
            if e and r.error_example is None:
                r.error_example = str(e)[:200]
            if hops is not None:
                hops[i] = row.get("hops")
            for a in cols.values():  # the last row wins whole: a metric it lacks is not kept from before
                a[i] = math.nan
            metrics = row.get("metrics")
            for m, v in (metrics.items() if isinstance(metrics, dict) else ()):
                a = cols.get(m)
                if a is None:
                    a = cols[m] = array("d", [math.nan]) * len(ids)
                x = _number(v)
                if x is None:
                    bad = r.bad_values.setdefault(m, [0])
                    bad[0] += 1
                    if len(bad) <= SHOWN_LINES:
                        bad.append(no)
                    x = math.nan
                a[i] = x
    r.ids = np.array(ids, dtype=object)
    r.values = {m: np.frombuffer(a, dtype=np.float64).copy() for m, a in cols.items()}
    r.errors = int(sum(err))
    r.gold_hops = hops
    return r
