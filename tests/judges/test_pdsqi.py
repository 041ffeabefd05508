"""PDSQI-9 judge: strict parsing, re-ask recovery, sampling std, per-round scores and their
aggregation in run.summarise, position-swapped comparison."""

from __future__ import annotations

import json
import statistics

import pytest

from kgreason.judges import PDSQI_ATTRIBUTES, JudgeScore, PDSQIJudge
from kgreason.judges.pdsqi import parse_pdsqi
from kgreason.llm.scripted import ScriptedLLM
from kgreason.types import Example, Prediction, to_jsonable

EX = Example(id="p1", question="A 40-year-old woman presents with cough and fever.", diagnoses=("Pneumonia",))


def _scores(**over):
    s = {a: 3 for a in PDSQI_ATTRIBUTES}
    s.update(over)
    return s


def test_parses_valid_output_and_total_is_mean():
    s = _scores(cited=5, stigmatizing=4)
    llm = ScriptedLLM(rules=[{"pattern": "Diagnostic output", "reply": "```json\n" + json.dumps(s) + "\n```"}])
    js = PDSQIJudge(llm=llm).judge(EX, Prediction("p1", ("Pneumonia", "Bronchitis")))
    assert js.scores == {k: float(v) for k, v in s.items()}
    assert js.total == pytest.approx(sum(s.values()) / 9)
    assert js.std == {} and js.parse_failures == 0
    assert "1. Pneumonia\n2. Bronchitis" in llm.calls[0].messages[-1].content
    assert PDSQIJudge(llm=llm, aggregate="sum").judge(EX, Prediction("p1", ("x",))).total == sum(s.values())


@pytest.mark.parametrize("bad", ['{"cited": 6}', "scores: all good", json.dumps({**_scores(), "useful": "high"}),
                                 json.dumps({k: v for k, v in _scores().items() if k != "succinct"})])
def test_strict_parser_rejects(bad):
    assert not parse_pdsqi(bad).ok


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
    from kgreason.run import summarise

    # the judge scores 'succinct' by the number of diagnoses: 1 item → 5, 2 → 4, 3+ → 2
    llm = ScriptedLLM(rules=[
        {"pattern": r"evaluate:\n1\. [^\n]*\n2\. [^\n]*\n3\.", "reply": json.dumps(_scores(succinct=2))},
        {"pattern": r"evaluate:\n1\. [^\n]*\n2\. ", "reply": json.dumps(_scores(succinct=4))},
        {"pattern": r"evaluate:\n1\. ", "reply": json.dumps(_scores(succinct=5))},
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
    assert m["judge/round1/pdsqi_total"] == pytest.approx((8 * 3 + 4.5) / 9)


def test_compare_with_position_swap():
    a, b = _scores(cited=5, useful=2), _scores(cited=2, useful=4)
    # first order: A=a-output, B=b-output; swapped order: A=b-output, B=a-output.
    # In the swapped call the judge prefers whatever is shown first on 'useful' (position bias).
    swapped = {"A": _scores(cited=2, useful=5), "B": _scores(cited=5, useful=1)}
    llm = ScriptedLLM(rules=[{"pattern": r"Output A:\n1\. Flu", "reply": json.dumps({"A": a, "B": b})},
                             {"pattern": r"Output A:\n1\. Cold", "reply": json.dumps(swapped)}])
    cs = PDSQIJudge(llm=llm, position_swap=True).compare(EX, ["Flu"], ["Cold"])
    assert cs.a["cited"] == 5.0 and cs.b["cited"] == 2.0
    assert cs.a["useful"] == 1.5 and cs.b["useful"] == 4.5  # averaged over both orders
    assert cs.preference["cited"] == "a" and cs.preference["useful"] == "b"
    assert cs.swap_agreement == pytest.approx(9 / 9)  # signs agree on every attribute here
    llm2 = ScriptedLLM(rules=[{"pattern": r"Output A:\n1\. Flu", "reply": json.dumps({"A": a, "B": b})},
                              {"pattern": r"Output A:\n1\. Cold", "reply": json.dumps({"A": _scores(cited=5), "B": _scores(cited=2, useful=4)})}])
    cs2 = PDSQIJudge(llm=llm2, position_swap=True).compare(EX, ["Flu"], ["Cold"])
    # un-swapped second call: a = B (cited 2, useful 4), b = A (cited 5, useful 3): cited and useful flip
    assert cs2.swap_agreement == pytest.approx(7 / 9)
    assert PDSQIJudge(llm=llm, position_swap=False).compare(EX, ["Flu"], ["Cold"]).swap_agreement is None
