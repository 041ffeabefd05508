"""The KGQA community's own evaluators, re-implemented from their published rules.

Two evaluation scripts are behind most KGQA numbers in the SGR / ReKnoS / ToG tables:

* **RoG** (Luo et al., ICLR 2024), ``src/qa_prediction/evaluate_results.py`` in
  ``RManLuo/reasoning-on-graphs``: Hit, Accuracy, F1, Precision, Recall over a list of predicted
  answers, matching by *substring* of normalised text. → :func:`rog_scores`.
* **ToG** (Sun et al., ICLR 2024), ``eval/utils.py`` ``exact_match`` in ``IDEA-FinAI/ToG``: one
  answer string against the gold aliases, spaces removed, lower case, equal or either a substring
  of the other. → :func:`tog_exact_match`. Its substring clause removed (the top answer *equal*
  to a gold alias after the same normalisation) is :func:`tog_exact_top1`, SGR's "Acc" column.

Both functions here were written from a reading of those scripts; the tests pin them with golden
tables (``tests/metrics/test_community.py``), each case worked out by hand from the published rule.
The quirks we keep on purpose (so a number here equals the script's number) and the one place we
differ (ToG's empty answer) are listed in docs/metrics.md.
"""

from __future__ import annotations

import re
import string
from typing import NamedTuple, Sequence

_PUNCT = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def rog_normalize(s: str) -> str:
    """RoG's ``normalize``: lower case, drop ASCII punctuation, replace the words a/an/the by a
    space, collapse whitespace. (The script also strips ``<pad>`` tokens, but by then ``<`` and
    ``>`` are already gone as punctuation, so that step never changes anything.)"""
    s = "".join(ch for ch in s.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", s).split())


def _rog_matches(text: str, gold: str) -> bool:
    # the gold answer, normalised, is a substring of the normalised prediction text
    return rog_normalize(gold) in rog_normalize(text)


def rog_prediction_list(ranked: Sequence[str]) -> list[str]:
    """RoG's ``extract_topk_prediction`` with ``k=-1``: distinct predictions, most frequent
    first (ties keep first-seen order). A run's ranked list has no repeats after this step."""
    counts: dict[str, int] = {}
    for p in ranked:
        counts[p] = counts.get(p, 0) + 1
    return [p for p, _ in sorted(counts.items(), key=lambda kv: kv[1], reverse=True)]


class RoGScores(NamedTuple):
    hit: float
    acc: float
    f1: float
    precision: float
    recall: float


def rog_scores(ranked: Sequence[str], golds: Sequence[str]) -> RoGScores | None:
    """RoG ``evaluate_results.py`` (``--cal_f1``, ``top_k=-1``) on one example.

    Rule: de-duplicate the predictions (:func:`rog_prediction_list`) and join them with spaces;
    a gold answer is *matched* when its normalised form is a substring of the normalised joined
    text. ``hit`` = 1 if any gold is matched; ``acc`` = matched / #golds; ``precision`` =
    matched / #distinct predictions (can exceed 1 when one prediction covers several golds);
    ``recall`` = ``acc``; ``f1`` = 2PR/(P+R). With no prediction, f1/precision/recall are 0
    while hit/acc still test the empty string (only an empty gold matches it).

    ``golds`` is RoG's ``ground_truth``: one string per distinct answer. With no gold answer the
    script divides by zero; we return ``None`` (not applicable, left out of the mean).
    """
    if not golds:
        return None
    preds = rog_prediction_list(ranked)
    joined = " ".join(preds)
    matched = sum(1 for g in golds if _rog_matches(joined, g))
    acc = matched / len(golds)
    hit = float(matched > 0)
    if not preds:
        return RoGScores(hit, acc, 0.0, 0.0, 0.0)
    precision, recall = matched / len(preds), matched / len(golds)
    f1 = 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)
    return RoGScores(hit, acc, f1, precision, recall)


def rog_golds(answers: Sequence[str], groups: Sequence[Sequence[str]]) -> list[str]:
    """RoG's ground truth for one of our examples: one name per distinct gold answer (the first
    alias of each answer group); without groups, every entry of ``answers``."""
    if groups:
        return [g[0] for g in groups if g]
    return list(answers)


def tog_exact_match(response: str, golds: Sequence[str]) -> float:
    """ToG ``eval/utils.py`` ``exact_match`` on one answer string.

    Rule: ``strip()``, remove every space character ``" "`` (tabs and newlines inside stay),
    lower case, on both sides; a hit when the two are equal or either is a substring of the
    other. Golds are all names and aliases of all answers (ToG's ``align`` flattens them).

    One deliberate difference: an empty response scores 0 here. In ToG's function the empty
    string is a substring of every answer, so an empty (or all-space) response is a hit.
    """
    r = response.strip().replace(" ", "").lower()
    if not r:
        return 0.0
    for g in golds:
        a = g.strip().replace(" ", "").lower()
        if r == a or r in a or a in r:
            return 1.0
    return 0.0


def _tog_norm(s: str) -> str:
    return s.strip().replace(" ", "").lower()


def tog_exact_top1(response: str, golds: Sequence[str]) -> float:
    """ToG's normalisation (``strip()``, every ``" "`` removed, lower case) with **equality
    only**: 1 when the top answer equals a gold name or alias, 0 otherwise (and 0 for an empty
    answer). ToG's :func:`tog_exact_match` without its "either is a substring of the other"
    clause, so ``tog_exact_top1 <= tog_exact_match`` on every answer and every gold list: the
    reading of SGR's "Acc" beside ToG's Hits@1 (docs/metrics.md, "Paper tables"). It reads one
    string, the top answer, so the length of the ranked list cannot raise it."""
    r = _tog_norm(response)
    return float(bool(r) and any(r == _tog_norm(g) for g in golds))
