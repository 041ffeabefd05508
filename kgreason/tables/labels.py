"""How a table names its rows and columns in headers and messages.

A metric column is headed by its readable label (:data:`LABELS`: ``metric/hits_at_1`` → ``Hits@1``),
the key itself where none is known; ``kgreason tables --label hits_at_1=H@1`` (or a ``labels``
mapping given to :func:`~kgreason.tables.build_tables`) overrides one.
"""

from __future__ import annotations

import re
from typing import Mapping, Sequence

#: metrics.json key → the header a paper table gives it (docs/metrics.md, "Paper tables")
LABELS: dict[str, str] = {
    "metric/hits_at_1": "Hits@1",
    "metric/all_answers_found": "All answers",
    "metric/answer_set_precision": "Answer P",
    "metric/answer_set_recall": "Answer R",
    "metric/answer_set_f1": "Answer F1",
    "metric/tog_hits_at_1": "Hits@1 (ToG)",
    "metric/tog_exact_top1": "Exact top-1 (ToG)",
    "metric/rog_hit": "Hit (RoG)",
    "metric/rog_acc": "Acc (RoG)",
    "metric/rog_f1": "F1 (RoG)",
    "metric/rog_precision": "P (RoG)",
    "metric/rog_recall": "R (RoG)",
    "metric/em": "EM",
    "metric/f1": "F1",
    "metric/musique_em": "EM (MuSiQue)",
    "metric/musique_f1": "F1 (MuSiQue)",
    "metric/twowiki_em": "EM (2Wiki)",
    "metric/twowiki_f1": "F1 (2Wiki)",
    "metric/dx_precision": "Dx P",
    "metric/dx_recall": "Dx R",
    "metric/dx_f1": "Dx F1",
    "metric/answer_coverage": "Coverage",
    "metric/answer_coverage_n_paths": "Coverage (n paths)",
    "metric/search_space": "Search space",
    "metric/triples_written": "Triples written",
    "metric/triples_written_total": "Triples written (total)",
    "retrieval/retrieved_size": "Retrieved",
    "retrieval/retrieved_size_n_paths": "Retrieved (n paths)",
    "judge/pdsqi_average": "PDSQI",
    "llm/calls": "LLM calls",
    "llm/cache_hits": "Cache hits",
    "llm/calls_per_question": "Calls / q",
    "llm/prompt_tokens": "Prompt tokens",
    "llm/completion_tokens": "Completion tokens",
    "llm/tokens_per_question": "Tokens / q",
    "llm/cost_usd": "Cost (USD)",
    "run/wall_s": "Wall time (s)",
    "run/n_examples": "N",
    "run/errors": "Errors",
    "run/error_rate": "Error rate",
}

_ROUND = re.compile(r"^metric/dx_(baseline|round1|round2)_(precision|recall|f1)$")
_STAT = {"precision": "P", "recall": "R", "f1": "F1"}
_ROUND_NAME = {"baseline": "baseline", "round1": "round 1", "round2": "round 2"}


def metric_label(key: str, labels: Mapping[str, str] | None = None) -> str:
    """The header of metric ``key`` (``metric/hits_at_1`` or ``hits_at_1``): ``labels`` first
    (keyed with or without the ``metric/`` prefix), then :data:`LABELS`, else the key without
    its ``metric/`` prefix."""
    key = str(key)
    full = key if "/" in key else f"metric/{key}"
    short = full.removeprefix("metric/")
    for table in (labels or {}, LABELS):
        for k in (full, short):
            if k in table:
                return str(table[k])
    m = _ROUND.match(full)
    if m:
        return f"Dx {_STAT[m.group(2)]} ({_ROUND_NAME[m.group(1)]})"
    return short


def parse_labels(items: Sequence[str] | None) -> dict[str, str]:
    """``["hits_at_1=H@1", "f1=Token F1"]`` (or one comma-separated string each) → a mapping;
    ``ValueError`` naming an item without ``=``."""
    out: dict[str, str] = {}
    for item in items or ():
        for part in str(item).split(","):
            part = part.strip()
            if not part:
                continue
            if "=" not in part or not part.split("=", 1)[0].strip() or not part.split("=", 1)[1].strip():
                raise ValueError(f"--label {part!r}: expected METRIC=LABEL, e.g. hits_at_1=H@1")
            k, v = part.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def _header(col, cols, labels: Mapping[str, str] | None = None, skip: Sequence[int] = (),
            readable: bool | None = None) -> str:
    """``cwq / Hits@1``: a column by its parts, the metric by its label (``readable``, the default
    when ``labels`` is given; else by its key, as the CSV files and messages name it: ``cwq /
    hits_at_1``); the parts at positions ``skip`` (a column axis with one value in the whole
    table, said in the caption) left out."""
    readable = labels is not None if readable is None else readable
    parts = col if isinstance(col, tuple) else (col,)
    names = list(cols) if cols else []
    out = []
    for i, p in enumerate(parts):
        if i in skip or str(p) == "":
            continue
        is_metric = (names[i] == "metric") if i < len(names) else "/" in str(p)
        if is_metric:
            out.append(metric_label(str(p), labels) if readable else str(p).removeprefix("metric/"))
        else:
            out.append(str(p))
    return " / ".join(out)


def _label(rows: Sequence[str], key) -> str:
    """``reasoner=io, ablation=none``: a row by its axes (empty values left out)."""
    key = key if isinstance(key, tuple) else (key,)
    return ", ".join(f"{r}={k}" for r, k in zip(rows, key) if str(k) != "") or "all"
