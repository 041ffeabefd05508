"""Hits@1 / all_answers_found / answer-set F1, diagnosis P/R/F1 (LogosKG A.2), coverage, search space."""

from __future__ import annotations

import pytest

from kgreason.metrics import METRICS, higher_is_better
from kgreason.types import Example, Prediction


def P(*answers, **extra):
    return Prediction(example_id="x", answers=tuple(answers), extra=extra)


EX = Example(id="x", question="q", answers=("Paris", "City of Light", "Lyon"),
             answer_groups=(("Paris", "City of Light"), ("Lyon",)))


def test_hits_at_1_top_answer_any_alias():
    m = METRICS["hits_at_1"].per_example
    assert m(P("the city of light", "x"), EX) == 1.0
    assert m(P("x", "Paris"), EX) == 0.0
    assert m(P(), EX) == 0.0


def test_all_answers_found_needs_every_group_anywhere_in_the_list():
    m = METRICS["all_answers_found"].per_example
    assert m(P("Paris", "lyon"), EX) == 1.0
    assert m(P("City of Light", "Lyon", "junk"), EX) == 1.0
    assert m(P("junk", "junk2", "Lyon", "Paris"), EX) == 1.0  # depth does not matter: not Hits@1
    assert m(P("Paris"), EX) == 0.0
    assert "accuracy" not in METRICS  # the old name said something this metric does not measure


@pytest.mark.parametrize("pred, expected", [
    # (precision, recall, f1); two gold answers: {Paris | City of Light}, {Lyon}
    (("Paris", "Lyon"), (1.0, 1.0, 1.0)),
    (("Paris", "City of Light"), (1.0, 0.5, 2 / 3)),      # two aliases of one answer: both correct, one found
    (("Paris", "paris.", "Marseille"), (0.5, 0.5, 0.5)),  # duplicates collapse: {paris, marseille}
    (("Parisian",), (0.0, 0.0, 0.0)),                     # strict: no substring credit
    ((), (0.0, 0.0, 0.0)),
])
def test_answer_set_prf_hand_computed(pred, expected):
    got = tuple(METRICS[n].per_example(P(*pred), EX)
                for n in ("answer_set_precision", "answer_set_recall", "answer_set_f1"))
    assert got == pytest.approx(expected)
    assert METRICS["answer_set_f1"].per_example(P("x"), Example(id="y", question="q")) is None


def test_dx_prf_hand_computed():
    ex = Example(id="x", question="note", diagnoses=("Pneumonia", "Asthma", "GERD"))
    p = P("pneumonia.", "ASTHMA", "flu", "Flu")  # set: {pneumonia, asthma, flu}
    prec, rec, f1 = (METRICS[n].per_example(p, ex) for n in ("dx_precision", "dx_recall", "dx_f1"))
    assert prec == pytest.approx(2 / 3) and rec == pytest.approx(2 / 3) and f1 == pytest.approx(2 / 3)
    p2 = P("Pneumonia")
    assert METRICS["dx_precision"].per_example(p2, ex) == 1.0
    assert METRICS["dx_recall"].per_example(p2, ex) == pytest.approx(1 / 3)
    assert METRICS["dx_f1"].per_example(p2, ex) == pytest.approx(2 * 1 * (1 / 3) / (1 + 1 / 3))
    assert METRICS["dx_f1"].per_example(P(), ex) == 0.0
    assert METRICS["dx_f1"].per_example(P("a"), Example(id="y", question="q")) is None


def test_coverage_and_search_space():
    assert METRICS["answer_coverage"].per_example(P("x", retrieved=["lyon", "b"]), EX) == 1.0
    assert METRICS["answer_coverage"].per_example(P("x", retrieved=["b"]), EX) == 0.0
    assert METRICS["answer_coverage"].per_example(P("x"), EX) is None
    assert METRICS["search_space"].per_example(P("x", search_space=12), EX) == 12.0
    assert METRICS["search_space"].per_example(P("x"), EX) is None
    assert not higher_is_better("metric/search_space") and higher_is_better("metric/f1")
    assert not higher_is_better("llm/calls")


def test_tog_loose_match():
    m = METRICS["tog_hits_at_1"].per_example
    assert m(P("The answer is Paris, France"), EX) == 1.0  # gold is a substring of the response
    assert m(P("Par"), EX) == 1.0  # response is a substring of a gold (ToG's rule)
    assert m(P("citYof light"), EX) == 1.0  # spaces dropped, case folded
    assert m(P("Berlin"), EX) == 0.0 and m(P(""), EX) == 0.0
    assert METRICS["hits_at_1"].per_example(P("The answer is Paris, France"), EX) == 0.0


def test_direction_of_judge_costs_and_community_metrics():
    assert higher_is_better("metric/rog_acc") and higher_is_better("metric/tog_hits_at_1")
    assert higher_is_better("judge/pdsqi_average") and higher_is_better("judge/round1/accurate")
    for name in ("judge/calls", "judge/cost_usd", "judge/stigmatizing", "judge/round2/stigmatizing_record",
                 "llm/judge/calls", "llm/score/calls"):
        assert not higher_is_better(name), name
