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
    dirs = list(cache.iterdir())
    assert len(dirs) == 1 and (dirs[0] / "vocab.json").exists()
    again = load_cached("kgreason.kg.loaders.load_metaqa_kb", str(src), cache)
    _same(again, ref)
    assert isinstance(again.heads, np.memmap) or isinstance(getattr(again.heads, "base", None), np.memmap)
    assert len(list(cache.iterdir())) == 1  # hit, no new compile


def test_source_change_invalidates(tmp_path):
    src = tmp_path / "kb.tsv"
    src.write_text("A\tr\tB\n")
    cache = tmp_path / "cache"
    k1 = cache_key(load_triples, src)
    assert load_cached(load_triples, src, cache).n_triples == 1
    src.write_text("A\tr\tB\nB\tr\tC\n")
    assert cache_key(load_triples, src) != k1
    kg = load_cached(load_triples, src, cache)
    assert kg.n_triples == 2 and len(list(cache.iterdir())) == 2
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
    assert len(list((tmp_path / "c").iterdir())) == 1  # same key either way


def test_missing_source_raises_loader_error(tmp_path):
    import pytest

    from kgreason.kg.loaders import KGFormatError

    with pytest.raises(KGFormatError, match="file not found"):
        load_cached(load_triples, tmp_path / "nope.tsv", tmp_path / "c")
