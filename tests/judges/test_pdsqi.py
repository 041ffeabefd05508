"""PDSQI-9 judge: strict parsing, re-ask recovery, sampling std, per-round scores and their
aggregation in run.summarise, position-swapped comparison."""

from __future__ import annotations

import json
import statistics

import pytest

from kgreason.judges import PDSQI_ATTRIBUTES, JudgeScore, PDSQIJudge
from kgreason.judges.pdsqi import PDSQI_SCALES, TABLE5_DIMENSIONS, parse_pdsqi
from kgreason.llm.scripted import ScriptedLLM
from kgreason.types import Example, Prediction, to_jsonable

EX = Example(id="p1", question="A 40-year-old woman presents with cough and fever.", diagnoses=("Pneumonia",))


def _scores(**over):
    s = {a: (3 if PDSQI_SCALES[a][0] == (1, 2, 3, 4, 5) else 0) for a in PDSQI_ATTRIBUTES}
    s["abstraction_needed"] = 1
    s.update(over)
    return s


def test_parses_valid_output_and_total_is_mean():
    s = _scores(cited=5, accurate=5, succinct=1, stigmatizing=1)
    llm = ScriptedLLM(rules=[{"pattern": "Diagnostic output", "reply": "```json\n" + json.dumps(s) + "\n```"}])
    js = PDSQIJudge(llm=llm).judge(EX, Prediction("p1", ("Pneumonia", "Bronchitis")))
    assert js.scores == {k: float(v) for k, v in s.items()}
    # the mean of the seven Table 5 dimensions only: cited and the 0/1 items stay out of it
    assert js.total == pytest.approx((5 + 3 + 3 + 3 + 3 + 1 + 3) / 7)
    assert js.std == {} and js.parse_failures == 0
    assert "as the method wrote it:\nPneumonia\nBronchitis\n" in llm.calls[0].messages[-1].content
    assert PDSQIJudge(llm=llm, aggregate="sum").judge(EX, Prediction("p1", ("x",))).total == 21


@pytest.mark.parametrize("bad", ['{"cited": 6}', "scores: all good", json.dumps({**_scores(), "useful": "high"}),
                                 json.dumps({k: v for k, v in _scores().items() if k != "succinct"}),
                                 json.dumps(_scores(stigmatizing=3)), json.dumps(_scores(stigmatizing_record=2)),
                                 json.dumps(_scores(abstraction_needed=3)), json.dumps(_scores(cited=0)),
                                 json.dumps(_scores(useful="NA")),  # NA only where the instrument allows it
                                 json.dumps(_scores(abstraction_needed=0, synthesized=4)),
                                 json.dumps(_scores(abstraction_needed=1, synthesized="NA"))])
def test_strict_parser_rejects(bad):
    assert not parse_pdsqi(bad).ok


def test_binary_items_are_binary_and_synthesized_may_be_na():
    ok = parse_pdsqi(json.dumps(_scores(abstraction_needed=0, synthesized="NA", stigmatizing=1)))
    assert ok.ok and ok.value["synthesized"] is None and ok.value["stigmatizing"] == 1
    assert parse_pdsqi(json.dumps(_scores(abstraction_needed=0, synthesized=None))).ok
    assert {a for a, (vals, _) in PDSQI_SCALES.items() if vals == (0, 1)} == \
        {"abstraction_needed", "stigmatizing", "stigmatizing_record"}


def test_a_binary_item_scored_3_is_reasked_never_averaged():
    bad, good = _scores(stigmatizing=3), _scores(stigmatizing=1)
    llm = ScriptedLLM(rules=[{"pattern": "could not be parsed", "reply": json.dumps(good)},
                             {"pattern": "Diagnostic output", "reply": json.dumps(bad)}])
    js = PDSQIJudge(llm=llm, max_reasks=1).judge(EX, Prediction("p1", ("Pneumonia",)))
    assert js.scores["stigmatizing"] == 1.0 and js.parse_failures == 1
    assert "stigmatizing" in llm.calls[1].messages[-1].content  # the re-ask names the bad item
    with pytest.raises(ValueError, match="no parseable reply"):
        PDSQIJudge(llm=ScriptedLLM(rules=[{"pattern": "Diagnostic output", "reply": json.dumps(bad)}]),
                   max_reasks=0).judge(EX, Prediction("p1", ("Pneumonia",)))


