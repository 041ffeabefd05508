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


# --------------------------------------------------------------------------- reasoner formats
# (moved here from the reasoners in issue 15; the cases pin the behaviour they had there)

from kgreason.llm.parsing import (  # noqa: E402
    parse_answer_field,
    parse_answers,
    parse_candidate_scores,
    parse_cypher,
    parse_first_line,
    parse_hypothesis,
    parse_schema,
    parse_triple_answer,
)


@pytest.mark.parametrize("text, value, ok", [
    ("Step 1 ...\nAnswer: Paris; Lyon", ["Paris", "Lyon"], True),
    ("The answer to this question is: 2000.", ["2000"], True),
    ("Some reasoning.\nThe answers are Paris; Lyon", ["Paris", "Lyon"], True),
    ("I think it is Berlin", ["I think it is Berlin"], False),  # last line kept, marked failed
    ("Answer: ", [], False),  # an empty answer line says nothing
])
def test_parse_answers(text, value, ok):
    r = parse_answers(text)
    assert (r.value, r.ok) == (value, ok)


@pytest.mark.parametrize("text, value, ok", [
    ('{"answer": " Paris "}', "Paris", True),
    ("Answer: Lyon\nbecause ...", "Lyon", True),
    ('{"other": 1}', '{"other": 1}', True),  # no answer field: the first line as written
    ("  \n ", "", False),
])
def test_parse_answer_field(text, value, ok):
    r = parse_answer_field(text)
    assert (r.value, r.ok) == (value, ok)


def test_parse_first_line():
    assert parse_first_line("  Who directed X?  \nmore").value == "Who directed X?"
    assert not parse_first_line("   ").ok


def test_parse_candidate_scores_by_name_and_by_order():
    names = ["film.film", "film.film (backward)"]
    assert parse_candidate_scores("film.film (backward): 0.9; film.film: 0.2", names).value == [0.2, 0.9]
    assert parse_candidate_scores("{film.film (Score: 1.7)}", names).value == [1.0, 0.0]  # clipped, unnamed → 0
    assert parse_candidate_scores("0.4 and 0.6", names).value == [0.4, 0.6]
    assert not parse_candidate_scores("no idea", names).ok


@pytest.mark.parametrize("text, query", [
    ("```cypher\nMATCH (n) RETURN n\n```", "MATCH (n) RETURN n"),
    ("Here it is: MATCH (a)-[r]->(b) RETURN b.name", "MATCH (a)-[r]->(b) RETURN b.name"),
    ("```\nOPTIONAL MATCH (x) RETURN x\n```", "OPTIONAL MATCH (x) RETURN x"),
])
def test_parse_cypher(text, query):
    r = parse_cypher(text)
    assert r.ok and r.value == query


def test_parse_cypher_without_a_query_fails():
    assert not parse_cypher("I cannot write that query.").ok


def test_parse_schema_forms():
    r = parse_schema('{"schema": [["Film", "directed_by", "?d"], ["?d", " born_in ", "?a"]], "answer": "?a"}')
    assert r.ok and r.value == {"schema": [("Film", "directed_by", "?d"), ("?d", "born_in", "?a")], "answer": "?a"}
    r = parse_schema('{"schema": [{"head": "A", "relation": "r", "tail": "?x"}, ["bad"]]}')
    assert r.ok and r.value == {"schema": [("A", "r", "?x")], "answer": None}
    r = parse_schema('[["A", "r", "?x"]]')  # a bare list of triples
    assert r.ok and r.value == {"schema": [("A", "r", "?x")], "answer": None}
    assert not parse_schema('{"schema": [["A", "", "?x"]]}').ok
    assert not parse_schema('{"schema": "A r ?x"}').ok


def test_parse_hypothesis():
    r = parse_hypothesis('{"hypothesis": "h", "claims": [["A", "r", "B"], ["bad"]], "answer": ["X", "Y"]}')
    assert r.ok and r.value == {"hypothesis": "h", "claims": [("A", "r", "B")], "answer": "X", "answers": ["X", "Y"]}
    assert parse_hypothesis('{"answer": null}').value == {"hypothesis": "", "claims": [], "answer": "", "answers": []}
    assert not parse_hypothesis('["not", "an", "object"]').ok


