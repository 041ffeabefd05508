"""ToG's control flow as the authors' release runs it (IDEA-FinAI/ToG at commit
``7ccbb92e17579f934bb778386230de47eca0ab67``: ``ToG/main_freebase.py``, ``ToG/freebase_func.py``,
``ToG/utils.py``), one test per behaviour, on a scripted model over a small invented KG
(issue 43, item 2). Each test names the release function it follows; docs/reasoners.md names
the commit.
"""

from __future__ import annotations

from kgreason.kg.store import KG
from kgreason.llm.scripted import ScriptedLLM
from kgreason.reasoners.base import load_prompt, render
from kgreason.reasoners.tog import ToG, parse_evaluate_reply
from kgreason.types import Example

from conftest import REPO

RELEASE = "7ccbb92e17579f934bb778386230de47eca0ab67"
P = "registry.package."
WORLD = [
    ("quillmark", P + "maintainer", "Odile Brandt"),
    ("quillmark", P + "published_on", "2021-06-14"),
    ("quillmark", P + "keyword", "markdown"),
    ("quillmark", P + "build_backend", "forgeplate"),
    ("quillmark", P + "source_repository", "odile/quillmark"),
    ("Odile Brandt", "registry.person.employer", "Larkspur Labs"),
]
Q = "Where does the person behind quillmark work?"
EX = Example("q1", Q, topic_entities=("quillmark",))


def _tog(rules, **kw):
    kw.setdefault("width", 2)
    kw.setdefault("depth", 2)
    llm = ScriptedLLM(rules=rules, default="nothing useful")
    return ToG(kg=KG.from_triples(WORLD), llm=llm, **kw), llm


def _quillmark(reply):  # relation pruning for the topic entity (not the prompt's worked example)
    return {"pattern": r"Q: Where does the person behind quillmark work\?\nTopic entity: quillmark\n", "reply": reply}


def _odile(reply):
    return {"pattern": r"Topic entity: Odile Brandt\n", "reply": reply}


TWO = ("1. {registry.package.maintainer (Score: 0.6)}: the person\n"
       "2. {registry.package.published_on (Score: 0.4)}: a date")


def _purposes(pred):
    return [s.name for s in pred.trace if s.kind == "llm"]


def _prompts(llm, task):
    return [r.messages[-1].content for r in llm.calls if r.messages[-1].content.startswith(task)]


def test_the_yes_reply_is_the_answer_with_no_further_call():
    """utils.reasoning: on {Yes} the evaluate reply is the result; main_freebase saves it."""
    r, llm = _tog([_quillmark(TWO),
                   {"pattern": r"^TASK: decide", "reply": "{Yes}. Odile Brandt works at Larkspur Labs. So the answer is {Larkspur Labs}."}])
    pred = r.answer(EX)
    assert pred.answers == ("Larkspur Labs",)
    assert _purposes(pred) == ["prune_relations", "reason"]  # 0 calls after the {Yes}
    assert len(llm.calls) == 2 and pred.extra["end"] == "yes"


def test_half_stop_answers_from_every_triplet_gathered_so_far():
    """freebase_func.half_stop: no candidate at depth 2 → generate_answer with every depth's
    triplets (the depth-1 ones the emptied beam no longer holds)."""
    r, llm = _tog([_quillmark(TWO), _odile("no relation helps"),
                   {"pattern": r"^TASK: decide", "reply": "{No}. More is needed."},
                   {"pattern": r"^TASK: answer the question from", "reply": "Answer: Larkspur Labs"}])
    pred = r.answer(EX)
    assert pred.extra["end"] == "half_stop" and pred.extra["depth_reached"] == 2
    (prompt,) = _prompts(llm, "TASK: answer the question from")
    tail = prompt.split(f"Q: {Q}\n", 1)[1]
    assert "quillmark | registry.package.maintainer | Odile Brandt" in tail
    assert "quillmark | registry.package.published_on | 2021-06-14" in tail
    assert "(no paths found)" not in prompt and pred.answers == ("Larkspur Labs",)
    assert pred.extra["retrieval_empty"] is False


