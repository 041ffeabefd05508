"""The one diagnosis precision / recall / F1 (LogosKG Appendix A.2, Eq. 11-12).

Every diagnosis number of the project comes from :func:`dx_prf`: the final answers
(``dx_precision`` / ``dx_recall`` / ``dx_f1``) and each round a reasoner carries in
``Prediction.rounds`` (``dx_<round>_<precision|recall|f1>``, see :mod:`kgreason.metrics`).

A.2 defines an *entity-level* overlap of two sets::

    Precision = |pred ∩ gold| / |pred|        Recall = |pred ∩ gold| / |gold|

and says Round 1 and Round 2 use the same computation on their own prediction sets (Eq. 12).
The paper does not say when two diagnosis strings are the same entity; our rule
(:func:`normalise_diagnosis`) is:

1. lower-case;
2. delete ASCII punctuation (``Pneumonia.`` → ``pneumonia``, ``Guillain-Barré`` →
   ``guillainbarré``); non-ASCII characters stay as they are;
3. collapse whitespace;
4. drop ONE leading article ``a`` / ``an`` / ``the`` when a word follows (``the flu`` → ``flu``).

Both sides become sets of normalised strings (a string normalising to ``""`` is dropped, and
two spellings of one entity count once), and ``|pred ∩ gold|`` is the size of the set
intersection. Why this rule: A.2 counts *entities*, so spellings that differ only in case,
punctuation or a leading determiner must count as one; an article inside a name is part of it
(``Hepatitis A`` ≠ ``Hepatitis``, which the SQuAD normaliser of :mod:`kgreason.metrics.qa`, which
drops every ``a``, would merge). There is no synonym or KG-alias matching: the score depends
only on the two string lists, so the same predictions score the same under any KG and
``python -m kgreason.score`` reproduces it from ``predictions.jsonl``.

Conventions for the cases A.2 leaves undefined: an empty prediction set has P = R = F1 = 0; an
empty gold set makes the example not applicable (``None``, left out of the mean). F1 is the
harmonic mean 2PR / (P + R), 0 when P + R = 0.

Golden table: ``tests/metrics/test_dx_prf.py``.
"""

from __future__ import annotations

import re
import string
from typing import Iterable

_PUNCT = str.maketrans("", "", string.punctuation)
_LEADING_ARTICLE = re.compile(r"^(?:a|an|the)\s+(?=\S)")


def normalise_diagnosis(name: str) -> str:
    """The entity key of a diagnosis string (rule in the module docstring)."""
    s = " ".join(str(name).lower().translate(_PUNCT).split())
    return _LEADING_ARTICLE.sub("", s)


def _norm_set(xs: Iterable[str]) -> set[str]:
    return {n for n in (normalise_diagnosis(x) for x in xs) if n}


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


__all__ = ["dx_prf", "normalise_diagnosis"]
