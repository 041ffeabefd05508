"""Answer-string metrics that reproduce the official evaluation scripts exactly.

* :func:`normalize_answer` – SQuAD v1.1 ``evaluate-v1.1.py`` (HotpotQA,
  2WikiMultihopQA and MuSiQue): lower-case, drop ASCII punctuation (``string.punctuation``),
  drop the articles a/an/the, collapse whitespace. Non-ASCII characters (é, ß, full-width
  letters/punctuation) are kept as they are, exactly as in the official scripts.
* :func:`exact_match`, :func:`f1` – HotpotQA ``hotpot_evaluate_v1.py``; ``f1`` includes its
  special case: when either side normalises to ``yes``/``no``/``noanswer`` and the two differ,
  F1 is 0. (2WikiMultihopQA's ``evaluate_v1.1`` uses the same two functions.)
* :func:`musique_exact`, :func:`musique_f1` – MuSiQue ``metrics/answer.py`` (SQuAD 2.0 style:
  an empty prediction and an empty gold agree with F1 = 1).
* ``*_multi`` – max over the gold answer and its aliases (``metric_max_over_ground_truths``
  / 2Wiki ``update_answer``); an empty gold list scores 0.

The tests pin every function with golden tables worked out from the published rules
(``tests/metrics/test_official.py``), each case citing the script it follows.

KGQA metrics (ranked answer lists): :func:`hits_at_1` (strict, top answer),
:func:`all_answers_found` (every gold anywhere in the list) and :func:`answer_set_prf` (the
answer-set precision / recall / F1 that KGQA papers report). The community evaluators with their
substring matching (RoG, ToG) live in :mod:`kgreason.metrics.community`.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from functools import lru_cache
from typing import Iterable, Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_YES_NO = ("yes", "no", "noanswer")
_NO_PUNCT = str.maketrans("", "", string.punctuation)


@lru_cache(maxsize=1 << 17)
def normalize_answer(s: str) -> str:
    """SQuAD v1.1 normalisation (lower → strip punctuation → strip articles → whitespace).

    Remembered per string: a run's retrieval figures normalise every retrieved name of every
    question (1.2M calls over SGR's 100 MetaQA questions), mostly the same names again."""
    s = s.lower().translate(_NO_PUNCT)  # string.punctuation is ASCII: the same as dropping each such character
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def _prf(p: list[str], g: list[str]) -> tuple[float, float, float]:
    same = sum((Counter(p) & Counter(g)).values())
    if same == 0:
        return 0.0, 0.0, 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall), precision, recall


def exact_match(prediction: str, gold: str) -> float:
    """SQuAD / HotpotQA ``exact_match_score``."""
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1_prf(prediction: str, gold: str) -> tuple[float, float, float]:
    """HotpotQA ``f1_score``: ``(f1, precision, recall)`` with the yes/no/noanswer rule."""
    np_, ng = normalize_answer(prediction), normalize_answer(gold)
    if np_ in _YES_NO and np_ != ng:
        return 0.0, 0.0, 0.0
    if ng in _YES_NO and np_ != ng:
        return 0.0, 0.0, 0.0
    return _prf(np_.split(), ng.split())


def f1(prediction: str, gold: str) -> float:
    """HotpotQA token F1 (see :func:`f1_prf`)."""
    return f1_prf(prediction, gold)[0]


def squad_f1(prediction: str, gold: str) -> float:
    """SQuAD v1.1 ``f1_score`` (no yes/no rule)."""
    return _prf(normalize_answer(prediction).split(), normalize_answer(gold).split())[0]


def exact_match_multi(prediction: str, golds: Sequence[str]) -> float:
    return max((exact_match(prediction, g) for g in golds), default=0.0)


def f1_multi(prediction: str, golds: Sequence[str]) -> float:
    return max((f1(prediction, g) for g in golds), default=0.0)


# ----------------------------------------------------------------------------- MuSiQue
def _musique_tokens(s: str) -> list[str]:
    return normalize_answer(s).split() if s else []


def musique_exact(prediction: str, gold: str) -> float:
    """MuSiQue ``compute_exact``."""
    return float(normalize_answer(gold) == normalize_answer(prediction))


def musique_f1(prediction: str, gold: str) -> float:
    """MuSiQue ``compute_f1``: empty-vs-empty is 1, empty-vs-nonempty 0."""
    g, p = _musique_tokens(gold), _musique_tokens(prediction)
    if not g or not p:
        return float(g == p)
    return _prf(p, g)[0]


def musique_exact_multi(prediction: str, golds: Sequence[str]) -> float:
    return max((musique_exact(prediction, g) for g in golds), default=0.0)


def musique_f1_multi(prediction: str, golds: Sequence[str]) -> float:
    return max((musique_f1(prediction, g) for g in golds), default=0.0)


# ----------------------------------------------------------------------------- KGQA
def hits_at_1(ranked: Sequence[str], golds: Iterable[str]) -> float:
    """1 if the top-ranked prediction matches any gold alias after normalisation."""
    if not ranked:
        return 0.0
    top = normalize_answer(ranked[0])
    return float(any(top == normalize_answer(g) for g in golds))


def all_answers_found(predicted: Sequence[str], groups: Sequence[Sequence[str]]) -> float:
    """1 if every gold answer (each a group of aliases) equals, after normalisation, some entry
    *anywhere* in the ranked list. A recall-at-any-depth test, not an accuracy of the top answer
    (formerly named ``accuracy``)."""
    preds = {normalize_answer(p) for p in predicted}
    return float(all(any(normalize_answer(a) in preds for a in grp) for grp in groups)) if groups else 0.0


def answer_set_prf(predicted: Sequence[str], groups: Sequence[Sequence[str]]) -> tuple[float, float, float] | None:
    """Answer-set ``(precision, recall, f1)`` as KGQA papers report F1 (GraftNet, NSM, RoG's
    baselines): the predicted set is the distinct normalised predictions; a prediction is correct
    when it equals (normalised) an alias of some gold answer; a gold answer is found when some
    prediction equals one of its aliases. P = correct predictions / predictions, R = found golds /
    golds, F1 = 2PR/(P+R). An empty prediction scores 0; no gold answer → ``None``."""
    gold_sets = [{normalize_answer(a) for a in grp} for grp in groups if grp]
    if not gold_sets:
        return None
    preds = list(dict.fromkeys(normalize_answer(p) for p in predicted))
    if not preds:
        return 0.0, 0.0, 0.0
    correct = sum(1 for p in preds if any(p in g for g in gold_sets))
    found = sum(1 for g in gold_sets if any(p in g for p in preds))
    precision, recall = correct / len(preds), found / len(gold_sets)
    f1 = 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)
    return precision, recall, f1


def coverage(retrieved: Iterable[str], golds: Iterable[str]) -> float:
    """1 if any gold answer is among the retrieved entity names (retrieval rate)."""
    r = {normalize_answer(x) for x in retrieved}
    return float(any(normalize_answer(g) in r for g in golds))
