"""CoT: prompt shape and answer-line parsing (SGR Table 1 "CoT" row)."""

from __future__ import annotations

import pytest

from kgreason.llm.parsing import parse_answers
from kgreason.llm.scripted import ScriptedLLM
from kgreason.reasoners.cot import CoT


@pytest.mark.parametrize("text, expected, ok", [
    ("Step 1: X directed Y.\nAnswer: Paris", ["Paris"], True),
    ("reasoning...\nAnswer: Paris; Lyon.", ["Paris", "Lyon"], True),
    ("Answer: a\nmore thinking\nFinal answer: b | c", ["b", "c"], True),
    ('Answer: ["x", "y"]', ["x", "y"], True),
    ("**Answer:** {Rome}", ["Rome"], True),
    ("I think it is Berlin", ["I think it is Berlin"], False),
    ("Answer: unknown", [], True),  # an abstention is read (tests/llm/test_parsing.py)
    ("", [], False),
])
def test_parse_answers(text, expected, ok):
    res = parse_answers(text)
    assert res.value == expected and res.ok is ok


def test_cot_asks_for_reasoning_and_parses_the_answer_line(world):
    q = world.questions[0]
    llm = ScriptedLLM(rules=[{"pattern": r"^TASK: answer the question step by step.*Q: (.+?)\s*$",
                              "reply": "The question is {0}\nAnswer: Gold A; Gold B"}])
    pred = CoT(llm=llm).answer(q)
    assert pred.answers == ("Gold A", "Gold B")
    prompt = llm.calls[0].messages[-1].content
    assert prompt.rstrip().endswith(f"Q: {q.question}") and '"Answer: <answer>"' in prompt
    assert pred.usage.calls == 1 and pred.extra["llm_calls"] == 1
    assert [s.kind for s in pred.trace] == ["llm"] and pred.trace[0].data["parsed"] == ["Gold A", "Gold B"]
    assert "retrieved" not in pred.extra  # no KG: answer_coverage is not applicable


def test_cot_unparseable_reply_counts_a_parse_failure(world):
    pred = CoT(llm=ScriptedLLM(default="")).answer(world.questions[0])
    assert pred.answers == () and pred.usage.parse_failures == 1


def test_parse_answers_prose_forms_of_small_models():
    from kgreason.llm.parsing import parse_answers

    assert parse_answers("The answer to this question is: 2000.").value == ["2000"]
    assert parse_answers("Some reasoning.\nThe answers are Paris; Lyon").value == ["Paris", "Lyon"]
    # the explicit form wins over prose earlier in the reply
    assert parse_answers("The answer is probably X.\nAnswer: Y").value == ["Y"]
    r = parse_answers("Soul Surfer is a film.")
    assert not r.ok and r.value == ["Soul Surfer is a film"]