def test_the_reasoning_prompt_accumulates_every_depths_triplets():
    """main_freebase: cluster_chain_of_entities grows by each depth's kept triplets and
    utils.reasoning lists them all: the depth-1 date stays in the depth-2 prompt although its
    path found nothing further."""
    r, llm = _tog([_quillmark(TWO), _odile("1. {registry.person.employer (Score: 1.0)}: the employer"),
                   {"pattern": r"^TASK: decide", "reply": "{No}. More is needed."}])
    pred = r.answer(EX)
    first, second = _prompts(llm, "TASK: decide")
    want = ["quillmark | registry.package.maintainer | Odile Brandt",
            "quillmark | registry.package.published_on | 2021-06-14",
            "Odile Brandt | registry.person.employer | Larkspur Labs"]
    assert first.rstrip().endswith("Knowledge triplets:\n" + "\n".join(want[:2]) + "\nA:")
    assert second.rstrip().endswith("Knowledge triplets:\n" + "\n".join(want) + "\nA:")
    assert pred.extra["beam_sizes"] == [2, 1]  # the date's path left the beam at depth 2


def test_no_topic_entity_gets_the_chain_of_thought_answer_without_knowledge():
    """main_freebase: len(topic_entity) == 0 → generate_without_explored_paths, whose prompt is
    the release's own six-example ``cot_prompt`` (ours: prompts/tog/answer_without_knowledge.txt,
    six examples in that form), not the CoT reasoner's two-example prompt (issue 57)."""
    r, llm = _tog([{"pattern": r"^TASK: answer", "reply": "Step.\nAnswer: Larkspur Labs"}])
    ex = Example("q2", "Where does the person behind nowhere-pkg work?", topic_entities=("nowhere-pkg",))
    pred = r.answer(ex)
    (req,) = llm.calls
    assert req.messages[-1].content == render(load_prompt("tog", "answer_without_knowledge"), question=ex.question)
    assert req.messages[-1].content != render(load_prompt("cot", "answer"), question=ex.question)
    assert [s.data["prompt_id"] for s in pred.trace if s.kind == "llm"] == ["tog/answer_without_knowledge"]
    assert "(no paths found)" not in req.messages[-1].content and "Knowledge" not in req.messages[-1].content
    assert pred.answers == ("Larkspur Labs",) and pred.extra["end"] == "no_topic"
    assert pred.extra["retrieval_empty"] is True
    # the ablation keeps the earlier behaviour's empty answer, with no call at all
    r2, llm2 = _tog([], on_empty="abstain")
    pred2 = r2.answer(ex)
    assert llm2.calls == [] and pred2.answers == () and pred2.extra["retrieval_empty"] is True


def test_a_beam_emptied_at_depth_one_gets_the_answer_prompt_with_no_triplet():
    """main_freebase: no candidate at depth 1 → half_stop → generate_answer with the (empty)
    cluster_chain_of_entities: the release's answer prompt with an empty triplet list (issue 57),
    not its chain-of-thought prompt."""
    r, llm = _tog([_quillmark("no relation helps"), {"pattern": r"^TASK: answer", "reply": "Answer: x"}])
    pred = r.answer(EX)
    assert _purposes(pred) == ["prune_relations", "answer"]
    assert pred.extra["end"] == "half_stop" and pred.extra["retrieval_empty"] is True and pred.answers == ("x",)
    (prompt,) = _prompts(llm, "TASK: answer")
    assert prompt == render(load_prompt("tog", "answer"), question=Q, paths="")
    assert prompt.rstrip().endswith(f"Q: {Q}\nKnowledge triplets:\n\nA:")
    r2, llm2 = _tog([_quillmark("no relation helps")], on_empty="abstain")  # ablation on_empty_abstain
    pred2 = r2.answer(EX)
    assert _purposes(pred2) == ["prune_relations"] and pred2.answers == ()


