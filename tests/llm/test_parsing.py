"""parse_json / parse_list / parse_score(s) / parse_yes_no and the bounded re-ask loop."""

from __future__ import annotations

import pytest

from kgreason.llm.parsing import parse_json, parse_list, parse_score, parse_scores, parse_yes_no, with_reask
from kgreason.llm.scripted import ScriptedLLM
from kgreason.types import ChatRequest


@pytest.mark.parametrize("text,value", [
    ('{"a": 1}', {"a": 1}),
    ('Sure! ```json\n{"a": [1, 2,],}\n```', {"a": [1, 2]}),
    ("{'answer': 'Paris', 'ok': True, 'x': None}", {"answer": "Paris", "ok": True, "x": None}),
    ('The list is ["x", "y"] done', ["x", "y"]),
    ('prefix {"s": "a } brace"} suffix', {"s": "a } brace"}),
    ('{"outer": {"inner": [1, {"k": "v"}]}}', {"outer": {"inner": [1, {"k": "v"}]}}),
])
def test_parse_json_repairs(text, value):
    r = parse_json(text)
    assert r.ok and r.value == value


def test_parse_json_failure_is_a_result_not_an_exception():
    r = parse_json("no json here at all")
    assert not r.ok and r.error


@pytest.mark.parametrize("text,items", [
    ('["Paris", "Lyon"]', ["Paris", "Lyon"]),
    ('{"answers": ["a", " b "]}', ["a", "b"]),
    ("1. Paris\n2) Lyon\n- Nice", ["Paris", "Lyon", "Nice"]),
    ("Paris, Lyon; Nice.", ["Paris", "Lyon", "Nice"]),
])
def test_parse_list(text, items):
    r = parse_list(text)
    assert r.ok and r.value == items


def test_parse_list_empty_fails():
    assert not parse_list("   ").ok


def test_scores_and_yes_no():
    assert parse_score("confidence: 0.8").value == 0.8
    assert parse_score("I'd say 85%").value == pytest.approx(0.85)
    assert parse_score("7", lo=0, hi=5).value == 5
    assert not parse_score("none").ok
    assert parse_scores("[0.1, 0.9, 0.5]", 3).value == [0.1, 0.9, 0.5]
    assert parse_scores('{"a": 0.2, "b": 2}', 2).value == [0.2, 1.0]
    assert parse_scores("first 0.3 then 0.4", 2).value == [0.3, 0.4]
    assert not parse_scores("0.3", 2).ok
    assert parse_yes_no("Yes, it is.").value is True
    assert parse_yes_no("The evidence is insufficient").value is False
    assert not parse_yes_no("maybe").ok


def test_with_reask_is_bounded_and_carries_the_conversation():
    llm = ScriptedLLM(rules=[{"pattern": ".", "reply": ["garbage", "still garbage", '["ok"]']}])
    seen = []
    res, comps = with_reask(llm, ChatRequest.of("list?", seed=3, temperature=0.5), parse_list_strict,
                            max_reasks=1, on_call=lambda r, c, p: seen.append((r, p.ok)))
    assert not res.ok and len(comps) == 2 and len(llm.calls) == 2
    second = llm.calls[1]
    assert [m.role for m in second.messages] == ["user", "assistant", "user"]
    assert second.messages[1].content == "garbage" and "could not be parsed" in second.messages[2].content
    assert second.seed == 3 and second.temperature == 0.5
    llm2 = ScriptedLLM(rules=[{"pattern": ".", "reply": ["garbage", '["ok"]']}])
    res2, comps2 = with_reask(llm2, ChatRequest.of("list?"), parse_list_strict, max_reasks=3)
    assert res2.ok and res2.value == ["ok"] and len(comps2) == 2


def parse_list_strict(text):
    r = parse_json(text)
    from kgreason.llm.parsing import ParseResult

    return r if r.ok and isinstance(r.value, list) else ParseResult(False, None, "not a JSON list")
