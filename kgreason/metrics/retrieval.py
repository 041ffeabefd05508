"""Retrieval-side per-example scalars read from ``Prediction.extra``.

* answer coverage (retrieval rate): a gold answer is among ``extra["retrieved"]`` (names).
* answer coverage over the N kept paths (ReKnoS): the same over ``extra["retrieved_n_paths"]``.
* search space: ``extra["search_space"]`` (number of candidate entities/triples the reasoner
  looked at; lower is better).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from kgreason.metrics.qa import coverage


def answer_coverage(extra: Mapping[str, Any], golds: Sequence[str], key: str = "retrieved") -> float | None:
    """1/0: a gold answer is among ``extra[key]``; None when the reasoner does not report ``key``."""
    if key not in extra:
        return None
    return coverage(extra[key], golds)


def search_space(extra: Mapping[str, Any]) -> float | None:
    v = extra.get("search_space")
    return None if v is None else float(v)
