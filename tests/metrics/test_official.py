"""Golden tables for the answer-string metrics of the official multi-hop QA scripts.

Every expected value was worked out by hand from the published rule (no third-party code runs
here). Sources, read for their rules:

* SQuAD v1.1 ``evaluate-v1.1.py`` (Rajpurkar et al., 2016): ``normalize_answer`` = lower case →
  delete ``string.punctuation`` → replace the words a/an/the by a space → single spaces;
  ``exact_match_score``; ``f1_score`` = token-multiset F1 (0 when no token is shared).
* HotpotQA ``hotpot_evaluate_v1.py`` (Yang et al., 2018): the same EM; ``f1_score`` adds a rule:
  when either side normalises to ``yes``/``no``/``noanswer`` and the two differ, F1 = 0.
* 2WikiMultihopQA ``2wikimultihop_evaluate_v1.1.py`` ``update_answer``: HotpotQA's EM/F1, max
  over the answer and its aliases.
* MuSiQue ``metrics/answer.py`` (Trivedi et al., 2022): SQuAD 2.0-style ``compute_f1`` — when
  either side has no token, F1 = 1 if both are empty else 0; no yes/no rule; max over aliases.
"""

from __future__ import annotations

import pytest

from kgreason.metrics import METRICS, qa
from kgreason.types import Example, Prediction

# input, normalize_answer(input), why
NORMALIZE = [
    ("The Eiffel Tower", "eiffel tower", "article and case"),
    ("Eiffel  Tower.", "eiffel tower", "punctuation deleted, spaces collapsed"),
    ("an apple a day", "apple day", "all three articles"),
    ("theatre", "theatre", "'the' inside a word is kept (word boundary)"),
    ("the the the", "", "only articles: empty"),
    ("U.S.A.", "usa", "dots deleted, not replaced by spaces"),
    ("rock'n'roll", "rocknroll", "apostrophes deleted"),
    ("1,000", "1000", "comma deleted"),
    ("New\tYork\nCity", "new york city", "any whitespace collapses"),
    ("Café de Flore", "café de flore", "accents are not folded"),
    ("tokyo，japan", "tokyo，japan", "full-width comma is not ASCII punctuation"),
    ("“smart quotes”", "“smart quotes”", "curly quotes are not ASCII punctuation"),
    ("ＴＨＥ　Ｔｏｋｙｏ", "ｔｈｅ ｔｏｋｙｏ", "full-width 'the' is not an article; U+3000 is whitespace"),
]

# prediction, gold, EM, HotpotQA F1, SQuAD F1, MuSiQue F1, why
PAIRS = [
    ("The Eiffel Tower", "eiffel tower", 1, 1, 1, 1, "equal after normalisation"),
    ("new york city", "New York", 0, 0.8, 0.8, 0.8, "P = 2/3, R = 1"),
    ("yes it is", "yes", 0, 0, 0.5, 0.5, "HotpotQA: gold is 'yes' and differs → 0; SQuAD/MuSiQue: P = 1/3, R = 1"),
    ("no", "No!", 1, 1, 1, 1, "both normalise to 'no': equal, so the yes/no rule does not fire"),
    ("noanswer", "no answer", 0, 0, 0, 0, "'noanswer' differs from 'no answer'; no shared token either"),
    ("obama obama", "Obama", 0, 2 / 3, 2 / 3, 2 / 3, "multiset overlap 1: P = 1/2, R = 1"),
    ("", "", 1, 0, 0, 1, "EM: '' == ''; token F1 of two empty lists is 0, MuSiQue says 1"),
    ("the the the", "the", 1, 0, 0, 1, "both normalise to '': as the empty pair"),
    ("Paris", "", 0, 0, 0, 0, "one side empty"),
    ("Café", "cafe", 0, 0, 0, 0, "accents are not folded"),
]

# prediction, golds (answer + aliases), em, f1 (HotpotQA/2Wiki), musique_f1, why
MULTI = [
    ("Tokyo", ["東京", "Tokyo, Japan"], 0, 2 / 3, 2 / 3, "best alias 'tokyo japan': P = 1, R = 1/2"),
    ("the Eiffel Tower", ["Tour Eiffel", "Eiffel Tower"], 1, 1, 1, "second alias equal"),
    ("yes", ["no", "No."], 0, 0, 0, "yes vs no: 0 everywhere"),
    ("x", [], 0, 0, 0, "no gold: 0"),
]


@pytest.mark.parametrize("text, expected, why", NORMALIZE)
def test_normalize_golden(text, expected, why):
    assert qa.normalize_answer(text) == expected, why


@pytest.mark.parametrize("pred, gold, em, hf1, sf1, mf1, why", PAIRS)
def test_pairs_golden(pred, gold, em, hf1, sf1, mf1, why):
    assert qa.exact_match(pred, gold) == em, why
    assert qa.musique_exact(pred, gold) == em, why
    assert qa.f1(pred, gold) == pytest.approx(hf1, abs=1e-12), why
    assert qa.squad_f1(pred, gold) == pytest.approx(sf1, abs=1e-12), why
    assert qa.musique_f1(pred, gold) == pytest.approx(mf1, abs=1e-12), why


@pytest.mark.parametrize("pred, golds, em, f1, mf1, why", MULTI)
def test_registered_metrics_multi_gold(pred, golds, em, f1, mf1, why):
    p, e = Prediction(example_id="x", answers=(pred,)), Example(id="x", question="q", answers=tuple(golds))
    for name, want in (("em", em), ("twowiki_em", em), ("musique_em", em), ("f1", f1), ("twowiki_f1", f1),
                       ("musique_f1", mf1)):
        assert METRICS[name].per_example(p, e) == pytest.approx(want, abs=1e-12), f"{name}: {why}"