def test_parse_triple_answer():
    r = parse_triple_answer('{"answer": "Paris", "used": [0, "2", "x", null], "sufficient": false}')
    assert r.ok and r.value == {"answer": "Paris", "used": [0, 2], "sufficient": False}
    assert parse_triple_answer('{"answer": "Paris"}').value["sufficient"] is True
    assert parse_triple_answer('{"answer": null, "used": null}').value == {"answer": "", "used": [], "sufficient": True}
    assert not parse_triple_answer("Paris").ok


# --------------------------------------------------------------------------- replies Qwen2.5-Coder-1.5B wrote
# Each case below is a reply the issue-21 model (llm=qwen_coder_1_5b) actually gave, or its
# shape; docs/validation.md, "What the model writes, and what the parsers read", states the rules
# (the traces they came from are in its git history).

def test_tog_scores_keyed_by_list_number_are_not_read_as_scores():
    # ToG lists the candidates as "1. name"; the model answered by number. The list numbers
    # used to be taken as scores: [1.0, 0.5, 1.0, 0.5, 1.0].
    names = ["film.directed_by", "film.written_by", "film.starred_actors", "film.has_genre", "film.release_year"]
    r = parse_candidate_scores("1: 0.5\n2: 0.5\n3: 0.5\n4: 0.5\n5: 0.5", names)
    assert r.ok and r.value == [0.5] * 5
    r = parse_candidate_scores("1. 0.9\n3. 0.2", names)  # unnumbered candidates score 0
    assert r.ok and r.value == [0.9, 0.0, 0.2, 0.0, 0.0]
    r = parse_candidate_scores("Candidate 2 (Score: 0.7)\n1) score = 0.1", names)
    assert r.ok and r.value == [0.1, 0.7, 0.0, 0.0, 0.0]
    # a number outside 1..n is not an index: read in order as before
    assert parse_candidate_scores("0.4 and 0.6", names[:2]).value == [0.4, 0.6]


def test_parse_scores_skips_list_numbers():
    assert parse_scores("1: 0.5\n2: 0.25", 2).value == [0.5, 0.25]
    assert parse_scores("1. 0.8\n2. 0.1\n3. 0.3", 3).value == [0.8, 0.1, 0.3]


@pytest.mark.parametrize("text, value", [
    ("Answer: Peter Bogdanovich; Answer: Daisy Miller", ["Peter Bogdanovich", "Daisy Miller"]),
    ("Answer: Paris; answer: Lyon", ["Paris", "Lyon"]),
    ("**Answer:** Paris", ["Paris"]),
])
def test_parse_answers_repeated_answer_prefix(text, value):
    r = parse_answers(text)
    assert r.ok and r.value == value


@pytest.mark.parametrize("text, value", [
    # a list in prose (Oxford "and", plain "and" after commas)
    ("Answer: At Long Last Love, A Short Film About Love, American Buffalo, and Black Venus",
     ["At Long Last Love", "A Short Film About Love", "American Buffalo", "Black Venus"]),
    ("Answer: Paper Moon, Mask and Texasville", ["Paper Moon", "Mask", "Texasville"]),
    # one comma and no conjunction is a title, not a list
    ("Answer: What's Up, Doc?", ["What's Up, Doc?"]),
    # "and" without a comma is part of the name
    ("Answer: Pride and Prejudice", ["Pride and Prejudice"]),
    # a sentence around the names
    ("Answer: The films directed by Peter Bogdanovich are Paper Moon, Mask, and Texasville.",
     ["Paper Moon", "Mask", "Texasville"]),
    ("The answer is Thriller.", ["Thriller"]),
])
def test_parse_answers_lists_and_sentences_in_prose(text, value):
    r = parse_answers(text)
    assert r.ok and r.value == value


def test_parse_hypothesis_splits_a_prose_list_answer():
    r = parse_hypothesis('{"hypothesis": "h", "claims": [], "answer": '
                         '"At Long Last Love, A Short Film About Love, American Buffalo, and Black Venus"}')
    assert r.ok
    assert r.value["answers"] == ["At Long Last Love", "A Short Film About Love", "American Buffalo", "Black Venus"]
    assert r.value["answer"] == "At Long Last Love"  # SGR's a_i: one answer per path (Eq. 29)


