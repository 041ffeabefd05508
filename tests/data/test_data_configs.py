"""Every conf/dataset and conf/kg option composes and instantiates on the shared samples."""

from __future__ import annotations

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from conftest import compose_cfg
from kgreason.data.base import DataError
from kgreason.kg.loaders import KGFormatError

METRIC_NAMES = {"hits_at_1", "all_answers_found", "answer_set_f1", "tog_hits_at_1", "rog_hit", "rog_acc", "rog_f1",
                "em", "f1", "answer_coverage", "musique_em", "musique_f1", "twowiki_em", "twowiki_f1",
                "dx_precision", "dx_recall", "dx_f1"} | {
                f"dx_{rd}_{s}" for rd in ("baseline", "round1", "round2") for s in ("precision", "recall", "f1")}

DATASETS = {  # option → expected size on the shared samples
    "cwq": 3531, "webqsp": 100, "grailqa": 1000, "metaqa": 1000, "hotpotqa": 500, "musique": 200,
    "twowiki": 200, "ddxplus": 588, "embedded_multihop": None, "embedded_clinical": None,
}
KGS = {"metaqa": 129235, "freebase_slice": 310116, "umls_semnet": 6529, "primekg": 585, "ddxplus": 888}


def _dataset(cfg):
    d = OmegaConf.to_container(cfg.dataset, resolve=True)
    d.pop("metrics")
    return instantiate(d)


@pytest.mark.parametrize("name", sorted(DATASETS) + ["probsum"])
def test_dataset_config_metrics(name, tmp_path):
    cfg = compose_cfg([f"dataset={name}"], tmp_path)
    assert cfg.dataset.metrics and set(cfg.dataset.metrics) <= METRIC_NAMES


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_dataset_config_instantiates(name, tmp_path, shared_data, monkeypatch):
    monkeypatch.setenv("KGREASON_DATA", str(shared_data))
    es = _dataset(compose_cfg([f"dataset={name}"], tmp_path))
    assert len(es) > 0 and (DATASETS[name] is None or len(es) == DATASETS[name])


def test_metaqa_hops_override(tmp_path, shared_data, monkeypatch):
    monkeypatch.setenv("KGREASON_DATA", str(shared_data))
    es = _dataset(compose_cfg(["dataset=metaqa", "dataset.hops=3", "dataset.limit=5"], tmp_path))
    assert len(es) == 5 and {e.hops for e in es} == {3}


@pytest.mark.parametrize("name", [pytest.param(k, marks=pytest.mark.slow) if k == "freebase_slice" else k
                                  for k in sorted(KGS)])
def test_kg_config_instantiates(name, tmp_path, shared_data, monkeypatch):
    monkeypatch.setenv("KGREASON_DATA", str(shared_data))
    kg = instantiate(compose_cfg([f"kg={name}"], tmp_path).kg)
    assert kg.n_triples == KGS[name]
    kg2 = instantiate(compose_cfg([f"kg={name}"], tmp_path).kg)  # second load: from the compiled cache
    assert kg2.n_triples == kg.n_triples and kg2.entity_names == kg.entity_names


@pytest.mark.parametrize("name,env", [("umls", "UMLS_META"), ("pkg", "PKG_DIR"), ("rog_subgraphs", "ROG_JSONL")])
def test_unavailable_kgs_fail_clearly(name, env, tmp_path, monkeypatch):
    monkeypatch.setenv(env, str(tmp_path / "missing"))
    with pytest.raises(Exception) as ei:
        instantiate(compose_cfg([f"kg={name}"], tmp_path).kg)
    err = ei.value
    while err.__cause__ is not None and not isinstance(err, KGFormatError):
        err = err.__cause__
    assert isinstance(err, KGFormatError) and "file not found" in str(err)


def test_probsum_missing_file(tmp_path, monkeypatch):
    monkeypatch.setenv("PROBSUM_CSV", str(tmp_path / "nope.csv"))
    with pytest.raises(Exception) as ei:
        _dataset(compose_cfg(["dataset=probsum"], tmp_path))
    err = ei.value
    while err.__cause__ is not None and not isinstance(err, DataError):
        err = err.__cause__
    assert isinstance(err, DataError)
