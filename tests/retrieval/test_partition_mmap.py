"""LogosKG-Large partitions mapped instead of read (issue 22): same arrays, same answers."""

from __future__ import annotations

import numpy as np
import pytest

from kgreason.retrieval.networkx_engine import NetworkXRetriever
from kgreason.retrieval.partitioned import PartitionedRetriever, map_npz

from ._util import assert_same, random_kg


def test_map_npz_equals_np_load(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {"a": rng.integers(0, 9, 1000).astype(np.int32), "b": rng.random((7, 3)), "empty": np.zeros(0, np.int64)}
    np.savez(tmp_path / "x.npz", **arrays)
    got = map_npz(tmp_path / "x.npz")
    assert set(got) == set(arrays)
    for k, v in arrays.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape and np.array_equal(got[k], v), k
    assert isinstance(got["a"].base, np.memmap) or isinstance(got["a"], np.memmap)  # a view of the mapped file
    assert not got["a"].flags.writeable


def test_compressed_partition_is_a_clear_error(tmp_path):
    np.savez_compressed(tmp_path / "c.npz", a=np.arange(10))
    with pytest.raises(ValueError, match=r"c\.npz: member a\.npy is compressed"):
        map_npz(tmp_path / "c.npz")


@pytest.mark.parametrize("load", ["mmap", "read"])
def test_mmap_and_read_loads_equal_networkx(load):
    rng = np.random.default_rng(21)
    loads = 0
    for case in range(15):
        kg = random_kg(rng, n_max=30, m_max=80)
        d = ("out", "in", "both")[case % 3]
        eng = PartitionedRetriever(kg, n_partitions=3, cache_size=1, load=load, direction=d, max_paths=50)
        ref = NetworkXRetriever(kg, direction=d, max_paths=50)
        for seeds in ([0], [1, 2]):
            assert_same(eng.retrieve(seeds, 3), ref.retrieve(seeds, 3), f"{load} {d} {seeds}")
        loads += eng.loads
    assert loads > 0  # partitions were brought in through the chosen loader


def test_bad_load_mode():
    kg = random_kg(np.random.default_rng(0))
    with pytest.raises(ValueError, match="load must be 'mmap' or 'read'"):
        PartitionedRetriever(kg, load="eager")
