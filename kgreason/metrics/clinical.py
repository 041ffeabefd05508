"""Entity-level diagnosis metrics (LogosKG Appendix A.2, Eq. 11).

``Precision = |pred ∩ gold| / |pred|``, ``Recall = |pred ∩ gold| / |gold|`` over *sets* of
diagnosis strings, matched after :func:`kgreason.metrics.qa.normalize_answer` (so case,
punctuation, articles and whitespace do not matter). F1 is their harmonic mean.

Conventions for the undefined cases (the paper does not state them): an empty prediction set
has precision 0; an empty gold set makes the example "not applicable" (``None``).
"""

from __future__ import annotations

from typing import Iterable

from kgreason.metrics.qa import normalize_answer


def _norm_set(xs: Iterable[str]) -> set[str]:
    return {n for n in (normalize_answer(x) for x in xs) if n}


def dx_prf(predicted: Iterable[str], gold: Iterable[str]) -> tuple[float, float, float] | None:
    """``(precision, recall, f1)`` of predicted vs gold diagnoses, or None with no gold."""
    p, g = _norm_set(predicted), _norm_set(gold)
    if not g:
        return None
    hit = len(p & g)
    prec = hit / len(p) if p else 0.0
    rec = hit / len(g)
    f = 2 * prec * rec / (prec + rec) if prec + rec > 0 else 0.0
    return prec, rec, f
