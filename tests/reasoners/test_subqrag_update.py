"""SubQRAG's dynamic graph update (subqrag.txt §2.3, Eq. 4; issue 41, item 3).

"From these documents, new triples T*_new are extracted, validated, and de-duplicated. The
triples are then incrementally written back into the KG." At a fallback the passages that were
read go to one question-guided extraction call (the sub-question and the passages), which can
state what the generic offline pass (§2.1) missed. Its triples are validated with the offline
rule (well-formed, head and tail in one read passage), de-duplicated against G and the new ones
written into G, embedded for Eq. 3, where later sub-questions retrieve them.

Here the offline pass misses ``Bob Stone | born in | Riverton`` (its reply for that passage is
empty); the fallback's guided extraction finds it. Before issue 41 the fallback only read the
offline index back, so nothing was ever written.
"""

from __future__ import annotations

import json

import pytest

from kgreason.data.base import ExampleSet
from kgreason.embed import Embedder
from kgreason.llm.scripted import ScriptedLLM
from kgreason.metrics import METRICS
from kgreason.reasoners.subqrag import SubQRAG
from kgreason.types import Example

PARAGRAPHS = (("Alpha", "Alpha is a film directed by Bob Stone."),
              ("Bob Stone", "Bob Stone was born in Riverton."),
              ("Zeta", "Zeta is a river in Eastland."))
BORN = ["Bob Stone", "born in", "Riverton"]
GUIDED = "Unanswered:"  # marks the question-guided extraction prompt (prompts/subqrag/update_extract.txt)


def _rules():
    return [
        {"pattern": r"Decompose.*Question: Where was the director of Alpha born",
         "reply": json.dumps(["Who directed Alpha?", "Where was #1 born?", "Is #2 the birthplace of #1?"])},
        {"pattern": r"Decompose.*Question: Where was Bob Stone born", "reply": '["Where was Bob Stone born?"]'},
        # the generic offline pass (§2.1): it misses the birthplace
        {"pattern": r"Title: Alpha\n", "reply": '[["Alpha", "directed by", "Bob Stone"]]'},
        {"pattern": r"Title: Bob Stone\n", "reply": "[]"},
        {"pattern": r"Title: Zeta\n", "reply": '[["Zeta", "located in", "Eastland"]]'},
        # Eq. 4, guided by the sub-question: one new triple, one ungrounded, one malformed, one
        # already in G (another spelling of the indexed triple)
        {"pattern": GUIDED + r" Where was Bob Stone born",
         "reply": json.dumps([BORN, ["Bob Stone", "born in", "Atlantis"], ["bad"],
                              ["alpha", "Directed  By", "bob stone"]])},
        {"pattern": r"\[(\d+)\] Alpha \| directed by \| Bob Stone.*Question: Who directed",
         "reply": '{{"answer": "Bob Stone", "used": [{0}], "sufficient": true}}'},
        # a later sub-question of the same question answers from the written triple
        {"pattern": r"\[(\d+)\] Bob Stone \| born in \| Riverton.*Question: (Is Riverton|Where was Bob Stone born)",
         "reply": '{{"answer": "yes", "used": [{0}], "sufficient": true}}'},
        {"pattern": r"Triples:.*Question:", "reply": '{"answer": "unknown", "used": [], "sufficient": false}'},
        {"pattern": r"Passages:.*Question: Where was Bob Stone born", "reply": '{"answer": "Riverton"}'},
        {"pattern": r"Graph memory", "reply": '{"answer": "Riverton"}'},
    ]


EX0 = Example(id="u0", question="Where was the director of Alpha born?", answers=("Riverton",), corpus=PARAGRAPHS)
EX1 = Example(id="u1", question="Where was Bob Stone born?", answers=("Riverton",), corpus=PARAGRAPHS)


@pytest.fixture(scope="module")
def emb_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("emb")