def test_no_at_depth_d_is_answered_without_knowledge_as_the_release_does():
    """main_freebase: {No} at the last depth leaves flag_printed False → generate_without_explored_paths."""
    rules = [_quillmark(TWO), _odile("1. {registry.person.employer (Score: 1.0)}: the employer"),
             {"pattern": r"^TASK: decide", "reply": "{No}. More is needed."},
             {"pattern": r"^TASK: answer the question step by step", "reply": "Answer: cot"},
             {"pattern": r"^TASK: answer the question from", "reply": "Answer: triplets"}]
    r, llm = _tog(rules)
    pred = r.answer(EX)
    assert pred.extra["end"] == "depth_limit" and _purposes(pred)[-1] == "answer_without_knowledge"
    assert pred.answers == ("cot",)
    assert llm.calls[-1].messages[-1].content == render(load_prompt("tog", "answer_without_knowledge"), question=Q)
    r2, _ = _tog(rules, at_depth_limit="triplets")  # ablation tog_depth_limit_triplets
    assert r2.answer(EX).answers == ("triplets",)


def test_every_relation_the_model_lists_is_kept():
    """freebase_func.clean_relations keeps every {relation (Score: s)} of the reply, more than W."""
    four = "\n".join(f"{i}. {{{P}{r} (Score: 0.25)}}: x" for i, r in
                     enumerate(["maintainer", "published_on", "keyword", "build_backend"], 1))
    rules = [_quillmark(four), {"pattern": r"^TASK: decide", "reply": "{Yes}. So the answer is {y}."}]
    r, _ = _tog(rules, width=2)
    kept = [s for s in r.answer(EX).trace if s.kind == "prune"][0].data["kept"]
    assert len(kept) == 4
    r2, _ = _tog(rules, width=2, cap_relations=True)  # ablation tog_relation_cap_w
    assert len([s for s in r2.answer(EX).trace if s.kind == "prune"][0].data["kept"]) == 2


def test_the_evaluate_reply_is_read_as_the_release_reads_it():
    assert parse_evaluate_reply("{Yes}. So the answer is {Kenyan shilling}.").value == (True, ["Kenyan shilling"])
    assert parse_evaluate_reply("{No}. Not enough; maybe {X}.").value == (False, [])
    assert parse_evaluate_reply("{Yes}. It is Aarhus.\nAnswer: Aarhus").value == (True, ["Aarhus"])
    assert not parse_evaluate_reply("Yes, it is Aarhus.").ok  # no braces: the release reads No


def test_docs_name_the_release_commit_followed():
    text = (REPO / "docs" / "reasoners.md").read_text(encoding="utf-8")
    assert RELEASE in text


def test_the_composed_defaults_are_the_releases_and_the_ablations_the_earlier_behaviour(tmp_path):
    from conftest import compose_cfg

    cfg = compose_cfg(["reasoner=tog"], tmp_path)
    assert (cfg.reasoner.cap_relations, cfg.reasoner.at_depth_limit, cfg.reasoner.on_empty) == (
        False, "without_knowledge", "answer")
    for abl, field, value in [("tog_relation_cap_w", "cap_relations", True),
                              ("tog_depth_limit_triplets", "at_depth_limit", "triplets"),
                              ("on_empty_abstain", "on_empty", "abstain")]:
        assert compose_cfg(["reasoner=tog", f"ablation={abl}"], tmp_path / abl).reasoner[field] == value
    for r in ("rag", "rag_text", "reknos", "sgr"):
        assert compose_cfg([f"reasoner={r}"], tmp_path / r).reasoner.on_empty == "answer"


