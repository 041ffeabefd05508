"""CWQ / WebQSP / GrailQA loaders on tiny hand-written records and the shared samples."""

from __future__ import annotations

import json

import pytest

from kgreason.data import DataError, load_cwq, load_grailqa, load_webqsp
from kgreason.data.kgqa import read_records


def dump(p, obj, jsonl=False):
    p.write_text("\n".join(json.dumps(o) for o in obj) if jsonl else json.dumps(obj), encoding="utf-8")
    return p


CWQ = [{"ID": "WebQTest-832_c3", "question": "Lou Seal is the mascot for the team that last won the World Series when?",
        "topic_entity": {"m.03_dwn": "Lou Seal"}, "answer": "2014 World Series", "compositionality_type": "superlative"},
       {"ID": "WebQTest-1", "question": "q2", "topic_entity": {}, "answer": "x"}]

WEBQSP = {"Version": "1.0", "Questions": [{
    "QuestionId": "WebQTest-459", "RawQuestion": "where did jovan belcher kill himself?",
    "Parses": [
        {"TopicEntityMid": "m.055d_1d", "TopicEntityName": "Jovan Belcher",
         "InferentialChain": ["people.deceased_person.place_of_death"],
         "Answers": [{"AnswerType": "Entity", "AnswerArgument": "m.04f_d", "EntityName": "Kansas City"}]},
        {"TopicEntityMid": "m.055d_1d", "TopicEntityName": "Jovan Belcher",
         "InferentialChain": ["people.person.places_lived", "people.place_lived.location"],
         "Answers": [{"AnswerType": "Entity", "AnswerArgument": "m.04f_d", "EntityName": "Kansas City"},
                     {"AnswerType": "Value", "AnswerArgument": "1987", "EntityName": None}]}]}]}

GRAIL = [{"qid": 2101960008000, "question": "which play is produced by the illusion?",
          "answer": [{"answer_type": "Entity", "answer_argument": "m.0yrltsn", "entity_name": "The Illusion"},
                     {"answer_type": "Value", "answer_argument": "1990"}],
          "topic_entity": {"m.0yrlqjm": "The Illusion"}, "level": "i.i.d.", "function": "none", "num_edge": 1}]


def test_cwq_tog(tmp_path):
    es = load_cwq(str(dump(tmp_path / "cwq.json", CWQ)))
    ex = es[0]
    assert ex.id == "WebQTest-832_c3" and ex.topic_entities == ("m.03_dwn",) and ex.topic_names == ("Lou Seal",)
    assert ex.answers == ("2014 World Series",) and ex.answer_groups == (("2014 World Series",),)
    assert ex.extra["compositionality_type"] == "superlative"
    assert es[1].topic_entities == ()


def test_webqsp_official_groups_and_paths(tmp_path):
    ex = load_webqsp(str(dump(tmp_path / "w.json", WEBQSP)))[0]
    assert ex.topic_entities == ("m.055d_1d",) and ex.topic_names == ("Jovan Belcher",)
    assert ex.answer_groups == (("Kansas City", "m.04f_d"), ("1987",))  # one group per distinct answer
    assert set(ex.answers) == {"Kansas City", "m.04f_d", "1987"}
    assert ex.gold_paths == (("people.deceased_person.place_of_death",),
                             ("people.person.places_lived", "people.place_lived.location"))


def test_webquestions_tog_ids_are_positions(tmp_path):
    recs = [{"url": "http://x", "question": "a?", "answers": ["A", "B"], "topic_entity": {"m.1": "One"}},
            {"url": "http://x", "question": "b?", "answers": ["C"], "topic_entity": {"m.2": "Two"}}]
    es = load_webqsp(str(dump(tmp_path / "wq.json", recs)))
    assert [e.id for e in es] == ["q0", "q1"] and es[0].answer_groups == (("A",), ("B",))


