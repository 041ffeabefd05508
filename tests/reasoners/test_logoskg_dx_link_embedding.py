"""LogosKG-Dx with ``link_embedding=true``: a mention that exact/normalised linking misses is
linked to the nearest KG label through the run's embedder (it used to pass the bare embedder
to ``link_mentions``, which needs ``nearest()``, and failed on the first unlinked mention)."""

from __future__ import annotations

import zlib

import numpy as np

from kgreason.llm.scripted import ScriptedLLM
from kgreason.reasoners.logoskg_dx import LogosKGDx
from kgreason.retrieval.scipy_engine import ScipyRetriever


class TrigramEmbedder:
    """Stand-in for MiniLM: hashed character-trigram counts, L2-normed (has only ``encode``)."""

    def encode(self, texts):
        out = np.zeros((len(texts), 512), dtype=np.float32)
        for i, t in enumerate(texts):
            s = f"  {t.lower()} "
            for j in range(len(s) - 2):
                out[i, zlib.crc32(s[j : j + 3].encode()) % 512] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


def _typo(name: str) -> str:
    """Swap two inner letters of the longest word."""
    words = name.split()
    k = max(range(len(words)), key=lambda i: len(words[i]))
    w = words[k]
    words[k] = w[0] + w[2] + w[1] + w[3:] if len(w) > 3 else w + "x"
    return " ".join(words)


def test_unlinked_mention_falls_back_to_the_injected_embedder(world):
    kg = world.kg
    disease = kg.entity_names[int(kg.entities_of_type("disease")[0])]
    emb = TrigramEmbedder()
    r = LogosKGDx(kg=kg, retriever=ScipyRetriever(kg, direction="both"), llm=ScriptedLLM(),
                  link_embedding=True, link_threshold=0.5, embedder=emb)
    assert r.linker.embedder is emb
    res = r._link([_typo(disease), disease])
    assert res.failed == [] and res.ids == [kg.entity_id(disease)]
    methods = {mention: how for mention, _, how in res.linked}
    assert methods[disease] == "exact" and methods[_typo(disease)].startswith("embedding:")
    off = LogosKGDx(kg=kg, retriever=ScipyRetriever(kg, direction="both"), llm=ScriptedLLM(), embedder=emb)
    assert off.linker is None and off._link([_typo(disease)]).failed == [_typo(disease)]
