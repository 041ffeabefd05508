"""Compiled cache: round trip is identical, memory-mapped on reload, invalidated by source edits."""

from __future__ import annotations

import numpy as np

from kgreason.kg.compiled import cache_key, load_cached
from kgreason.data.ddxplus import load_ddxplus_kg
from kgreason.kg.loaders import load_metaqa_kb, load_triples


def _same(a, b):
    for k in ("heads", "rels", "tails", "entity_types"):
        np.testing.assert_array_equal(getattr(a, k), getattr(b, k))
    assert a.entity_names == b.entity_names and a.relation_names == b.relation_names
    assert a.type_names == b.type_names and a.labels == b.labels and a.aliases == b.aliases


def test_round_trip_and_mmap(tmp_path):
    src = tmp_path / "kb.txt"
    src.write_text("A|r|B\nB|s|C\nC|r|A\n")
    cache = tmp_path / "cache"
    first = load_cached(load_metaqa_kb, src, cache)
    ref = load_metaqa_kb(src)
    _same(first, ref)
    dirs = [d for d in cache.iterdir() if d.is_dir()]
    assert len(dirs) == 1 and (dirs[0] / "vocab.json").exists()
    again = load_cached("kgreason.kg.loaders.load_metaqa_kb", str(src), cache)
    _same(again, ref)
    assert isinstance(again.heads, np.memmap) or isinstance(getattr(again.heads, "base", None), np.memmap)
    assert len([d for d in cache.iterdir() if d.is_dir()]) == 1  # hit, no new compile


def test_source_change_invalidates(tmp_path):
    src = tmp_path / "kb.tsv"
    src.write_text("A\tr\tB\n")
    cache = tmp_path / "cache"
    k1 = cache_key(load_triples, src)
    assert load_cached(load_triples, src, cache).n_triples == 1
    src.write_text("A\tr\tB\nB\tr\tC\n")
    assert cache_key(load_triples, src) != k1
    kg = load_cached(load_triples, src, cache)
    assert kg.n_triples == 2 and len([d for d in cache.iterdir() if d.is_dir()]) == 2
    # loader arguments are part of the key as well
    assert cache_key(load_triples, src, dedupe=False) != cache_key(load_triples, src)


def test_kw_files_are_hashed(tmp_path):
    tsv = tmp_path / "t.tsv"
    tsv.write_text("/m/1\tr\t/m/2\n")
    names = tmp_path / "n.txt"
    names.write_text("/m/1\tAda\n/m/2\tBob\n")
    kg = load_cached(load_triples, tsv, tmp_path / "c", names=str(names))
    assert kg.entity_label(0) == "Ada"
    names.write_text("/m/1\tAdele\n/m/2\tBob\n")
    assert load_cached(load_triples, tsv, tmp_path / "c", names=str(names)).entity_label(0) == "Adele"


def test_types_survive_cache(tmp_path):
    from pathlib import Path

    d = Path(__file__).resolve().parents[1] / "assets" / "ddxplus"
    ref = load_ddxplus_kg(d / "release_conditions.json", d / "release_evidences.json")
    kg = load_cached(load_ddxplus_kg, d / "release_conditions.json", tmp_path / "c",
                     evidences=str(d / "release_evidences.json"))
    kg = load_cached(load_ddxplus_kg, d / "release_conditions.json", tmp_path / "c",
                     evidences=str(d / "release_evidences.json"))
    _same(kg, ref)
    assert kg.type_of(kg.entity_id("URTI")) == "pathology"
    assert kg.find_entity("E_201") == kg.entity_id("Do you have a cough?")


