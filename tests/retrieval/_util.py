"""Helpers shared by the retrieval tests (not a test module)."""

from __future__ import annotations

import numpy as np

from kgreason.kg.store import KG


def random_kg(rng: np.random.Generator, n_max: int = 12, m_max: int = 30, r_max: int = 3) -> KG:
    """A random small multigraph (duplicates, self-loops and isolated entities possible)."""
    n = int(rng.integers(2, n_max + 1))
    m = int(rng.integers(0, m_max + 1))
    R = int(rng.integers(1, r_max + 1))
    return KG(rng.integers(0, n, m), rng.integers(0, R, m), rng.integers(0, n, m),
              [f"e{i}" for i in range(n)], [f"r{i}" for i in range(R)], name="random")


def assert_same(a, b, ctx=""):
    """Subgraph equality as required by the engine contract."""
    assert a.seeds.tolist() == b.seeds.tolist(), ctx
    assert a.timed_out == b.timed_out, ctx
    assert len(a.entities_by_hop) == len(b.entities_by_hop), ctx
    for h, (x, y) in enumerate(zip(a.entities_by_hop, b.entities_by_hop)):
        assert sorted(x.tolist()) == sorted(y.tolist()), f"{ctx} entities hop {h + 1}"
    assert len(a.triples_by_hop) == len(b.triples_by_hop), ctx
    for h, (x, y) in enumerate(zip(a.triples_by_hop, b.triples_by_hop)):
        # multigraph: duplicate triples are distinct ids, so compare as multisets
        assert sorted(map(tuple, x.tolist())) == sorted(map(tuple, y.tolist())), f"{ctx} triples hop {h + 1}"
    if not a.paths_truncated and not b.paths_truncated:
        assert set(a.paths) == set(b.paths), f"{ctx} paths"