def test_na_synthesized_is_left_out_of_the_average():
    s = _scores(abstraction_needed=0, synthesized="NA", accurate=5)
    llm = ScriptedLLM(rules=[{"pattern": "Diagnostic output", "reply": json.dumps(s)}])
    js = PDSQIJudge(llm=llm).judge(EX, Prediction("p1", ("Pneumonia",)))
    assert js.scores["synthesized"] is None and js.total == pytest.approx((5 + 3 * 5) / 6)


def test_run_level_average_is_the_mean_of_the_seven_table5_rows():
    """LogosKG Table 5: "Average" = mean of its seven rows (each a mean over examples), checked
    on the paper's GPT-4.1 / UMLS / ProbSum baseline column: 3.584 → reported 3.58."""
    from kgreason.judges.base import judge_metrics

    table5 = dict(zip(TABLE5_DIMENSIONS, (3.42, 3.17, 3.61, 3.38, 4.62, 3.65, 3.24)))
    rows = [{"scores": {**table5, "cited": 1.0, "stigmatizing": 1.0}, "average_of": list(TABLE5_DIMENSIONS)}]
    m = judge_metrics(rows)
    assert round(m["judge/pdsqi_average"], 2) == 3.58
    assert m["judge/pdsqi_average"] == pytest.approx(sum(table5.values()) / 7)
    # with NA in one example the average is still the mean of the seven attribute means
    rows = [{"scores": {**{d: 4.0 for d in TABLE5_DIMENSIONS}}, "average_of": list(TABLE5_DIMENSIONS)},
            {"scores": {**{d: 2.0 for d in TABLE5_DIMENSIONS}, "synthesized": None}, "average_of": list(TABLE5_DIMENSIONS)}]
    m = judge_metrics(rows)
    assert m["judge/synthesized"] == 4.0 and m["judge/accurate"] == 3.0
    assert m["judge/pdsqi_average"] == pytest.approx((6 * 3.0 + 4.0) / 7)


def test_recovers_from_malformed_first_reply_via_reask():
    good = _scores(accurate=5)
    llm = ScriptedLLM(rules=[{"pattern": "could not be parsed", "reply": json.dumps(good)},
                             {"pattern": "Diagnostic output", "reply": "The summary looks accurate overall."}])
    js = PDSQIJudge(llm=llm, max_reasks=1).judge(EX, Prediction("p1", ("Pneumonia",)))
    assert js.scores["accurate"] == 5.0 and js.parse_failures == 1
    assert len(llm.calls) == 2
    assert [m.role for m in llm.calls[1].messages] == ["user", "assistant", "user"]
    # with no re-ask budget the same reply is an error
    llm2 = ScriptedLLM(rules=[{"pattern": "Diagnostic output", "reply": "no json"}])
    with pytest.raises(ValueError, match="no parseable reply"):
        PDSQIJudge(llm=llm2, max_reasks=0).judge(EX, Prediction("p1", ("Pneumonia",)))


def test_repeated_sampling_mean_and_std():
    reps = [_scores(cited=1), _scores(cited=3), _scores(cited=5)]
    llm = ScriptedLLM(rules=[{"pattern": "Diagnostic output", "reply": [json.dumps(r) for r in reps]}])
    js = PDSQIJudge(llm=llm, samples=3, temperature=0.7).judge(EX, Prediction("p1", ("Pneumonia",)))
    assert js.scores["cited"] == 3.0 and js.std["cited"] == pytest.approx(statistics.pstdev([1, 3, 5]))
    assert js.std["useful"] == 0.0
    assert [c.sample_index for c in llm.calls] == [0, 1, 2] and all(c.temperature == 0.7 for c in llm.calls)


