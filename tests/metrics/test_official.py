"""Our metrics equal frozen copies of the official evaluation scripts on a string battery."""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path

import pytest

from kgreason.metrics import METRICS, qa
from kgreason.types import Example, Prediction

ASSETS = Path(__file__).resolve().parents[1] / "assets"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ASSETS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


squad = _load("official_squad_v11")
hotpot = _load("official_hotpot_evaluate_v1")
musique = _load("official_musique_answer")
twowiki = _load("official_2wiki_evaluate")

STRINGS = [
    "", " ", "the", "The Eiffel Tower", "eiffel tower", "Eiffel  Tower.", "an apple a day",
    "A", "theatre", "Anne", "yes", "Yes.", "no", "No!", "noanswer", "no answer", "yes it is",
    "Café de Flore", "cafe de flore", "CAFÉ", "Straße", "STRASSE", "strasse", "ＴＨＥ　Ｔｏｋｙｏ",
    "Ｔｏｋｙｏ", "Tokyo", "東京", "tokyo，japan", "tokyo, japan", "New\tYork\nCity", "new york",
    "U.S.A.", "usa", "u s a", "1,000", "1000", "rock'n'roll", "rock n roll", "Barack Obama",
    "Obama", "obama obama", "the the the", "ß", "«quoted»", "“smart quotes”", "smart quotes",
    "l'été", "lete", "Ωmega", "ωmega", "İstanbul", "istanbul",
]
PAIRS = list(itertools.product(STRINGS, STRINGS))
GOLD_LISTS = [["Tokyo"], ["Tokyo", "東京", "Tokyo, Japan"], ["yes"], ["no", "No."], ["the Eiffel Tower", "Tour Eiffel"],
              ["Straße", "strasse"], [""], ["", "x"], ["Barack Obama", "Obama", "B. Obama"]]


def test_normalize_matches_all_official():
    for s in STRINGS:
        n = qa.normalize_answer(s)
        assert n == squad.normalize_answer(s) == hotpot.normalize_answer(s) == musique.normalize_answer(s) \
            == twowiki.normalize_answer(s), s


def test_pairwise_equal_to_official():
    for pred, gold in PAIRS:
        assert qa.exact_match(pred, gold) == float(hotpot.exact_match_score(pred, gold)) == float(squad.exact_match_score(pred, gold))
        assert qa.squad_f1(pred, gold) == pytest.approx(squad.f1_score(pred, gold), abs=0)
        assert qa.f1_prf(pred, gold) == pytest.approx(hotpot.f1_score(pred, gold), abs=0)
        assert qa.f1(pred, gold) == pytest.approx(twowiki.f1_score(pred, gold)[0], abs=0)
        assert qa.musique_exact(pred, gold) == musique.compute_exact(gold, pred)
        assert qa.musique_f1(pred, gold) == pytest.approx(musique.compute_f1(gold, pred), abs=0)


def test_yes_no_special_case_differs_from_squad():
    # "yes it is" vs "yes": SQuAD gives partial credit, HotpotQA gives 0
    assert squad.f1_score("yes it is", "yes") > 0
    assert qa.f1("yes it is", "yes") == 0.0 == hotpot.f1_score("yes it is", "yes")[0]
    # MuSiQue: empty vs empty agrees (1), SQuAD gives 0
    assert qa.musique_f1("", "") == 1.0 and squad.f1_score("", "") == 0


def _ex(golds):
    return Example(id="x", question="q", answers=tuple(golds))


@pytest.mark.parametrize("golds", GOLD_LISTS)
def test_registered_metrics_multi_gold(golds):
    for pred in STRINGS:
        p, e = Prediction(example_id="x", answers=(pred,)), _ex(golds)
        em, f1 = METRICS["em"].per_example(p, e), METRICS["f1"].per_example(p, e)
        assert em == max(float(hotpot.exact_match_score(pred, g)) for g in golds)
        assert f1 == max(hotpot.f1_score(pred, g)[0] for g in golds)
        mem, mf1 = musique.answer_metric(pred, golds)
        assert METRICS["musique_em"].per_example(p, e) == mem
        assert METRICS["musique_f1"].per_example(p, e) == pytest.approx(mf1, abs=0)
        m = {"em": 0.0, "f1": 0.0, "prec": 0.0, "recall": 0.0}
        twowiki.update_answer(m, pred, golds)
        assert METRICS["twowiki_em"].per_example(p, e) == m["em"]
        assert METRICS["twowiki_f1"].per_example(p, e) == pytest.approx(m["f1"], abs=0)


def test_values_in_unit_interval():
    for pred, gold in PAIRS[::7]:
        p, e = Prediction(example_id="x", answers=(pred,)), _ex([gold])
        for name in ("em", "f1", "musique_em", "musique_f1", "twowiki_em", "twowiki_f1", "hits_at_1", "accuracy"):
            assert 0.0 <= METRICS[name].per_example(p, e) <= 1.0