def _reasoner(tmp_path, emb_dir, examples=(EX0, EX1), done=(), **kw):
    llm = ScriptedLLM(rules=_rules())
    kw.setdefault("top_k", 5)  # the whole small graph: what is retrieved is what G holds
    r = SubQRAG(kg=None, llm=llm, index_dir=str(tmp_path / "idx"), passage_top_k=2, extract_passages=2,
                embedder=Embedder(cache_dir=str(emb_dir)), **kw)
    r.prepare(ExampleSet("docs", list(examples)), done=done)
    return r, llm


def _guided(llm):
    return [c.messages[-1].content for c in llm.calls if GUIDED in c.messages[-1].content]


def _sub(p, i):
    return [s.data for s in p.trace if s.kind == "subquestion"][i]


def _retrieved(p):
    return [s.data["triples"] for s in p.trace if s.kind == "retrieve" and s.name == "triples"]


def test_a_fallback_writes_what_the_offline_pass_missed_and_a_later_subquestion_retrieves_it(tmp_path, emb_dir):
    r, llm = _reasoner(tmp_path, emb_dir)
    assert r.kg_source == "index" and tuple(BORN) not in r.graph
    n0 = len(r.graph)
    p = r.answer(EX0)
    assert _sub(p, 1)["source"] == "passages"
    # one question-guided extraction: the sub-question and the read passages
    prompts = _guided(llm)
    assert len(prompts) == 1 and "Unanswered: Where was Bob Stone born?" in prompts[0]
    assert "Bob Stone: Bob Stone was born in Riverton." in prompts[0]
    # written into G with its passage as provenance
    assert tuple(BORN) in r.graph and len(r.graph) == n0 + 1
    assert r.graph.provenance[r.graph.id_of(tuple(BORN))] == ["Bob Stone"]
    assert p.extra["triples_written"] == 1
    assert p.extra["write_back"] == [{"passage": "Bob Stone", "triples": [BORN]}]
    # the third sub-question retrieves it by Eq. 3 (the second's retrieval could not: G lacked it)
    retrieved = _retrieved(p)
    assert BORN not in retrieved[1] and BORN in retrieved[2]
    third = _sub(p, 2)
    assert third["rewritten"] == "Is Riverton the birthplace of Bob Stone?"
    assert third["source"] == "triples" and third["used"] == [BORN]
    assert BORN in p.extra["graph_memory"]


def test_invalid_and_duplicate_triples_are_not_written(tmp_path, emb_dir):
    r, llm = _reasoner(tmp_path, emb_dir)
    n0 = len(r.graph)
    p = r.answer(EX0)
    step = next(s.data for s in p.trace if s.kind == "update" and s.name == "write_back")
    # "Atlantis" is in no read passage, ["bad"] is no triple: both rejected by the offline validator
    assert step["rejected"] == 2 and ("Bob Stone", "born in", "Atlantis") not in r.graph
    # "alpha | Directed  By | bob stone" is the indexed triple under the de-duplication key
    assert step["duplicates"] == 1 and step["added"] == [BORN]
    assert len(r.graph) == n0 + 1


def test_without_update_nothing_is_extracted_or_written(tmp_path, emb_dir):
    r, llm = _reasoner(tmp_path, emb_dir, update=False)
    n0 = len(r.graph)
    p = r.answer(EX0)
    assert _sub(p, 1)["source"] == "passages"  # the passage fallback still answers
    assert not _guided(llm) and len(r.graph) == n0 and tuple(BORN) not in r.graph
    assert p.extra["triples_written"] == 0 and not p.extra.get("write_back")
    assert not [s for s in p.trace if s.kind == "update"]