def test_per_round_scores_and_summarise_aggregation():
    from kgreason.runner.run import summarise

    # the judge scores 'succinct' by the number of diagnoses: 1 item → 5, 2 → 4, 3+ → 2
    llm = ScriptedLLM(rules=[
        {"pattern": r"wrote it:\n[^\n]+\n[^\n]+\n[^\n]+\n\n", "reply": json.dumps(_scores(succinct=2))},
        {"pattern": r"wrote it:\n[^\n]+\n[^\n]+\n\n", "reply": json.dumps(_scores(succinct=4))},
        {"pattern": r"wrote it:\n[^\n]+\n\n", "reply": json.dumps(_scores(succinct=5))},
    ])
    judge = PDSQIJudge(llm=llm)
    rows = []
    for i, (base, r1, r2) in enumerate([(["a", "b", "c"], ["a"], ["a", "d"]), (["a", "b", "c"], ["a", "b"], ["a", "b"])]):
        pred = Prediction(f"p{i}", tuple(r2), rounds={"baseline": base, "round1": r1, "round2": r2})
        js = judge.judge(EX, pred)
        assert isinstance(js, JudgeScore) and set(js.per_round) == {"baseline", "round1", "round2"}
        rows.append({"id": f"p{i}", "metrics": {}, "usage": {}, "extra": {}, "judge": to_jsonable(js)})
    # the final answers equal round2, so round2 is judged once (memoised): 3 + 2 distinct outputs
    assert len(llm.calls) == 5
    m = summarise(rows, [], 2)
    assert m["judge/baseline/succinct"] == 2.0
    assert m["judge/round1/succinct"] == 4.5   # (5 + 4) / 2
    assert m["judge/round2/succinct"] == 4.0
    assert m["judge/succinct"] == 4.0 and m["judge/round1/cited"] == 3.0
    assert m["judge/round1/pdsqi_average"] == pytest.approx((6 * 3 + 4.5) / 7)


def test_compare_with_position_swap():
    a, b = _scores(cited=5, useful=2), _scores(cited=2, useful=4)
    # first order: A=a-output, B=b-output; swapped order: A=b-output, B=a-output.
    # In the swapped call the judge prefers whatever is shown first on 'useful' (position bias).
    swapped = {"A": _scores(cited=2, useful=5), "B": _scores(cited=5, useful=1)}
    llm = ScriptedLLM(rules=[{"pattern": r"Output A:\nFlu", "reply": json.dumps({"A": a, "B": b})},
                             {"pattern": r"Output A:\nCold", "reply": json.dumps(swapped)}])
    cs = PDSQIJudge(llm=llm, position_swap=True).compare(EX, ["Flu"], ["Cold"])
    assert cs.a["cited"] == 5.0 and cs.b["cited"] == 2.0
    assert cs.a["useful"] == 1.5 and cs.b["useful"] == 4.5  # averaged over both orders
    assert cs.preference["cited"] == "a" and cs.preference["useful"] == "b"
    assert cs.swap_agreement == pytest.approx(8 / 8)  # signs agree on every 1-5 item here
    llm2 = ScriptedLLM(rules=[{"pattern": r"Output A:\nFlu", "reply": json.dumps({"A": a, "B": b})},
                              {"pattern": r"Output A:\nCold", "reply": json.dumps({"A": _scores(cited=5), "B": _scores(cited=2, useful=4)})}])
    cs2 = PDSQIJudge(llm=llm2, position_swap=True).compare(EX, ["Flu"], ["Cold"])
    # un-swapped second call: a = B (cited 2, useful 4), b = A (cited 5, useful 3): cited and useful flip
    assert cs2.swap_agreement == pytest.approx(6 / 8)
    assert PDSQIJudge(llm=llm, position_swap=False).compare(EX, ["Flu"], ["Cold"]).swap_agreement is None
