"""LogosKG-Large's partition directory as a store (``retriever.directory``): it belongs to one KG,
one builder writes it, and a build stopped half-way is never read.

The partitions hold triple and entity ids only, so a directory built for another KG with the same
counts would answer with that KG's triples; before this, ``meta.json`` was checked for the counts
alone and such a directory was read without a word."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import time
from pathlib import Path

import pytest

from kgreason.kg.synthetic import synthetic_kg
from kgreason.retrieval import partitioned
from kgreason.retrieval.numba_engine import NumbaRetriever
from kgreason.retrieval.partitioned import PartitionedRetriever

from ._util import assert_same

KW = dict(n_partitions=4, cache_size=2, direction="both", max_paths=0)


def test_a_directory_built_for_another_kg_of_the_same_size_is_refused_in_one_line(tmp_path):
    a = synthetic_kg(300, 2000, n_relations=5, seed=1)
    b = synthetic_kg(300, 2000, n_relations=5, seed=2)
    assert (a.n_entities, a.n_triples) == (b.n_entities, b.n_triples) and not (a.triples == b.triples).all()
    PartitionedRetriever(a, directory=str(tmp_path), **KW)
    with pytest.raises(ValueError) as e:
        PartitionedRetriever(b, directory=str(tmp_path), **KW)
    msg = str(e.value)
    assert "\n" not in msg and str(tmp_path) in msg and "another KG" in msg and "retriever.directory" in msg
    # the same KG opens what it built, and answers as an in-memory engine does
    again = PartitionedRetriever(a, directory=str(tmp_path), **KW)
    seeds = [[0, 5], [17], [250, 3, 9]]
    for s in seeds:
        assert_same(again.retrieve(s, 2), NumbaRetriever(a, direction="both", max_paths=0).retrieve(s, 2))


def test_a_directory_from_before_the_kg_digest_is_refused_not_read(tmp_path):
    kg = synthetic_kg(200, 1200, seed=3)
    PartitionedRetriever(kg, directory=str(tmp_path), **KW)
    for layout in ("by_head", "by_tail"):
        meta_p = tmp_path / layout / "meta.json"
        meta = json.loads(meta_p.read_text())
        del meta["kg_digest"]
        meta_p.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="another KG"):
        PartitionedRetriever(kg, directory=str(tmp_path), **KW)


def _slow_build(flags, directory):
    """Build partitions in a forked process, marking each real build in ``flags`` and taking a
    while, as a PKG-sized build would."""
    real = partitioned.build_partitions

    def marked(*a, **kw):
        for layout in kw.get("layouts") or a[3]:
            Path(flags, f"{layout}.{os.getpid()}").touch()
        time.sleep(1.0)
        return real(*a, **kw)

    partitioned.build_partitions = marked
    kg = synthetic_kg(300, 2000, n_relations=5, seed=1)
    eng = PartitionedRetriever(kg, directory=str(directory), **KW)
    assert_same(eng.retrieve([0, 5], 2), NumbaRetriever(kg, direction="both", max_paths=0).retrieve([0, 5], 2))


def test_two_processes_on_one_directory_build_each_layout_once(tmp_path):
    flags = tmp_path / "flags"
    flags.mkdir()
    ctx = mp.get_context("fork")
    ps = [ctx.Process(target=_slow_build, args=(flags, tmp_path / "parts")) for _ in range(2)]
    for p in ps:
        p.start()
    for p in ps:
        p.join(120)
    assert [p.exitcode for p in ps] == [0, 0]
    # one build of each layout, by whichever process took its lock first; the other read it
    assert len(list(flags.iterdir())) == 2, sorted(f.name for f in flags.iterdir())


def test_a_build_stopped_mid_way_is_never_read_and_its_temp_dir_is_removed(tmp_path):
    kg = synthetic_kg(200, 1200, seed=3)
    (tmp_path / "by_head.tmp.99999999").mkdir(parents=True)  # what a kill -9 mid-build leaves
    (tmp_path / "by_head.tmp.99999999" / "part_00000.npz").write_bytes(b"torn")
    (tmp_path / "by_tail").mkdir()  # a layout dir without meta.json: an older build, stopped
    (tmp_path / "by_tail" / "part_00000.npz").write_bytes(b"torn")
    eng = PartitionedRetriever(kg, directory=str(tmp_path), **KW)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["by_head", "by_tail"]
    assert_same(eng.retrieve([1, 2], 2), NumbaRetriever(kg, direction="both", max_paths=0).retrieve([1, 2], 2))


def test_the_command_line_on_another_kgs_partitions_says_two_lines_and_runs_nothing(tmp_path):
    """Through ``kgreason``: the refusal is the front door's one-line error (exit 2), not a
    traceback, and it comes before the first example (no run dir kept)."""
    import subprocess
    import sys

    from conftest import REPO

    parts = tmp_path / "parts"
    PartitionedRetriever(synthetic_kg(200, 1200, seed=3), directory=str(parts), **KW)
    env = {**os.environ, "KGREASON_PROGRESS": "off"}
    env.pop("HYDRA_FULL_ERROR", None)
    p = subprocess.run([sys.executable, "-m", "kgreason", "tracking=none", "retriever=partitioned",
                        f"retriever.directory={parts}", f"hydra.run.dir={tmp_path / 'run'}"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stderr[-2000:]
    assert "Traceback" not in p.stderr
    err = [ln for ln in p.stderr.splitlines() if ln.startswith("kgreason: error:")]
    assert len(err) == 1 and "another KG" in err[0] and str(parts) in err[0], p.stderr[-2000:]
    assert not (tmp_path / "run").exists()


def test_a_full_disk_while_the_partitions_are_written_is_one_line_and_leaves_nothing_half_built(tmp_path):
    """The order map's bytes fit (reserved first), the partition files do not: the build ends as
    a StoreNoSpace naming the directory and the bytes it needed, not numpy's short-write
    traceback, and no temp or layout dir is left to be read."""
    from tmpfs_util import small_tmpfs

    from kgreason.storage.embedstore import StoreNoSpace

    kg = synthetic_kg(1000, 200_000, seed=4)  # an 800 KB order map, ~4 MB of partitions a layout
    with small_tmpfs(tmp_path / "tmpfs", "8m", free=1 << 20) as d:
        with pytest.raises(StoreNoSpace) as e:
            PartitionedRetriever(kg, directory=str(d / "parts"), **KW)
        msg = str(e.value)
        assert "\n" not in msg and str(d / "parts") in msg and "bytes needed" in msg, msg
        left = sorted(p.name for p in (d / "parts").iterdir() if p.is_dir())
        assert left == [], left
