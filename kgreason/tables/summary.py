"""What the end of a run prints, and what a report says of the call cache.

:func:`run_summary` is the short results table a finished run prints (``metrics.json`` stays as
it is): the dataset's metrics in its ``metrics:`` order (headline first) by their labels, rounded,
each with its percentile bootstrap interval over the run's questions (the same interval
``kgreason tables`` gives a one-run cell: :mod:`kgreason.stats`, B = 2,000, seed 0), then N,
errors, LLM calls and call-cache hits, what the cache answered (:func:`cache_note`), and the run
dir last::

                 value  95% CI over questions
    Hits@1       0.113  [0.080, 0.150]
    All answers  0.297  [0.247, 0.350]
    Answer F1    0.082  [0.066, 0.099]
    Coverage     0.907  [0.873, 0.940]
    N 300 · errors 0 · LLM calls 0 · cache hits 0
    run dir: outputs/runs/2026-11-27/03-57-58_embedded_retrieval_only

:func:`replayed_answers` counts, from ``predictions.jsonl``, the examples whose every LLM request
of the method was answered by the call cache (``llm_usage``: cache hits, no call sent): their
answers were replayed, not produced by the model in this run.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from kgreason import stats
from kgreason.paths import shown
from kgreason.tables.labels import metric_label
from kgreason.storage.callstore import LLM_STORE
from kgreason.tables.rows import read_rows

#: the call cache's folder in ``llm_cache.dir`` (one shard file per writing process; kgreason/storage/callstore.py)
CACHE_FILE = LLM_STORE


def _last_rows(pred: Path):
    """The last row per id of ``predictions.jsonl`` (torn lines skipped), in file order."""
    last: dict[str, dict[str, Any]] = {}
    with open(pred, "rb") as f:
        for raw in f:
            try:
                row = json.loads(raw)
            except ValueError:
                continue
            if isinstance(row, dict) and row.get("id") is not None:
                last[str(row["id"])] = row
    return last.values()


def replayed_answers(pred: str | Path) -> tuple[int, int]:
    """``(replayed, n)``: of the run's ``n`` examples, those whose method's LLM requests (every
    purpose but the judge) were all answered by the call cache: at least one cache hit, no call
    sent. An example that made no LLM request is not replayed."""
    pred = Path(pred)
    if not pred.is_file():
        return 0, 0
    replayed = n = 0
    for row in _last_rows(pred):
        n += 1
        usage = row.get("llm_usage")
        if not isinstance(usage, Mapping):
            usage = {"answer": row.get("usage") or {}}
        calls = hits = 0
        for purpose, u in usage.items():
            if purpose == "judge" or not isinstance(u, Mapping):
                continue
            calls += int(u.get("calls") or 0)
            hits += int(u.get("cache_hits") or 0)
        replayed += int(hits > 0 and calls == 0)
    return replayed, n


def cache_path(cache_cfg: Mapping[str, Any] | None) -> str:
    """The call cache's folder as configured (``llm_cache.dir``), ``~`` expanded."""
    d = (cache_cfg or {}).get("dir")
    return str(Path(os.path.expanduser(str(d))) / CACHE_FILE) if d else f"<llm_cache.dir>/{CACHE_FILE}"


def cache_note(hits: float, calls: float, cache_cfg: Mapping[str, Any] | None = None,
               replayed: tuple[int, int] | None = None) -> str:
    """One line on what the call cache answered, or "" when it answered nothing: how many
    requests (and answers, given ``replayed``) came from it, where it lives, how to turn it off."""
    hits, calls = int(hits or 0), int(calls or 0)
    if hits <= 0:
        return ""
    requests = f"{hits} of {hits + calls} LLM requests"
    if replayed is not None and replayed[1]:
        what = f"{replayed[0]} of {replayed[1]} answers replayed from the call cache ({requests})"
    else:
        what = f"{requests} answered from the call cache"
    return f"{what}, not by the model in this run: {cache_path(cache_cfg)}; llm_cache.mode=off runs without it"


def _interval(values: np.ndarray | None, B: int, level: float, seed: int) -> str:
    if values is None:
        return ""
    v = values[np.isfinite(values)]
    if not len(v):
        return ""
    ci = stats.bootstrap_ci(v, B, level, seed)
    return f"[{ci.lo:.3f}, {ci.hi:.3f}]"


def run_summary(out_dir: str | Path, metrics: Mapping[str, Any], dataset_metrics: Sequence[str],
                cache_cfg: Mapping[str, Any] | None = None, B: int = stats.DEFAULT_B,
                level: float = stats.DEFAULT_LEVEL, seed: int = stats.DEFAULT_SEED) -> str:
    """The lines a finished run prints (see the module doc); ``dataset_metrics``: the dataset's
    ``metrics:`` (``cfg.dataset.metrics``), in order."""
    out_dir = Path(out_dir)
    pred = out_dir / "predictions.jsonl"
    rows = None
    if pred.is_file():
        try:
            rows = read_rows(pred)
        except OSError:
            rows = None
    names = [str(m) for m in dataset_metrics] or [k.removeprefix("metric/") for k in metrics
                                                   if k.startswith("metric/")]
    table: list[tuple[str, str, str]] = []
    not_applicable = []
    for m in names:
        v = metrics.get(f"metric/{m}")
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            not_applicable.append(metric_label(m))
            continue
        per_q = rows.values.get(m) if rows is not None else None
        table.append((metric_label(m), f"{v:.3f}", _interval(per_q, B, level, seed)))
    if isinstance(metrics.get("judge/pdsqi_average"), (int, float)):
        table.append((metric_label("judge/pdsqi_average"), f"{metrics['judge/pdsqi_average']:.3f}", ""))
    lines = []
    if table:
        w = max(len(t[0]) for t in table)
        head = f"{'':{w}}  value  {level:.0%} CI over questions" if any(t[2] for t in table) else ""
        if head:
            lines.append(head.rstrip())
        lines += [f"{name:{w}}  {val:>5}  {ci}".rstrip() for name, val, ci in table]
    if not_applicable:
        lines.append(f"not applicable to any example: {', '.join(not_applicable)} (metrics.json metric_notes/*)")
    n = int(metrics.get("run/n_examples") or 0)
    calls, hits = metrics.get("llm/calls") or 0, metrics.get("llm/cache_hits") or 0
    lines.append(f"N {n} · errors {int(metrics.get('run/errors') or 0)} · LLM calls {int(calls)} · "
                 f"cache hits {int(hits)}")
    note = cache_note(hits, calls, cache_cfg, replayed_answers(pred) if hits else None)
    if note:
        lines.append(note)
    lines.append(f"run dir: {shown(out_dir)}")  # relative under the working dir, as the README shows it
    return "\n".join(lines) + "\n"
