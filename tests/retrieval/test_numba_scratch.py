"""The Numba engine's compiled hop loop on per-thread, generation-stamped scratch (issue 22):
equal to NetworkX for every semantics × direction × relation filter, also when queries run
concurrently from several threads on one retriever, across many queries on the same scratch,
across a generation wrap-around, and through ``retrieve_many``."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from kgreason.retrieval.networkx_engine import NetworkXRetriever
from kgreason.retrieval.numba_engine import _GEN_LIMIT, NumbaRetriever

from ._util import assert_same, random_kg

CASES = [(sem, d, filt) for sem in ("within", "exact", "walk") for d in ("out", "in", "both") for filt in (False, True)]


def _queries(rng, kg, n):
    out = []
    for _ in range(n):
        seeds = rng.choice(kg.n_entities, size=int(rng.integers(1, 5)), replace=True).tolist()
        rels = sorted(set(rng.integers(0, kg.n_relations, 2).tolist())) if rng.random() < 0.5 else None
        out.append((seeds, int(rng.integers(1, 5)), rels))
    return out


@pytest.mark.parametrize("sem,d,filt", CASES)
def test_compiled_loop_equals_networkx(sem, d, filt):
    """40 random multigraphs per (semantics, direction, filter); several queries per graph on one
    retriever, so the stamps of earlier queries must never leak into later ones."""
    rng = np.random.default_rng(hash((sem, d, filt)) % 2**32)
    for case in range(40):
        kg = random_kg(rng, n_max=15, m_max=40)
        kw = dict(semantics=sem, direction=d, max_paths=300)
        ref, eng = NetworkXRetriever(kg, **kw), NumbaRetriever(kg, **kw)
        for seeds, hops, _ in _queries(rng, kg, 6):
            rels = sorted(set(rng.integers(0, kg.n_relations, 2).tolist())) if filt else None
            assert_same(eng.retrieve(seeds, hops, rels), ref.retrieve(seeds, hops, rels),
                        f"case={case} {sem}/{d} seeds={seeds} hops={hops} rels={rels}")


@pytest.mark.parametrize("sem,d", [("within", "both"), ("exact", "out"), ("walk", "in"), ("walk", "both")])
def test_concurrent_threads_equal_networkx(sem, d):
    """Eight threads hammer one retriever with different queries at once: every answer equals
    NetworkX, and each thread got its own scratch (no shared stamp array)."""
    rng = np.random.default_rng(99)
    kg = random_kg(rng, n_max=60, m_max=300, r_max=4)
    kw = dict(semantics=sem, direction=d, max_paths=100)
    ref, eng = NetworkXRetriever(kg, **kw), NumbaRetriever(kg, **kw)
    qs = _queries(rng, kg, 400)
    want = [ref.retrieve(*q) for q in qs]
    scratch_ids = set()
    lock = threading.Lock()

    def work(i):
        got = eng.retrieve(*qs[i])
        with lock:
            scratch_ids.add(id(eng._scratch().vis))
        return got

    with ThreadPoolExecutor(max_workers=8) as pool:
        got = list(pool.map(work, range(len(qs))))
    for q, a, b in zip(qs, got, want):
        assert_same(a, b, f"{sem}/{d} {q}")
    assert len(scratch_ids) > 1  # threads did not share one buffer


def test_retrieve_many_equals_single_queries():
    rng = np.random.default_rng(5)
    kg = random_kg(rng, n_max=40, m_max=150)
    for sem, d in [("within", "both"), ("walk", "out"), ("exact", "in")]:
        eng = NumbaRetriever(kg, semantics=sem, direction=d, max_paths=50)
        ref = NetworkXRetriever(kg, semantics=sem, direction=d, max_paths=50)
        sets = [rng.choice(kg.n_entities, size=3).tolist() for _ in range(20)]
        for a, s in zip(eng.retrieve_many(sets, 3, [0]), sets):
            assert_same(a, ref.retrieve(s, 3, [0]), f"{sem}/{d} {s}")


def test_generation_wraparound_rezeroes_scratch():
    """Right before the int32 generations run out the scratch is re-zeroed; answers stay exact."""
    rng = np.random.default_rng(3)
    kg = random_kg(rng, n_max=20, m_max=60)
    eng = NumbaRetriever(kg, direction="both")
    ref = NetworkXRetriever(kg, direction="both")
    eng.retrieve([0], 2)
    sc = eng._scratch()
    sc.gen = _GEN_LIMIT - 3
    sc.vis[:] = _GEN_LIMIT - 2  # stale stamps that would collide with the next generations
    for seeds in ([0], [1, 2], [3]):
        assert_same(eng.retrieve(seeds, 3), ref.retrieve(seeds, 3), str(seeds))
    assert sc.gen < 100


def test_bad_seed_is_a_clear_error():
    rng = np.random.default_rng(0)
    kg = random_kg(rng)
    with pytest.raises(IndexError, match=r"seed ids must lie in \[0, "):
        NumbaRetriever(kg).retrieve([kg.n_entities], 1)


@pytest.mark.parametrize("sem,d", [("within", "both"), ("walk", "out"), ("exact", "in")])
def test_sorted_and_byte_map_orderings_equal_networkx(sem, d):
    """A 3000-entity graph: the first hops are short runs (sorted), later ones long runs
    (ordered through the byte map); both give sorted ids equal to NetworkX's."""
    from kgreason.kg.store import KG

    rng = np.random.default_rng(11)
    n, m = 3000, 9000
    kg = KG(rng.integers(0, n, m), rng.integers(0, 3, m), rng.integers(0, n, m),
            [f"e{i}" for i in range(n)], ["r0", "r1", "r2"], name="medium")
    eng = NumbaRetriever(kg, semantics=sem, direction=d, max_paths=0)
    ref = NetworkXRetriever(kg, semantics=sem, direction=d, max_paths=0)
    sizes = set()
    for seeds in ([5], [1, 2, 3], rng.integers(0, n, 10).tolist()):
        got = eng.retrieve(seeds, 6)
        assert_same(got, ref.retrieve(seeds, 6), f"{sem}/{d} {seeds}")
        for x in got.entities_by_hop:
            assert np.all(np.diff(x) > 0)
            sizes.add(len(x) * 32 >= n)
        for t in got.triples_by_hop:
            sizes.add(len(t) * 32 >= m)
    assert sizes == {True, False}  # both orderings ran
