"""Entity linking: exact → normalised name/alias → embedding fallback, and link-rate reporting."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from kgreason.embed import Embedder
from kgreason.kg.linking import EmbeddingLinker, link_example, link_mentions, link_rates
from kgreason.types import Example


class TrigramEmbedder:
    """Deterministic stand-in for MiniLM in fast tests: hashed character-trigram counts, L2-normed."""

    def __init__(self, dim: int = 512) -> None:
        self.dim, self.calls = dim, 0

    def encode(self, texts):
        self.calls += 1
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            s = f"  {t.lower()} "
            for j in range(len(s) - 2):
                out[i, zlib.crc32(s[j : j + 3].encode()) % self.dim] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


def _typo(name: str) -> str:
    """Swap two inner letters of the longest word: 'Harbor' → 'Hrabor'."""
    words = name.split()
    k = max(range(len(words)), key=lambda i: len(words[i]))
    w = words[k]
    words[k] = w[0] + w[2] + w[1] + w[3:]
    return " ".join(words)


def test_exact_and_normalised(world):
    kg = world.kg
    films = [n for n in kg.entity_names if world.entity_types.get(n) == "film"][:5]
    people = [n for n in kg.entity_names if world.entity_types.get(n) == "person"][:5]
    mentions = films + [p.upper() for p in people] + [p.replace(" ", "_").lower() for p in people]
    res = link_mentions(kg, mentions)
    assert not res.failed
    methods = [m for _, _, m in res.linked]
    assert methods == ["exact"] * 5 + ["name"] * 10
    assert [kg.entity_names[i] for _, i, _ in res.linked[5:10]] == people


def test_embedding_fallback_with_stub(world):
    kg = world.kg
    people = [n for n in kg.entity_names if world.entity_types.get(n) == "person"][:20]
    typos = [_typo(p) for p in people]
    assert all(kg.find_entity(t) < 0 for t in typos)
    emb = TrigramEmbedder()
    linker = EmbeddingLinker(kg, embedder=emb, entity_type="person")
    res = link_mentions(kg, typos + ["qqqq zzzz xxxx"], embedder=linker, threshold=0.5)
    got = {m: kg.entity_names[i] for m, i, _ in res.linked}
    correct = sum(got.get(t) == p for t, p in zip(typos, people))
    assert correct >= 16  # trigram overlap recovers most single transpositions
    assert res.failed == ["qqqq zzzz xxxx"]
    calls = emb.calls
    linker.nearest(["another mention"])
    assert emb.calls == calls + 1  # label matrix cached: only the mention is encoded
    assert linker.nearest([]) == []


def test_link_rates_and_example(world):
    kg = world.kg
    q = world.questions[0]
    ex_ok = Example(id="a", question="?", topic_entities=q.topic_entities)
    ex_name = Example(id="b", question="?", topic_entities=("m.nope",), topic_names=(q.topic_entities[0].lower(),))
    ex_bad = Example(id="c", question="?", topic_entities=("nothing here",))
    rs = [link_example(kg, e) for e in (ex_ok, ex_name, ex_bad)]
    assert rs[1].ids == [kg.entity_id(q.topic_entities[0])]
    r = link_rates(rs)
    assert r["linked"] == 2 and r["failed"] == 1 and r["rate"] == pytest.approx(2 / 3)
    assert r["by_method"] == {"exact": 1, "name": 1}
    assert r["examples_linked"] == 2 and r["example_rate"] == pytest.approx(2 / 3)
    assert link_rates([])["rate"] == 0.0


@pytest.mark.slow
def test_minilm_resolves_typos(world):
    kg = world.kg
    people = [n for n in kg.entity_names if world.entity_types.get(n) == "person"][:10]
    linker = EmbeddingLinker(kg, Embedder(), entity_type="person")  # 800 labels keeps this a few seconds
    nearest = linker.nearest([_typo(p) for p in people])
    assert all(-1 <= s <= 1.0001 for _, s in nearest)
    assert sum(kg.entity_names[i] == p for (i, _), p in zip(nearest, people)) >= 7
    res = link_mentions(kg, [_typo(people[0]), _typo(people[1])] + [people[2].lower()], embedder=linker, threshold=0.6)
    rate = link_rates([res])
    assert rate["by_method"].get("name") == 1
    assert rate["by_method"].get("embedding", 0) >= 1
    emb_hits = [(m, kg.entity_names[i]) for m, i, meth in res.linked if meth.startswith("embedding")]
    assert any(name in people[:2] for _, name in emb_hits)


def test_link_example_pairs_ids_with_names(world):
    kg = world.kg
    a, b = [n for n in kg.entity_names if world.entity_types.get(n) == "film"][:2]
    ex = Example(id="x", question="?", topic_entities=(a, "m.missing"), topic_names=("ignored", b.upper()))
    r = link_example(kg, ex)
    assert r.ids == [kg.entity_id(a), kg.entity_id(b)]
    assert [m for _, _, m in r.linked] == ["exact", "name"] and r.failed == []
    ex2 = Example(id="y", question="?", topic_entities=("m.1", "m.2"), topic_names=("nope", "nada"))
    r2 = link_example(kg, ex2)
    assert r2.failed == ["m.1", "m.2"] and link_rates([r2])["linked"] == 0
    only_names = Example(id="z", question="?", topic_names=(a.lower(),))
    assert link_example(kg, only_names).ids == [kg.entity_id(a)]

