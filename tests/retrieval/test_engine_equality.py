"""Every engine equals the NetworkX reference on random multigraphs, the embedded KG and MetaQA."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from kgreason.kg.store import KG
from kgreason.retrieval.graphblas_engine import GraphBLASRetriever
from kgreason.retrieval.igraph_engine import IgraphRetriever
from kgreason.retrieval.networkx_engine import NetworkXRetriever
from kgreason.retrieval.numba_engine import NumbaRetriever
from kgreason.retrieval.partitioned import PartitionedRetriever
from kgreason.retrieval.scipy_engine import ScipyRetriever
from kgreason.retrieval.torch_engine import TorchRetriever

from ._util import assert_same, random_kg

ENGINES = {
    "scipy": lambda kg, **kw: ScipyRetriever(kg, **kw),
    "numba": lambda kg, **kw: NumbaRetriever(kg, **kw),
    "torch": lambda kg, **kw: TorchRetriever(kg, device="cpu", **kw),
    "torch_spmm": lambda kg, **kw: TorchRetriever(kg, device="cpu", kernel="spmm", **kw),
    "igraph": lambda kg, **kw: IgraphRetriever(kg, **kw),
    "graphblas": lambda kg, **kw: GraphBLASRetriever(kg, **kw),
    "partitioned": lambda kg, **kw: PartitionedRetriever(kg, n_partitions=3, cache_size=1, **kw),
    # the partitioned engine's other local-expansion backends (LogosKG Table 3, Exp. 4)
    "partitioned_numba": lambda kg, **kw: PartitionedRetriever(kg, n_partitions=3, cache_size=1, backend="numba", **kw),
    "partitioned_scipy": lambda kg, **kw: PartitionedRetriever(kg, n_partitions=3, cache_size=1, backend="scipy", **kw),
    "partitioned_torch": lambda kg, **kw: PartitionedRetriever(kg, n_partitions=3, cache_size=1, backend="torch", **kw),
}
SEMANTICS = ["within", "exact", "walk"]
DIRECTIONS = ["out", "in", "both"]


@pytest.mark.parametrize("engine", list(ENGINES))
def test_random_multigraphs_equal_networkx(engine):
    """~100 random graphs × every semantics × direction × hops 1..4, with and without a relation
    filter: entities per hop, triples per hop and (untruncated) paths equal NetworkX."""
    rng = np.random.default_rng(1234)
    for case in range(100):
        kg = random_kg(rng)
        sem = SEMANTICS[case % 3]
        d = DIRECTIONS[(case // 3) % 3]
        kw = dict(semantics=sem, direction=d, max_paths=200)
        ref = NetworkXRetriever(kg, **kw)
        eng = ENGINES[engine](kg, **kw)
        seeds = rng.choice(kg.n_entities, size=int(rng.integers(1, 4)), replace=True).tolist()
        rels = None if case % 2 == 0 else sorted(set(rng.integers(0, kg.n_relations, 2).tolist()))
        for hops in range(1, 5):
            ctx = f"case={case} {sem}/{d} hops={hops} seeds={seeds} rels={rels}"
            assert_same(eng.retrieve(seeds, hops, rels), ref.retrieve(seeds, hops, rels), ctx)


def test_paths_hand_checked(tiny_kg):
    """A --r--> B --s--> D ; A --s--> C --r--> B: within/out from A, 2 hops reaches D by one path."""
    A, B, C, D = (tiny_kg.entity_id(x) for x in "ABCD")
    r, s = tiny_kg.relation_id("r"), tiny_kg.relation_id("s")
    for eng in [NetworkXRetriever(tiny_kg, direction="out")] + [f(tiny_kg, direction="out") for f in ENGINES.values()]:
        sub = eng.retrieve([A], 2)
        assert [x.tolist() for x in sub.entities_by_hop] == [sorted([B, C]), [D]], eng
        assert set(sub.paths) == {(A, r, B, s, D)}, eng
        walk = type(eng)(tiny_kg, direction="out", semantics="walk", **({"n_partitions": 3} if isinstance(eng, PartitionedRetriever) else {}))
        assert sorted(walk.retrieve([A], 2).entities_by_hop[1].tolist()) == sorted([B, D]), eng


@pytest.mark.parametrize("engine", list(ENGINES))
def test_embedded_kg_equal_networkx(embedded_kg, engine):
    """The embedded world's KG, hops 1..5, both directions: answer sets identical (Jaccard 1.0)."""
    rng = np.random.default_rng(7)
    seed_sets = [rng.choice(embedded_kg.n_entities, size=int(rng.integers(1, 4)), replace=False).tolist() for _ in range(4)]
    for sem, d in [("within", "both"), ("exact", "out"), ("walk", "in")]:
        kw = dict(semantics=sem, direction=d, max_paths=0)
        ref = NetworkXRetriever(embedded_kg, **kw)
        eng = ENGINES[engine](embedded_kg, **kw) if engine != "partitioned" else PartitionedRetriever(
            embedded_kg, n_partitions=4, cache_size=2, **kw)
        for seeds in seed_sets:
            for hops in (1, 2, 3, 4, 5):
                assert_same(eng.retrieve(seeds, hops), ref.retrieve(seeds, hops), f"{sem}/{d} {seeds} k={hops}")


def _metaqa_kg(path) -> KG:
    triples = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            parts = line.rstrip("\n").split("|")
            if len(parts) == 3:
                triples.append(tuple(parts))
    return KG.from_triples(triples, name="metaqa")


@pytest.mark.slow
def test_metaqa_kb_jaccard_one(shared_data):
    """MetaQA KB (129k triples), hops 1..5: every engine's answer set equals NetworkX's."""
    kb = shared_data / "metaqa" / "kb.txt"
    if not kb.exists():
        pytest.skip(f"{kb} missing")
    kg = _metaqa_kg(kb)
    rng = np.random.default_rng(0)
    seed_sets = [rng.choice(kg.n_entities, size=2, replace=False).tolist() for _ in range(2)]
    kw = dict(semantics="within", direction="both", max_paths=0, return_triples=False)
    ref = NetworkXRetriever(kg, **kw)
    engines = [f(kg, **kw) for f in ENGINES.values()]
    for seeds, hops in itertools.product(seed_sets, (1, 2, 3, 4, 5)):
        want = set(ref.answer_set(ref.retrieve(seeds, hops)).tolist())
        for eng in engines:
            got = set(eng.answer_set(eng.retrieve(seeds, hops)).tolist())
            assert got == want, (type(eng).__name__, seeds, hops)