def test_listconfig_paths(tmp_path):
    from omegaconf import OmegaConf

    a, b = tmp_path / "a.tsv", tmp_path / "b.tsv"
    a.write_text("A\tr\tB\n")
    b.write_text("B\tr\tC\n")
    cfg = OmegaConf.create({"path": [str(a), str(b)]})
    kg = load_cached(load_triples, cfg.path, tmp_path / "c")
    assert kg.n_triples == 2
    assert load_cached(load_triples, [str(a), str(b)], tmp_path / "c").n_triples == 2
    assert len([d for d in (tmp_path / "c").iterdir() if d.is_dir()]) == 1  # same key either way


def test_missing_source_raises_loader_error(tmp_path):
    import pytest

    from kgreason.kg.loaders import KGFormatError

    with pytest.raises(KGFormatError, match="file not found"):
        load_cached(load_triples, tmp_path / "nope.tsv", tmp_path / "c")


# ---------------------------------------------------------------------------- on-disk reliability (issue 57)
def _slow_loader(path, flags=None):
    """load_metaqa_kb that marks each call in ``flags`` and takes a while (a big KG's parse)."""
    import os
    import time
    from pathlib import Path

    Path(flags, f"parse.{os.getpid()}").touch()
    time.sleep(1.5)
    return load_metaqa_kb(path)


def _compile_in_process(src, cache, flags):
    load_cached(_slow_loader, src, cache, flags=str(flags))


def test_two_processes_compile_one_kg_once(tmp_path):
    """Issue 57 (M3's hole in the compiled cache): two runs starting on one KG each parsed it
    (a Freebase slice twice over in memory); the compile is locked per key, the second waits and
    loads what the first wrote."""
    import multiprocessing as mp

    src = tmp_path / "kb.txt"
    src.write_text("A|r|B\nB|s|C\nC|r|A\n")
    flags = tmp_path / "flags"
    flags.mkdir()
    ctx = mp.get_context("fork")
    ps = [ctx.Process(target=_compile_in_process, args=(src, tmp_path / "cache", flags)) for _ in range(2)]
    for p in ps:
        p.start()
    for p in ps:
        p.join(120)
    assert [p.exitcode for p in ps] == [0, 0]
    assert len(list(flags.iterdir())) == 1  # parsed once
    _same(load_cached(_slow_loader, src, tmp_path / "cache", flags=str(flags)), load_metaqa_kb(src))
    assert len(list(flags.iterdir())) == 1


def test_a_compile_stopped_by_kill_leaves_a_temp_dir_the_next_compile_removes(tmp_path):
    """L1 for the compiled cache: a compile stopped while saving leaves ``<key>.tmp.<pid>/``; the
    next compile of the key removes it."""
    from kgreason.kg.compiled import cache_key

    src = tmp_path / "kb.txt"
    src.write_text("A|r|B\n")
    cache = tmp_path / "cache"
    name = f"load_metaqa_kb-{cache_key(load_metaqa_kb, src)[:24]}"
    (cache / f"{name}.tmp.99999999").mkdir(parents=True)  # what a kill -9 mid-save leaves
    load_cached(load_metaqa_kb, src, cache)
    assert sorted(p.name for p in cache.iterdir() if p.is_dir()) == [name]


def test_a_full_disk_while_compiling_is_a_one_line_error_and_leaves_nothing(tmp_path):
    """M4 for the compiled cache: a full disk was a bare OSError traceback; it is a StoreNoSpace
    naming the cache dir and the bytes needed, and no partial copy is left."""
    import pytest

    from kgreason.storage.embedstore import StoreNoSpace
    from tmpfs_util import small_tmpfs

    src = tmp_path / "kb.txt"
    src.write_text("".join(f"e{i}|r|e{i + 1}\n" for i in range(20000)))  # 240 KB of arrays
    with small_tmpfs(tmp_path / "tmpfs", "1m", free=64 << 10) as cache:
        with pytest.raises(StoreNoSpace) as e:
            load_cached(load_metaqa_kb, src, cache)
        msg = str(e.value)
        assert "\n" not in msg and str(cache) in msg and "bytes needed" in msg
        assert sorted(p.name for p in cache.iterdir() if p.is_dir()) == []
