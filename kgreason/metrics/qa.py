"""Answer-string metrics with the official SQuAD / HotpotQA normalisation.

``normalize_answer`` is the SQuAD v1.1 evaluation script's: lower-case, drop punctuation, drop
the articles a/an/the, collapse whitespace.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Iterable, Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCT = set(string.punctuation)


def normalize_answer(s: str) -> str:
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1(prediction: str, gold: str) -> float:
    p = normalize_answer(prediction).split()
    g = normalize_answer(gold).split()
    common = Counter(p) & Counter(g)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def exact_match_multi(prediction: str, golds: Sequence[str]) -> float:
    return max((exact_match(prediction, g) for g in golds), default=0.0)


def f1_multi(prediction: str, golds: Sequence[str]) -> float:
    return max((f1(prediction, g) for g in golds), default=0.0)


def hits_at_1(ranked: Sequence[str], golds: Iterable[str]) -> float:
    """1 if the top-ranked prediction matches any gold alias after normalisation."""
    if not ranked:
        return 0.0
    top = normalize_answer(ranked[0])
    return float(any(top == normalize_answer(g) for g in golds))


def accuracy(predicted: Sequence[str], groups: Sequence[Sequence[str]]) -> float:
    """1 if every gold answer (each a group of aliases) is among the predictions."""
    preds = {normalize_answer(p) for p in predicted}
    return float(all(any(normalize_answer(a) in preds for a in grp) for grp in groups)) if groups else 0.0


def coverage(retrieved: Iterable[str], golds: Iterable[str]) -> float:
    """1 if any gold answer is among the retrieved entity names (retrieval rate)."""
    r = {normalize_answer(x) for x in retrieved}
    return float(any(normalize_answer(g) in r for g in golds))
