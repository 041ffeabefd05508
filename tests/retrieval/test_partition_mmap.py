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


_FULL_DISK_SCRIPT = """
import sys
from kgreason.storage.embedstore import StoreNoSpace
from kgreason.kg.synthetic import synthetic_kg, write_synthetic_kg
from kgreason.retrieval.partitioned import build_partitions

root, what = sys.argv[1], sys.argv[2]
try:
    if what == "synthetic":
        write_synthetic_kg(root + "/syn", 1000, 200_000)  # 2.4 MB of arrays
    else:
        build_partitions(synthetic_kg(1000, 200_000), root + "/parts", 4)  # an 800 KB order map
except StoreNoSpace as e:
    print(e)
    sys.exit(3)
"""


@pytest.mark.parametrize("what", ["synthetic", "partitions"])
def test_memory_mapped_writers_on_a_full_disk_say_so_instead_of_dying_of_sigbus(tmp_path, what):
    """Issue 57 M4 for the other memory-mapped writers (the synthetic KG's arrays, the
    partitioner's order map): their bytes are reserved before the map is written, so a full disk
    is a one-line StoreNoSpace (exit 3 here) rather than SIGBUS (-7)."""
    import subprocess
    import sys

    from tmpfs_util import small_tmpfs

    with small_tmpfs(tmp_path / "tmpfs", "1m", free=256 << 10) as d:
        r = subprocess.run([sys.executable, "-c", _FULL_DISK_SCRIPT, str(d), what], capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 3, (r.returncode, r.stderr[-2000:])
        assert str(d) in r.stdout and "bytes needed" in r.stdout
