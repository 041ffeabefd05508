"""ToG beam search: the beam never exceeds W with every pruning backend; call accounting."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kgreason.llm.parsing import parse_candidate_scores
from kgreason.llm.scripted import ScriptedLLM
from kgreason.reasoners.tog import ToG, top_w


def _llm(decide="No", prune=""):
    return ScriptedLLM(rules=[
        {"pattern": r"^TASK: score", "reply": prune},
        {"pattern": r"^TASK: decide", "reply": decide},
        {"pattern": r"^TASK: answer", "reply": "Answer: unknown"},
    ])


def _wide_question(world):
    # a 2-hop question from an actor: many relations and neighbours at each depth
    return next(q for q in world.questions if q.gold_paths[0] == ("~film.film.starring", "film.film.directed_by"))


@pytest.mark.parametrize("prune", ["llm", "bm25", "embedding"])
@pytest.mark.parametrize("width", [1, 2, 3])
def test_beam_never_exceeds_width(world, prune, width):
    llm = _llm(decide="No", prune="film.film.starring (backward): 0.9\nfilm.film.starring: 0.8\n"
                                  "people.person.place_of_birth (backward): 0.7")
    r = ToG(kg=world.kg, llm=llm, width=width, depth=3, prune=prune)
    pred = r.answer(_wide_question(world))
    assert pred.extra["beam_sizes"] and max(pred.extra["beam_sizes"]) <= width
    rel_steps = [s for s in pred.trace if s.kind == "prune"]
    beam_steps = [s for s in pred.trace if s.kind == "beam"]
    assert any(s.data["candidates"] > width for s in rel_steps)  # pruning actually pruned
    if prune == "llm":  # the scripted scores lead to films and their casts: many entities
        assert any(s.data["candidates"] > width for s in beam_steps)
    assert all(len(s.data["kept"]) <= width for s in rel_steps + beam_steps)
    # calls: llm pruning = 2 per depth; each depth 1 reasoning call; 1 answer
    per_depth = 3 if prune == "llm" else 1
    assert len(llm.calls) == pred.extra["llm_calls"] == per_depth * pred.extra["depth_reached"] + 1


def test_llm_pruning_follows_the_scores_to_the_answer(world):
    q = next(q for q in world.questions if q.gold_paths[0] == ("film.film.directed_by",))
    gold = q.answers[0]
    llm = ScriptedLLM(rules=[
        {"pattern": r"^TASK: score relations", "reply": "film.film.directed_by: 0.9\nfilm.film.genre: 0.1"},
        {"pattern": r"^TASK: score entities", "reply": f"{gold}: 1.0"},
        {"pattern": r"^TASK: decide", "reply": "Yes"},
        {"pattern": r"^TASK: answer.*?-\[film\.film\.directed_by\]-> ([^\n]+)", "reply": "Answer: {0}"},
    ])
    pred = ToG(kg=world.kg, llm=llm, width=1, depth=3, prune="llm").answer(q)
    assert pred.answers == (gold,)
    assert pred.extra["beam_sizes"] == [1] and gold in pred.extra["retrieved"]
    assert len(llm.calls) == 4


@pytest.mark.parametrize("prune", ["bm25", "embedding"])
def test_lexical_and_embedding_pruning_pick_the_asked_relation(world, prune):
    q = next(q for q in world.questions if q.gold_paths[0] == ("film.film.directed_by",))
    pred = ToG(kg=world.kg, llm=_llm(decide="Yes"), width=1, depth=1, prune=prune).answer(q)
    kept = [s for s in pred.trace if s.kind == "prune"][0].data["kept"]
    assert kept == ["film.film.directed_by"]
    assert set(q.answers) <= set(pred.extra["retrieved"])


def test_bm25_scores_match_rank_bm25():
    from rank_bm25 import BM25Okapi

    from kgreason.reasoners.base import Trace
    from kgreason.reasoners.tog import Pruner, tokens

    names = ["film.film.directed_by", "people.person.place_of_birth", "film.film.genre"]
    got = Pruner("bm25").scores("who directed the film", names, names, Trace(), "relations")
    ref = BM25Okapi([tokens(n) for n in names]).get_scores(["who", "directed", "the", "film"])
    assert np.allclose(got, ref) and int(np.argmax(got)) == 0


def test_parse_candidate_scores_formats():
    names = ["a.b", "a.b (backward)", "c"]
    assert parse_candidate_scores("{a.b (Score: 0.7)}\n{c (Score: 0.3)}", names).value == [0.7, 0.0, 0.3]
    assert parse_candidate_scores('{"c": 0.5, "a.b": 0.25}', names).value == [0.25, 0.0, 0.5]
    assert parse_candidate_scores("[0.1, 0.2, 0.3]", names).value == [0.1, 0.2, 0.3]
    assert not parse_candidate_scores("no idea", names).ok
    assert top_w(np.array([0.2, 0.5, 0.5, 0.1]), 2).tolist() == [1, 2]


def test_bad_backend_is_rejected(world):
    with pytest.raises(ValueError, match="llm \\| bm25 \\| embedding"):
        ToG(kg=world.kg, llm=_llm(), prune="tfidf")


def test_run_end_to_end_with_ablations(tmp_path):
    from conftest import compose_cfg

    from kgreason.run import run

    for abl in ("none", "tog_bm25", "tog_embedding"):
        out = tmp_path / abl
        cfg = compose_cfg(["reasoner=tog", f"ablation={abl}", "llm=scripted", "dataset.limit=2",
                           "tracking=none"], out)
        res = run(cfg, out)
        assert res.metrics["run/error_rate"] == 0.0
        rows = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
        assert len(rows) == 2 and all(max(r["extra"]["beam_sizes"]) <= cfg.reasoner.width for r in rows)
