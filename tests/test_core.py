"""KG store, run-dir store and secret scrubbing."""

from __future__ import annotations

import json

import numpy as np
import pytest


def test_kg_indexes_and_incidence(tiny_kg):
    kg = tiny_kg
    assert (kg.n_entities, kg.n_relations, kg.n_triples) == (6, 2, 5)
    a = kg.entity_id("A")
    assert sorted(kg.entity_names[kg.tails[t]] for t in kg.out_triples(a)) == ["B", "C"]
    assert sorted(kg.entity_names[kg.heads[t]] for t in kg.in_triples(kg.entity_id("B"))) == ["A", "C"]
    # SUB·OBJ is the entity adjacency (LogosKG Eq. 4)
    adj = (kg.SUB @ kg.OBJ).toarray()
    for h, r, t in kg.triples:
        assert adj[h, t] >= 1
    assert adj.sum() == kg.n_triples
    assert kg.REL.sum() == kg.n_triples
    assert kg.find_entity("a") == a and kg.find_entity("nope") == -1


def test_kg_save_load_roundtrip(tmp_path, embedded_kg):
    from kgreason.kg.store import KG

    embedded_kg.save(tmp_path / "kg")
    kg2 = KG.load(tmp_path / "kg", mmap=True)
    assert not kg2.heads.flags.owndata  # a view on the memory-mapped file, not a copy
    np.testing.assert_array_equal(kg2.triples, embedded_kg.triples)
    assert kg2.entity_names == embedded_kg.entity_names
    assert kg2.type_of(5) == embedded_kg.type_of(5)


def test_kg_rejects_out_of_range_ids():
    from kgreason.kg.store import KG

    with pytest.raises(ValueError, match="tail id out of range"):
        KG(np.array([0]), np.array([0]), np.array([5]), ["a", "b"], ["r"])


def test_world_is_deterministic():
    from kgreason.kg.embedded import make_world

    a, b = make_world.__wrapped__(3), make_world.__wrapped__(3)
    assert a.questions == b.questions and a.corpus == b.corpus
    assert np.array_equal(a.kg.triples, b.kg.triples)
    c = make_world.__wrapped__(4)
    assert c.kg.entity_names != a.kg.entity_names


def test_world_questions_are_answerable_from_full_world(world):
    import networkx as nx

    g = nx.MultiDiGraph()
    for h, r, t in world.full_triples:
        g.add_edge(h, t, key=r)
    for q in world.questions[::7]:
        (path,) = q.gold_paths
        cur = {q.topic_entities[0]}
        for step in path:
            nxt = set()
            for e in cur:
                if step.startswith("~"):
                    nxt |= {u for u, _, k in g.in_edges(e, keys=True) if k == step[1:]}
                else:
                    nxt |= {v for _, v, k in g.out_edges(e, keys=True) if k == step}
            cur = nxt
        assert set(q.answers) == cur - {q.topic_entities[0]}
    assert {q.hops for q in world.questions} == {1, 2, 3}
    assert all(p.diagnoses and p.findings for p in world.patients)


def test_prediction_store_truncates_torn_line(tmp_path):
    from kgreason.runs import PredictionStore

    p = tmp_path / "p.jsonl"
    s = PredictionStore(p)
    s.append({"id": "a", "x": 1})
    s.append({"id": "b", "x": 2})
    p.write_text(p.read_text() + '{"id": "c", "x"')
    s2 = PredictionStore(p)
    assert "a" in s2 and "b" in s2 and "c" not in s2
    assert p.read_text().count("\n") == 2
    s2.append({"id": "c", "x": 3})
    assert [json.loads(x)["id"] for x in p.read_text().splitlines()] == ["a", "b", "c"]


def test_scrub_secrets():
    from omegaconf import OmegaConf

    from kgreason.runs import scrub_secrets

    cfg = OmegaConf.create({"llm": {"api_key": "sk-123", "api_key_env": "OPENAI_API_KEY", "model": "m"},
                            "db": {"password": "pw"}})
    out = scrub_secrets(cfg)
    assert out["llm"]["api_key"] == "<redacted>" and out["db"]["password"] == "<redacted>"
    assert out["llm"]["api_key_env"] == "OPENAI_API_KEY" and out["llm"]["model"] == "m"


def test_subgraph_triples_union():
    from kgreason.types import Subgraph

    s = Subgraph(seeds=np.array([0]), entities_by_hop=[np.array([1]), np.array([2])],
                 triples_by_hop=[np.array([[0, 0, 1]]), np.array([[1, 0, 2], [0, 0, 1]])])
    assert s.triples.tolist() == [[0, 0, 1], [1, 0, 2]]
    assert s.entities().tolist() == [1, 2]