def test_run_scope_later_questions_see_the_update_in_dataset_order(tmp_path, emb_dir):
    """The default (``update_scope: run``, §2.3 "continually update the pre-constructed KG"):
    the second question retrieves what the first wrote, answers from it, and writes nothing."""
    r, llm = _reasoner(tmp_path, emb_dir)
    assert r.update_scope == "run"
    p0, p1 = r.answer(EX0), r.answer(EX1)
    assert p0.extra["triples_written"] == 1
    assert BORN in _retrieved(p1)[0] and _sub(p1, 0)["source"] == "triples"
    assert p1.extra["triples_written"] == 0 and len(_guided(llm)) == 1


def test_question_scope_keeps_updates_within_the_question(tmp_path, emb_dir):
    r, llm = _reasoner(tmp_path, emb_dir, update_scope="question")
    n0 = len(r.graph)
    p0 = r.answer(EX0)
    assert p0.extra["triples_written"] == 1 and BORN in _retrieved(p0)[2]  # within the question: seen
    assert len(r.graph) == n0 and tuple(BORN) not in r.graph  # rolled back after it
    p1 = r.answer(EX1)
    assert BORN not in _retrieved(p1)[0] and _sub(p1, 0)["source"] == "passages"
    assert p1.extra["triples_written"] == 1 and len(_guided(llm)) == 2


def _row(pred):
    return {"id": pred.example_id, "extra": dict(pred.extra), "error": pred.error}


def test_a_run_scope_resume_replays_the_kept_prefix_and_refuses_a_gap(tmp_path, emb_dir):
    r, _ = _reasoner(tmp_path, emb_dir)
    p0 = r.answer(EX0)
    g_after = list(r.graph.triples)
    # resume after the first question: the same graph, read from the kept row
    r2, llm2 = _reasoner(tmp_path, emb_dir, done=[_row(p0)])
    assert r2.graph.triples == g_after
    # resume where the first question is to be answered again after the second wrote into G
    p1 = r2.answer(EX1)
    from kgreason.preflight import PreflightError  # told in one line by the app, exit 2

    with pytest.raises(PreflightError, match="update_scope") as e:
        _reasoner(tmp_path, emb_dir, done=[_row(p1)])
    assert "u0" in str(e.value) and len(str(e.value).splitlines()) <= 2
    # question scope: no order dependence, so any resume is fine and nothing is replayed
    r3, _ = _reasoner(tmp_path, emb_dir, done=[_row(p1)], update_scope="question")
    assert tuple(BORN) not in r3.graph


def test_an_unknown_update_scope_is_refused():
    with pytest.raises(ValueError, match="update_scope"):
        SubQRAG(kg=None, llm=ScriptedLLM(rules=[]), update_scope="global")


def test_triples_written_per_question_and_their_total_are_metrics(tmp_path, emb_dir):
    from kgreason.runner.run import summarise

    r, _ = _reasoner(tmp_path, emb_dir, update_scope="question")
    preds = [r.answer(EX0), r.answer(EX1), r.answer(EX1)]
    per, total = METRICS["triples_written"], METRICS["triples_written_total"]
    rows = [{"id": p.example_id, "metrics": {m.name: m.per_example(p, ex) for m in (per, total)}, "extra": p.extra}
            for p, ex in zip(preds, (EX0, EX1, EX1))]
    assert [row["metrics"]["triples_written"] for row in rows] == [1, 1, 1]
    out = summarise(rows, [per, total], 3)
    assert out["metric/triples_written"] == 1.0 and out["metric/triples_written_total"] == 3.0
    # not a SubQRAG row: not applicable (null), never 0
    other = Example(id="x", question="q", answers=("a",))
    from kgreason.types import Prediction

    assert per.per_example(Prediction(example_id="x", answers=()), other) is None


def test_the_default_scope_is_the_papers_continual_update(tmp_path):
    """§2.3: "This above process leverages sub-questions' answering to continually update the
    pre-constructed KG": writes reach later questions (``update_scope: run``) in the composed
    config and the class signature alike; ``question`` is the setting that keeps them in."""
    import inspect

    from conftest import compose_cfg

    assert compose_cfg(["reasoner=subqrag"], tmp_path).reasoner.update_scope == "run"
    assert inspect.signature(SubQRAG).parameters["update_scope"].default == "run"
    assert compose_cfg(["reasoner=subqrag", "ablation=subqrag_no_update"], tmp_path).reasoner["update"] is False