def test_an_entity_reached_by_two_relations_is_explored_once():
    """main_freebase: after entity_prune the next frontier is ``topic_entity = {entity: name for
    entity in entities_id}``, a dict keyed by entity, so an entity two kept candidates reach is
    explored once at the next depth; both triplets join cluster_chain_of_entities (issue 57)."""
    world = [("quillmark", P + "maintainer", "Odile Brandt"), ("quillmark", P + "author", "Odile Brandt"),
             ("quillmark", P + "published_on", "2021-06-14"),
             ("Odile Brandt", "registry.person.employer", "Larkspur Labs")]
    both = ("1. {registry.package.maintainer (Score: 0.6)}: the person\n"
            "2. {registry.package.author (Score: 0.4)}: the person too")
    llm = ScriptedLLM(rules=[_quillmark(both), _odile("1. {registry.person.employer (Score: 1.0)}: the employer"),
                             {"pattern": r"^TASK: decide", "reply": "{No}. More is needed."}], default="Answer: x")
    pred = ToG(kg=KG.from_triples(world), llm=llm, width=3, depth=2).answer(EX)
    assert len([p for p in _prompts(llm, "TASK: score relations") if "Topic entity: Odile Brandt\n" in p]) == 1
    assert _purposes(pred).count("prune_relations") == 2  # quillmark, then Odile Brandt once
    assert pred.extra["beam_sizes"] == [1, 1]
    beams = [s.data for s in pred.trace if s.kind == "beam"]
    assert beams[0]["kept"] == ["Odile Brandt", "Odile Brandt"] and beams[0]["frontier"] == ["Odile Brandt"]
    assert beams[1]["kept"] == ["Larkspur Labs"] and beams[1]["frontier"] == ["Larkspur Labs"]
    first = _prompts(llm, "TASK: decide")[0]
    assert "quillmark | registry.package.maintainer | Odile Brandt" in first
    assert "quillmark | registry.package.author | Odile Brandt" in first  # both triplets are kept


# ------------------------------------------------------------------ lexical / embedding pruning (issue 72, item 7)
HUB = [(f"m.film{i:02d}", "film.film.starring", "m.actor") for i in range(30)]
HUB += [("m.film07", "film.film.genre", "m.drama"), ("m.actor", "people.person.nationality", "m.usa")]


def _hub_tog(prune, width=3):
    kg = KG.from_triples(HUB)
    return ToG(kg=kg, llm=ScriptedLLM(default="{No}"), prune=prune, width=width, depth=1), kg


def test_lexical_and_embedding_pruning_see_every_neighbour_without_a_sample():
    """main_freebase.py samples ``num_retain_entity`` neighbours of a relation with >= 20 of them
    only inside ``if args.prune_tools == "llm"``: bm25 and SentenceBERT pruning score all 30."""
    for prune in ("bm25", "embedding"):
        r, kg = _hub_tog(prune)
        rel = kg.relation_names.index("film.film.starring")
        assert len(r.explore_entities(kg.entity_id("m.actor"), rel, True)) == 30, prune
    r, kg = _hub_tog("llm")
    rel = kg.relation_names.index("film.film.starring")
    assert len(r.explore_entities(kg.entity_id("m.actor"), rel, True)) == 5  # LLM pruning still samples


