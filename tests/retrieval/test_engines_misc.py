"""Timeouts, batched retrieval, LogosKG-Large partitioning/LRU, synthetic KG, GPU parity."""

from __future__ import annotations

import json

from functools import partial

import numpy as np
import pytest

from kgreason.kg.store import KG
from kgreason.kg.synthetic import synthetic_kg, write_synthetic_kg
from kgreason.retrieval.igraph_engine import IgraphRetriever
from kgreason.retrieval.networkx_engine import NetworkXRetriever
from kgreason.retrieval.numba_engine import NumbaRetriever
from kgreason.retrieval.partitioned import LRUCache, PartitionedRetriever, assign_partitions
from kgreason.retrieval.scipy_engine import ScipyRetriever
from kgreason.retrieval.torch_engine import TorchRetriever

from ._util import assert_same, random_kg

ALL = [ScipyRetriever, NumbaRetriever, TorchRetriever, NetworkXRetriever, IgraphRetriever, PartitionedRetriever]


@pytest.mark.parametrize("cls", ALL)
def test_timeout_reported_not_raised(cls):
    kg = synthetic_kg(3000, 30000, seed=3)
    sub = cls(kg, timeout_ms=1e-6, direction="both").retrieve([0, 1, 2], 4)
    assert sub.timed_out is True
    assert sub.hops < 4


@pytest.mark.parametrize("max_paths,return_triples", [(100, True), (0, True), (0, False), (5, False)])
@pytest.mark.parametrize("cls", [TorchRetriever, partial(TorchRetriever, kernel="spmm"), PartitionedRetriever,
                                 ScipyRetriever], ids=["torch", "torch_spmm", "partitioned", "scipy"])
