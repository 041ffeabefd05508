"""Empty retrieval, answered as each method's source does (issue 43, item 1; docs/reasoners.md,
"Empty retrieval"): nothing linked / nothing retrieved never means a silent empty answer by
default. rag, rag_text, ReKnoS and SGR ask the IO baseline's very request (their papers state no
other path); ToG answers as its authors' release does: its own chain-of-thought prompt without
knowledge when no topic links, its answer prompt with no triplet when the beam empties at depth 1
(tests/reasoners/test_tog_release.py). Every KG reasoner sets ``extra["retrieval_empty"]``
(False when it retrieved something), the flag ``retrieval/empty_rate`` averages.
``on_empty: abstain`` (ablation ``on_empty_abstain``) keeps the earlier behaviour: no call, no
answer.
"""

from __future__ import annotations

import json

import pytest

from kgreason.kg.store import KG
from kgreason.llm.scripted import ScriptedLLM
from kgreason.reasoners.io import IO
from kgreason.reasoners.reknos import ReKnoS
from kgreason.reasoners.sgr import SGR
from kgreason.retrieval.scipy_engine import ScipyRetriever
from kgreason.types import Example

from conftest import compose_cfg

IO_RULE = {"pattern": r"Reply with only a JSON list", "reply": '["Harbourside"]'}
UNLINKED = Example(id="u", question="Which harbour does the Kell ferry sail from?", topic_entities=("No Such Thing",))


def _io_request(ex):
    llm = ScriptedLLM(rules=[IO_RULE])
    IO(llm=llm).answer(ex)
    return llm.calls


@pytest.mark.parametrize("make", [
    lambda kg, llm, **kw: ReKnoS(kg=kg, llm=llm, **kw),
    # topics=dataset: V_q is the dataset's (unlinkable) topic. SGR's Eq. 2 call (S_q, before any KG
    # read) always comes first, then this same IO request (tests/reasoners/test_sgr.py,
    # test_vq_that_links_nothing_takes_the_empty_path_not_the_dataset_topics)
    lambda kg, llm, **kw: SGR(kg=kg, retriever=ScipyRetriever(kg), llm=llm, cypher=False, topics="dataset",
                              max_reasks=0, **kw),
], ids=["reknos", "sgr"])
def test_nothing_linked_is_answered_with_the_io_prompt(make, world):
    def after_eq2(calls):  # SGR's Eq. 2 call is the question's first, whatever links
        return calls[1:] if isinstance(reasoner, SGR) else calls

    llm = ScriptedLLM(rules=[IO_RULE])
    reasoner = make(world.kg, llm)
    pred = reasoner.answer(UNLINKED)
    assert after_eq2(llm.calls) == _io_request(UNLINKED)  # one call: the IO row's request
    assert pred.answers == ("Harbourside",) and pred.extra["retrieval_empty"] is True
    quiet = ScriptedLLM(rules=[IO_RULE])
    reasoner = make(world.kg, quiet, on_empty="abstain")
    pred2 = reasoner.answer(UNLINKED)
    assert after_eq2(quiet.calls) == [] and pred2.answers == () and pred2.extra["retrieval_empty"] is True


def test_reknos_with_no_super_relation_to_follow_answers_with_the_io_prompt():
    """Linked, but no candidate super-relation at step 1 (here: the topic is only ever a tail and
    backward steps are off): the paper's "empty candidate set"; the IO prompt, not an answer
    prompt over "(no paths found)"."""
    kg = KG.from_triples([("Kell", "ferry.route.port", "Harbourside"), ("Lone Rock", "ferry.route.port", "Harbourside")])
    ex = Example(id="x", question="Which ferries use Harbourside?", topic_entities=("Harbourside",))
    llm = ScriptedLLM(rules=[IO_RULE])
    pred = ReKnoS(kg=kg, llm=llm, use_backward=False).answer(ex)
    assert pred.extra["retrieval_empty"] is True and pred.answers == ("Harbourside",)
    assert llm.calls == _io_request(ex)


def test_reknos_and_sgr_flag_a_question_that_retrieved(world):
    q = next(q for q in world.questions if q.hops == 1)
    pred = ReKnoS(kg=world.kg, llm=ScriptedLLM(default="Answer: x")).answer(q)
    assert pred.extra["retrieval_empty"] is False


@pytest.mark.slow
def test_cwq_on_the_freebase_slice_rag_calls_once_on_every_question(tmp_path, shared_data, monkeypatch):
    """issue 43: on CWQ with the Freebase slice about half the topics do not link; rag used to
    make no call and predict "" there. Now every question gets one call and a non-empty answer,
    and the questions with nothing linked carry retrieval_empty (scripted model)."""
    from kgreason.runner.run import run

    monkeypatch.setenv("KGREASON_DATA", str(shared_data))
    cfg = compose_cfg(["dataset=cwq", "kg=freebase_slice", "reasoner=rag", "llm=scripted",
                       "llm.default='[\"Paris\"]'", "dataset.limit=30", "preflight.min_link_rate=0",
                       "reasoner.hops=1", "reasoner.max_candidates=100", "tracking=none",
                       "reports.hop_distribution=false",
                       "embedder.kg_store=null"], tmp_path)  # not the slice's 310k-fact store: calls are counted
    res = run(cfg, tmp_path)
    rows = [json.loads(x) for x in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 30 and res.metrics["run/error_rate"] == 0.0
    assert all(r["extra"]["llm_calls"] == 1 for r in rows)
    assert all(r["answers"] and r["answers"][0] for r in rows)
    unlinked = [r for r in rows if r["extra"].get("link_failed")]
    assert unlinked and all(r["extra"]["retrieval_empty"] is True for r in unlinked)
    assert all(r["extra"]["retrieval_empty"] is (r["extra"]["kept"] == 0) for r in rows if r not in unlinked)
    assert all(r["trace"][-1]["name"] == "answer_without_retrieval" for r in unlinked)


def test_llm_free_kg_reasoners_flag_empty_retrieval(world):
    """retrieval_only (no LLM: nothing to answer with) still reports the flag the empty rate reads."""
    from kgreason.reasoners.retrieval_only import RetrievalOnly

    r = RetrievalOnly(kg=world.kg, retriever=ScipyRetriever(world.kg), llm=None)
    assert r.answer(UNLINKED).extra["retrieval_empty"] is True
    assert r.answer(next(q for q in world.questions if q.hops == 1)).extra["retrieval_empty"] is False