def test_lexical_and_embedding_pruning_keep_the_top_w_neighbours_of_each_relation():
    """freebase_func.entity_score: with bm25 (``compute_bm25_similarity(question, candidates,
    args.width)``) or SentenceBERT (``retrieve_top_docs(..., args.width)``) a relation keeps its
    top W neighbours; all-zero scores among them become uniform ``1/W``."""
    from kgreason.reasoners.tog import _Path, _Search
    from kgreason.reasoners.base import Trace

    for prune, width in (("bm25", 2), ("bm25", 4), ("embedding", 3)):
        r, kg = _hub_tog(prune, width)
        actor = kg.entity_id("m.actor")
        rel = kg.relation_names.index("film.film.starring")
        s = _Search.start([actor])
        q = "Which film numbered m.film07 stars the actor?"
        got = r.score_entities(Trace(), q, _Path(actor, actor), rel, True, 1.0, s)
        assert len(got) == width, (prune, width)
        assert len(s.seen_triples) == 30  # every neighbour was looked at
        if prune == "bm25":  # the one neighbour the question names is among the kept, by its score
            best = max(got, key=lambda p: p.score)
            assert kg.entity_names[best.entity] == "m.film07" and best.score > min(p.score for p in got)
    # all-zero lexical scores: uniform over the W kept, in MID order
    r, kg = _hub_tog("bm25", 2)
    actor = kg.entity_id("m.actor")
    got = r.score_entities(Trace(), "zzz", _Path(actor, actor), kg.relation_names.index("film.film.starring"), True,
                           0.5, _Search.start([actor]))
    assert [kg.entity_names[p.entity] for p in got] == ["m.film00", "m.film01"]
    assert [p.score for p in got] == [0.25, 0.25]


# ------------------------------------------------------------------ funnel (issue 72, item 3)
def _funnel(pred):
    return pred.extra["funnel"]


def test_the_funnel_of_a_yes_at_depth_one():
    r, _ = _tog([_quillmark(TWO),
                 {"pattern": r"^TASK: decide", "reply": "{Yes}. So the answer is {Larkspur Labs}."}])
    assert r.funnel == ("topics_linked", "relations_kept_depth1", "entities_kept_depth1", "yes_depth1",
                        "relations_kept_depth2", "entities_kept_depth2", "yes_depth2", "answered_by")
    assert _funnel(r.answer(EX)) == {"topics_linked": True, "relations_kept_depth1": True,
                                     "entities_kept_depth1": True, "yes_depth1": True, "answered_by": "yes"}


def test_the_funnel_of_no_at_depth_one_then_half_stop_at_depth_two():
    r, _ = _tog([_quillmark(TWO), _odile("no relation helps"),
                 {"pattern": r"^TASK: decide", "reply": "{No}. More is needed."},
                 {"pattern": r"^TASK: answer the question from", "reply": "Answer: Larkspur Labs"}])
    assert _funnel(r.answer(EX)) == {
        "topics_linked": True, "relations_kept_depth1": True, "entities_kept_depth1": True, "yes_depth1": False,
        "relations_kept_depth2": False, "entities_kept_depth2": False, "answered_by": "triplets"}


def test_the_funnel_of_the_empty_path_prompts():
    # no topic entity: the release's generate_without_explored_paths
    r, _ = _tog([{"pattern": r"^TASK: answer", "reply": "Answer: x"}])
    ex = Example("q2", "Where does the person behind nowhere-pkg work?", topic_entities=("nowhere-pkg",))
    assert _funnel(r.answer(ex)) == {"topics_linked": False, "answered_by": "without_knowledge"}
    # the beam emptied at depth 1: the answer prompt with no triplet
    r, _ = _tog([_quillmark("no relation helps"), {"pattern": r"^TASK: answer", "reply": "Answer: x"}])
    assert _funnel(r.answer(EX)) == {"topics_linked": True, "relations_kept_depth1": False,
                                     "entities_kept_depth1": False, "answered_by": "no_triplet"}
    r, _ = _tog([_quillmark("no relation helps")], on_empty="abstain")
    assert _funnel(r.answer(EX))["answered_by"] == "abstained"
    # {No} at depth D: without knowledge again
    rules = [_quillmark(TWO), _odile("1. {registry.person.employer (Score: 1.0)}: the employer"),
             {"pattern": r"^TASK: decide", "reply": "{No}. More is needed."}, {"pattern": r"^TASK: answer", "reply": "A"}]
    f = _funnel(_tog(rules)[0].answer(EX))
    assert [f[f"yes_depth{d}"] for d in (1, 2)] == [False, False] and f["entities_kept_depth2"] is True
    assert f["answered_by"] == "without_knowledge"