def test_retrieve_many_equals_loop(cls, max_paths, return_triples):
    rng = np.random.default_rng(5)
    for case in range(12):
        kg = random_kg(rng, n_max=15, m_max=40)
        sem = ["within", "exact", "walk"][case % 3]
        d = ["out", "in", "both"][(case // 3) % 3]
        kw = dict(semantics=sem, direction=d, max_paths=max_paths, return_triples=return_triples)
        if cls is TorchRetriever or getattr(cls, "func", None) is TorchRetriever:
            kw["batch_size"] = 3  # several batches, the last one partial
        if cls is PartitionedRetriever:
            kw.update(n_partitions=3, cache_size=1)
        eng = cls(kg, **kw)
        seed_sets = [rng.choice(kg.n_entities, size=int(rng.integers(0, 4)), replace=False).tolist() for _ in range(7)]
        rels = None if case % 2 else [0]
        many = eng.retrieve_many(seed_sets, 3, rels)
        assert len(many) == len(seed_sets)
        for s, got in zip(seed_sets, many):
            assert_same(got, eng.retrieve(s, 3, rels), f"{eng!r} case={case} seeds={s}")


def test_degree_aware_assignment_balances_hubs():
    deg = np.array([100, 90, 5, 5, 0, 80, 1])
    part = assign_partitions(deg, 2)
    # by degree: 0(100)->p0, 1(90)->p1, 5(80)->p1 (90 < 100), 2, 3, 6 -> p0 (105, 110, 111 < 170)
    assert part.tolist() == [0, 1, 0, 0, -1, 1, 0]


def test_partition_routing_and_metadata(tmp_path):
    kg = synthetic_kg(500, 4000, n_relations=7, seed=2)
    eng = PartitionedRetriever(kg, n_partitions=5, cache_size=2, directory=str(tmp_path), direction="both")
    for layout, key in (("by_head", kg.heads), ("by_tail", kg.tails)):
        ent_part = np.load(tmp_path / layout / "entity_partition.npy")
        seen = np.zeros(kg.n_triples, dtype=int)
        for p in range(5):
            z = np.load(tmp_path / layout / f"part_{p:05d}.npz")
            seen[z["tids"]] += 1
            # every triple of the partition belongs to a key entity mapped to this partition
            assert (ent_part[key[z["tids"]]] == p).all()
            assert (z["heads"] == kg.heads[z["tids"]]).all() and (z["tails"] == kg.tails[z["tids"]]).all()
            # local CSR: keys sorted, slices hold exactly that key's triples
            for i, e in enumerate(z["keys"].tolist()):
                sl = z["tids"][z["indptr"][i]:z["indptr"][i + 1]]
                assert sorted(sl.tolist()) == np.flatnonzero(key == e).tolist()
        assert (seen == 1).all()  # every triple in exactly one partition
        has = np.bincount(key, minlength=kg.n_entities) > 0
        assert ((ent_part >= 0) == has).all()
        meta = json.loads((tmp_path / layout / "meta.json").read_text())
        assert sum(meta["partition_triples"]) == kg.n_triples
    assert eng.stats()["loads"] == 0


def test_lru_eviction_order():
    loaded = []
    cache = LRUCache(2, lambda k: loaded.append(k) or k)
    for k in ["a", "b", "a", "c", "b", "a", "a", "d"]:
        cache.get(k)
    # a b | a(hit) | c evicts b | b evicts a | a evicts c | a(hit) | d evicts b
    assert cache.evicted == ["b", "a", "c", "b"]
    assert loaded == ["a", "b", "c", "b", "a", "d"]
    assert (cache.loads, cache.hits, cache.evictions) == (6, 2, 4)
    assert cache.keys() == ["a", "d"]


def test_partitioned_cache_counts_and_batch_reorder(tmp_path):
    """1-hop single-seed queries: the reordered batch loads each needed partition exactly once;
    the same queries in arrival order reload partitions (cache of 1)."""
    kg = synthetic_kg(400, 3000, seed=4)
    kw = dict(n_partitions=6, cache_size=1, direction="out", max_paths=0, directory=str(tmp_path))
    rng = np.random.default_rng(0)
    seed_sets = [rng.choice(400, size=1).tolist() for _ in range(30)]
    batched = PartitionedRetriever(kg, **kw)
    res = batched.retrieve_many(seed_sets, 1)
    looped = PartitionedRetriever(kg, **kw)
    for s, got in zip(seed_sets, res):
        assert_same(got, looped.retrieve(s, 1))
    parts = {int(batched.entity_partition["by_head"][s[0]]) for s in seed_sets} - {-1}
    assert batched.loads == len(parts)
    assert batched.evictions == len(parts) - 1
    assert batched.loads + batched.hits == looped.loads + looped.hits
    assert looped.loads > batched.loads


def test_synthetic_kg_deterministic_and_streaming(tmp_path):
    a, b = synthetic_kg(1000, 20000, n_relations=9, seed=11), synthetic_kg(1000, 20000, n_relations=9, seed=11)
    assert (a.triples == b.triples).all()
    assert a.n_entities == 1000 and a.n_relations == 9 and a.n_triples == 20000
    deg = np.sort(a.degree())[::-1]
    assert deg[:10].mean() > 5 * np.median(deg)  # power law: hubs
    write_synthetic_kg(tmp_path / "kg", 1000, 20000, n_relations=9, seed=11, chunk=20000)
    c = KG.load(tmp_path / "kg")
    assert (c.triples == a.triples).all() and c.entity_names[:2] == ["e0", "e1"]
    write_synthetic_kg(tmp_path / "kg2", 1000, 20000, n_relations=9, seed=11, chunk=3000)
    d = KG.load(tmp_path / "kg2")
    assert d.n_triples == 20000 and int(d.heads.max()) < 1000 and int(d.rels.max()) < 9


def test_synthetic_config_instantiates():
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    cfg = OmegaConf.load("conf/kg/synthetic.yaml")
    kg = instantiate(cfg, n_entities=200, n_triples=1000)
    assert kg.n_triples == 1000


@pytest.mark.parametrize("name", ["numba", "torch", "networkx", "igraph", "partitioned"])
def test_retriever_configs_instantiate(name, tiny_kg):
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    r = instantiate(OmegaConf.load(f"conf/retriever/{name}.yaml"), kg=tiny_kg)
    ref = ScipyRetriever(tiny_kg, direction="both")
    assert_same(r.retrieve([0], 3), ref.retrieve([0], 3), name)


@pytest.mark.gpu
def test_torch_cuda_equals_scipy():
    kg = synthetic_kg(5000, 40000, seed=9)
    rng = np.random.default_rng(1)
    for sem in ("within", "exact", "walk"):
        for d in ("out", "in", "both"):
            gpu = TorchRetriever(kg, device="cuda", semantics=sem, direction=d, max_paths=50)
            ref = ScipyRetriever(kg, semantics=sem, direction=d, max_paths=50)
            seed_sets = [rng.choice(kg.n_entities, size=3, replace=False).tolist() for _ in range(5)]
            for hops in (1, 2, 3):
                for rels in (None, [0, 2, 5]):
                    many = gpu.retrieve_many(seed_sets, hops, rels)
                    for s, got in zip(seed_sets, many):
                        want = ref.retrieve(s, hops, rels)
                        assert_same(got, want, f"{sem}/{d} k={hops} rels={rels}")
                        assert_same(gpu.retrieve(s, hops, rels), want, f"{sem}/{d} k={hops} rels={rels}")


@pytest.mark.gpu
def test_torch_cuda_batched_at_scale_equals_numba():
    """Batches of 50 on a 100k-triple power-law KG with per-hop triples returned and no paths,
    the setting of the GPU speed figure (bench ``torch_cuda@50``)."""
    kg = synthetic_kg(20000, 100000, seed=2)
    rng = np.random.default_rng(3)
    seed_sets = [rng.choice(kg.n_entities, size=int(rng.integers(1, 21)), replace=False).tolist() for _ in range(60)]
    gpu = TorchRetriever(kg, device="cuda", direction="both", max_paths=0, batch_size=50)
    ref = NumbaRetriever(kg, direction="both", max_paths=0)
    for s, got in zip(seed_sets, gpu.retrieve_many(seed_sets, 4)):
        assert_same(got, ref.retrieve(s, 4), f"seeds={s}")


def test_torch_cuda_without_cuda_is_a_clear_error():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(RuntimeError, match=r"device='cuda'.*no CUDA device.*retriever=torch"):
        TorchRetriever(synthetic_kg(50, 100), device="cuda")


@pytest.mark.gpu
def test_partitioned_torch_cuda_backend_equals_numba():
    """LogosKG Table 3's Torch-GPU row: the partitioned engine with its local expansion on the GPU
    answers as the in-memory engine, with and without a relation filter, every direction."""
    from kgreason.retrieval.partitioned import PartitionedRetriever

    kg = synthetic_kg(5000, 40000, seed=9)
    rng = np.random.default_rng(4)
    seed_sets = [rng.choice(kg.n_entities, size=int(rng.integers(1, 21)), replace=False).tolist() for _ in range(8)]
    for d in ("out", "in", "both"):
        gpu = PartitionedRetriever(kg, n_partitions=8, cache_size=2, backend="torch_cuda", direction=d, max_paths=0)
        ref = NumbaRetriever(kg, direction=d, max_paths=0)
        for rels in (None, [0, 2, 5]):
            for s, got in zip(seed_sets, gpu.retrieve_many(seed_sets, 3, rels)):
                assert_same(got, ref.retrieve(s, 3, rels), f"{d} rels={rels} seeds={s}")


def test_partitioned_torch_cuda_without_cuda_is_a_clear_error():
    import torch

    from kgreason.retrieval.partitioned import PartitionedRetriever

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(RuntimeError, match=r"backend='torch_cuda'.*no CUDA device.*backend=torch"):
        PartitionedRetriever(synthetic_kg(50, 100), backend="torch_cuda")
    with pytest.raises(ValueError, match="backend must be one of numpy"):
        PartitionedRetriever(synthetic_kg(50, 100), backend="cupy")