def test_grailqa(tmp_path):
    ex = load_grailqa(str(dump(tmp_path / "g.json", GRAIL)))[0]
    assert ex.id == "2101960008000" and ex.topic_entities == ("m.0yrlqjm",)
    assert ex.answer_groups == (("The Illusion", "m.0yrltsn"), ("1990",))
    assert ex.extra["level"] == "i.i.d."


def test_rog_jsonl_as_cwq():
    from pathlib import Path

    es = load_cwq(str(Path(__file__).resolve().parents[1] / "assets" / "rog_subgraphs.jsonl"))
    assert es[0].topic_entities == ("Jamaica",) and set(es[0].answers) == {"Jamaican English", "Jamaican Creole English Language"}


def test_sampling_and_limit(tmp_path):
    recs = [dict(CWQ[0], ID=f"q{i}") for i in range(50)]
    p = str(dump(tmp_path / "c.json", recs))
    a = load_cwq(p, sample=10, sample_seed=1)
    b = load_cwq(p, sample=10, sample_seed=1)
    c = load_cwq(p, sample=10, sample_seed=2)
    assert [e.id for e in a] == [e.id for e in b] != [e.id for e in c]
    assert len(load_cwq(p, sample=10, limit=3, sample_seed=1)) == 3


@pytest.mark.parametrize("content,match", [
    ("", "empty file"),
    ("[1, 2]", "record 0: expected a JSON object"),
    ('[{"ID": "a", "question": "q"}]', r"record 0: missing field 'answer'"),
    ('[{"ID": "a", "question": "q", "answer": 3}]', "field 'answer' is a number; expected a string or a list"),
    ('[{"ID": "a", "question": "q", "answer": "x", "topic_entity": ["m.1"]}]', "'topic_entity' must be an object"),
    ('[{"question": "q", "answer": "x"}]', "expected an id field"),
    ('{"ID": "a"}\n{bad', ":2: expected one JSON object per line"),
    ('[{"ID": "a",', ":1: invalid JSON"),
])
def test_errors(tmp_path, content, match):
    p = tmp_path / "bad.json"
    p.write_text(content)
    with pytest.raises(DataError, match=match):
        load_cwq(str(p))


def test_webqsp_answer_error(tmp_path):
    bad = {"Questions": [{"QuestionId": "q", "RawQuestion": "r", "Parses": [{"Answers": [{"EntityName": "x"}]}]}]}
    with pytest.raises(DataError, match=r"record 0: Parses\[0\]: Answers\[0\]: expected"):
        load_webqsp(str(dump(tmp_path / "w.json", bad)))
    with pytest.raises(DataError, match="file not found"):
        load_webqsp(str(tmp_path / "missing.json"))
    with pytest.raises(DataError, match="source must be"):
        load_webqsp(str(tmp_path / "w.json"), source="ftp")


def test_shared_samples(shared_data):
    cwq = load_cwq(str(shared_data / "cwq" / "tog_cwq.json"))
    assert len(cwq) == 3531 and sum(bool(e.topic_entities) for e in cwq) == 3520  # PROVENANCE counts
    assert cwq[0].topic_entities == ("m.03_dwn",)
    w = load_webqsp(str(shared_data / "webqsp" / "grasp_webqsp_test100.json"))
    assert len(w) == 100 and all(e.id.startswith("WebQTest-") for e in w)
    assert all(e.answer_groups for e in w) and sum(bool(e.gold_paths) for e in w) == 98
    raw = read_records(shared_data / "webqsp" / "grasp_webqsp_test100.json")
    n_ans = {a["AnswerArgument"] for p in raw[0]["Parses"] for a in p["Answers"]}
    assert len(w[0].answer_groups) == len(n_ans)
    wq = load_webqsp(str(shared_data / "webqsp" / "tog_webquestions_test2032.json"))
    assert len(wq) == 2032
    g = load_grailqa(str(shared_data / "grailqa" / "tog_grailqa.json"))
    assert len(g) == 1000 and sum(bool(e.topic_entities) for e in g) == 988
    assert {e.extra["level"] for e in g} == {"zero-shot", "i.i.d.", "compositional"}