ALL_THREE = [["Alpha", "film by", "Bob Stone"], BORN, ["Zeta", "river in", "Eastland"]]


def test_a_fallback_extracts_from_every_passage_its_answer_read(tmp_path, emb_dir):
    """§2.3: "we retrieve relevant documents and generate the answer based on their context. From
    these documents, new triples T*_new are extracted": every passage the fallback's answer read
    (``passage_top_k``, 3 here) goes to the extraction and may give a triple (issue 57; before,
    only the first 2 did). ``extract_passages=2`` is the ablation ``subqrag_extract_top2``."""
    def run(root, **kw):
        llm = ScriptedLLM(rules=[{"pattern": GUIDED + r" Where was Bob Stone born", "reply": json.dumps(ALL_THREE)},
                                 *_rules()])
        r = SubQRAG(kg=None, llm=llm, index_dir=str(root / "idx"), passage_top_k=3,
                    embedder=Embedder(cache_dir=str(emb_dir)), **kw)
        r.prepare(ExampleSet("docs", [EX1]))
        p = r.answer(EX1)
        read = next(s.data["titles"] for s in p.trace if s.kind == "retrieve" and s.name == "passages")
        return p, read, _guided(llm)

    p, read, (prompt,) = run(tmp_path / "all")
    assert sorted(read) == ["Alpha", "Bob Stone", "Zeta"]
    assert all(f"{t}: " in prompt for t in read)  # every passage read goes to the extraction
    assert sorted(w["passage"] for w in p.extra["write_back"]) == sorted(read)  # and gives its triple
    assert p.extra["triples_written"] == 3
    assert p.extra["pool_size"] == 3  # the pool its fallback read from (retrieval/pool_size, issue 57)
    p2, read2, (prompt2,) = run(tmp_path / "top2", extract_passages=2)
    assert read2 == read and f"{read[2]}: " not in prompt2
    assert sorted(w["passage"] for w in p2.extra["write_back"]) == sorted(read[:2])


def test_extract_passages_defaults_to_every_passage_read(tmp_path):
    from conftest import compose_cfg

    assert compose_cfg(["reasoner=subqrag"], tmp_path).reasoner.extract_passages is None
    assert compose_cfg(["reasoner=subqrag", "ablation=subqrag_extract_top2"], tmp_path / "a").reasoner.extract_passages == 2


def test_the_funnel_counts_the_stages_the_script_drives(tmp_path, emb_dir):
    """EX0: three sub-questions (decomposed), ``#1`` filled in (rewritten), the first answered
    from the graph's triples, the second falling back to the passages and writing one triple
    (Eq. 4), the memory non-empty. EX1 then: one sub-question (not decomposed), answered from the
    triple EX0 wrote, no fallback, nothing written."""
    r, _ = _reasoner(tmp_path, emb_dir)
    assert r.funnel == ("decomposed", "rewritten", "graph_answered", "fell_back", "graph_written", "memory_nonempty")
    p0, p1 = r.answer(EX0), r.answer(EX1)
    assert p0.extra["funnel"] == dict.fromkeys(r.funnel, True)
    assert p1.extra["funnel"] == {"decomposed": False, "rewritten": False, "graph_answered": True,
                                  "fell_back": False, "graph_written": False, "memory_nonempty": True}
    # ablations switch their stage off: no decomposition, no rewriting, no write-back
    r2, _ = _reasoner(tmp_path, emb_dir, update=False, rewriting=False, update_scope="question")
    f = r2.answer(EX0).extra["funnel"]
    assert (f["decomposed"], f["rewritten"], f["fell_back"], f["graph_written"]) == (True, False, True, False)
