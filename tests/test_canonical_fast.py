"""canonical_triples: the lexsort over per-KG key ranks gives the Python sort's order (issue 42:
rag's candidate preparation was a third of its non-LLM time on the Freebase slice)."""

from __future__ import annotations

import numpy as np

from kgreason.reasoners.base import canonical_triples, entity_key


def test_lexsort_order_equals_the_key_sort(world):
    kg = world.kg
    rng = np.random.default_rng(0)
    tri = kg.triples[rng.choice(kg.n_triples, 3000, replace=True)]  # repeats included
    rows = tri.tolist()
    ref = sorted(range(len(rows)), key=lambda i: (entity_key(kg, rows[i][0]), str(kg.relation_names[rows[i][1]]),
                                                  entity_key(kg, rows[i][2])))
    assert canonical_triples(kg, tri).tolist() == tri[np.asarray(ref)].tolist()