# Qwen2.5-Coder-1.5B's SGR hypothesis replies at N = 20 (outputs/validation/n20/metaqa_sgr, shortened):
# reply -> (hypothesis, claims, answer); None = unreadable (no answer a careful reader could take)
HYPOTHESIS_REPLIES = [
    ("Next hypothesis:\nPeter Bogdanovich directed both Daisy Miller and Texasville (answer: Peter Bogdanovich)\n\n"
     "Evidence triples:\nDaisy Miller | directed_by | Peter Bogdanovich\nTexasville | directed_by | Peter Bogdanovich\n\n"
     "Current best answer entity: Peter Bogdanovich",
     ("Peter Bogdanovich directed both Daisy Miller and Texasville",
      [("Daisy Miller", "directed_by", "Peter Bogdanovich"), ("Texasville", "directed_by", "Peter Bogdanovich")],
      "Peter Bogdanovich")),
    ("The Story of Seabiscuit has the same director of Between the Devil and the Deep Blue Sea.\n\n"
     "The evidence triples that support this hypothesis are:\nThe Story of Seabiscuit | directed_by | David Butler\n\n"
     "The current best answer entity is David Butler.",
     ("The Story of Seabiscuit has the same director of Between the Devil and the Deep Blue Sea.",
      [("The Story of Seabiscuit", "directed_by", "David Butler")], "David Butler")),
    # a stray "]" after the claims: the JSON does not load, its whole fields are read
    ('{"hypothesis": "The languages of her films.", "claims": [["Snow Angels", "in_language", "English"], '
     '["Whiteout", "in_language", "English"]]], "answer": "English"}',
     ("The languages of her films.", [("Snow Angels", "in_language", "English"), ("Whiteout", "in_language", "English")],
      "English")),
    # cut off before the answer, a 5-item claim: nothing to take
    ('{"hypothesis": "Janet Eilber is a co-star.", "claims": [["Being John Malkovich", "starred_actors", '
     '"Michael Redgrave", "Jan Sterling", "Edmond O\'Brien"]],', None),
    ("To find which films have the same director, I compare the evidence. Therefore, my next hypothesis is:\n"
     "The Story of Seabiscuit has the same d", None),
    ("Barbary Coast Gent starred Wallace Beery, so the answer is Treasure Island.",
     ("Barbary Coast Gent starred Wallace Beery, so the answer is Treasure Island.", [], "Treasure Island")),
    # both markers: the "(answer: X)" one is read, not "Treasure Island (answer: Treasure Island)"
    ("Barbary Coast Gent starred Wallace Beery, so the answer is Treasure Island (answer: Treasure Island)",
     ("Barbary Coast Gent starred Wallace Beery, so the answer is Treasure Island", [], "Treasure Island")),
    ("Chris Menges directed Second Best, so the answer is another film directed by Chris Menges (answer: CrissCross)",
     ("Chris Menges directed Second Best, so the answer is another film directed by Chris Menges", [], "CrissCross")),
    ("{none}", None),
]


@pytest.mark.parametrize("reply,expected", HYPOTHESIS_REPLIES)
def test_parse_hypothesis_reads_real_prose_and_broken_json(reply, expected):
    r = parse_hypothesis(reply)
    if expected is None:
        assert not r.ok, r.value
    else:
        assert r.ok and (r.value["hypothesis"], r.value["claims"], r.value["answer"]) == expected


def test_parse_list_recovers_the_complete_items_of_a_cut_off_json_list():
    # IO reply cut at max_tokens: used to become the answer '["The Great Gatsby"' with no failure
    r = parse_list('["The Great Gatsby", "The Sound of Music", "The Wizard of Oz", "The Godf')
    assert r.ok and r.value == ["The Great Gatsby", "The Sound of Music", "The Wizard of Oz"]
    assert "cut off" in r.error  # noted on the (successful) result
    r = parse_list('```json\n["The Great Gatsby"')
    assert r.ok and r.value == ["The Great Gatsby"]
    r = parse_list('["The Gre')  # no complete item: a parse failure
    assert not r.ok and r.value == []


@pytest.mark.parametrize("text, items", [
    ('Sure! Here is the list: ["Paper Moon", "Mask"]. Hope this helps.', ["Paper Moon", "Mask"]),
    ('{"answers": ["Thriller"]} (based on his filmography)', ["Thriller"]),
    ('"Paper Moon", "Mask"', ["Paper Moon", "Mask"]),  # quotes without brackets
    ("Paper Moon, Mask and Texasville", ["Paper Moon", "Mask", "Texasville"]),
])
def test_parse_list_extra_text_and_prose(text, items):
    r = parse_list(text)
    assert r.ok and r.value == items


@pytest.mark.parametrize("text, value", [
    ("The answer is Paris.", "Paris"),
    ('Sure. {"answer": "Paris"} is my answer.', "Paris"),
    ("Answer: The Beatles", "The Beatles"),
])
def test_parse_answer_field_sentences(text, value):
    r = parse_answer_field(text)
    assert r.ok and r.value == value


def test_parse_answers_never_returns_a_relation_name():
    # RAG reply (MetaQA, Qwen2.5-Coder-1.5B): facts in the prompt's "head | relation | tail"
    # form and no Answer: line. Splitting on "|" used to give 'directed_by' as an answer.
    r = parse_answers("The Glass Agency | directed_by | Peter Bogdanovich; Hitchcock | directed_by | Peter Bogdanovich")
    assert not r.ok  # no Answer: line: still a parse failure
    assert r.value == ["The Glass Agency", "Peter Bogdanovich", "Hitchcock"]
    assert parse_answers("Answer: film.film.directed_by; Paper Moon").value == ["Paper Moon"]


def test_parse_list_drops_repeats():
    # HotpotQA IO reply: the model looped on one item until max_tokens cut the list
    r = parse_list('["Actress", "Actress", "Actress", "Act')
    assert r.ok and r.value == ["Actress"]
    assert parse_list('["a", "b", "a"]').value == ["a", "b"]


@pytest.mark.parametrize("text, value, ok", [
    # MetaQA RAG replies of Qwen2.5-Coder-1.5B without the Answer: line: a one-line reply that is
    # only names is the answer a careful reader takes, so it parses
    ("Thriller", ["Thriller"], True),
    ("What's Up, Doc?", ["What's Up, Doc?"], True),
    ("A Single Shot; Hitchcock", ["A Single Shot", "Hitchcock"], True),
    # a sentence, several lines of reasoning, or copied facts are not an answer line
    ("I think it is Berlin", ["I think it is Berlin"], False),
    ("I am not sure", ["I am not sure"], False),
    ("I Am Legend", ["I Am Legend"], True),
    ("Daisy Miller was directed by Peter Bogdanovich.\nHe also made Paper Moon.", ["He also made Paper Moon"], False),
    ("Paper Moon | directed_by | Peter Bogdanovich", ["Paper Moon", "Peter Bogdanovich"], False),
])
def test_parse_answers_a_bare_one_line_reply(text, value, ok):
    r = parse_answers(text)
    assert (r.value, r.ok) == (value, ok)


@pytest.mark.parametrize("text, value, ok", [
    # Qwen2.5-Coder-1.5B CoT, MetaQA (validation N=20): the answer line written at the end of the
    # reasoning sentence, not on its own line: a careful reader reads it
    ("Ari Graynor starred in the films \"The Dark Knight\" (2008) and \"The Dark Knight Rises\" (2012), "
     "which were directed by Christopher Nolan. Answer: Christopher Nolan", ["Christopher Nolan"], True),
    ("It was made in 1999! Final answer: Paris; Lyon", ["Paris", "Lyon"], True),
    # ...but "answer:" inside a sentence is not an answer line
    ("The question asks for the answer: it is unclear", ["The question asks for the answer: it is unclear"], False),
    # an explicit abstention is read (no answer), not an unreadable reply: counted as a parse
    # failure it was re-asked and inflated the row's unparseable replies
    ("Answer: None", [], True),
    ("Reasoning...\nAnswer: unknown", [], True),
    ("Answer: n/a", [], True),
    # ToG, MetaQA: the prompt's own placeholder copied back is no answer (before: the answer "<answer>")
    ("Answer: <answer>", [], False),
    ("Answer: <answer>; Paris", ["Paris"], True),
])
def test_parse_answers_inline_answer_and_abstention(text, value, ok):
    r = parse_answers(text)
    assert (r.value, r.ok) == (value, ok)


def test_dx_name_list_keeps_the_complete_items_of_a_cut_off_list():
    # LogosKG-Dx baseline reply (DDXPlus, Qwen2.5-Coder-1.5B) looping until max_tokens: it was
    # unparseable, re-asked, cut again, and the baseline differential was lost
    from kgreason.reasoners.dx_common import parse_name_list

    r = parse_name_list('["COPD", "Gastroesophageal Reflux", "Chronic Bronchitis", "COPD", "Lung Infe')
    assert r.ok and r.value == ["COPD", "Gastroesophageal Reflux", "Chronic Bronchitis"]
    assert not parse_name_list('["CO').ok
