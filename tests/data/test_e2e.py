"""End-to-end runs of the app on the shared samples with the real loaders (retrieval_only)."""

from __future__ import annotations

import json

import pytest
from conftest import compose_cfg

from kgreason.runner.run import run


def test_metaqa_run(tmp_path, shared_data, monkeypatch):
    monkeypatch.setenv("KGREASON_DATA", str(shared_data))
    cfg = compose_cfg(["tracking=jsonl", "dataset=metaqa", "kg=metaqa", "dataset.hops=1", "dataset.limit=10"], tmp_path)
    res = run(cfg, tmp_path)
    m = json.loads((tmp_path / "metrics.json").read_text())
    assert m == res.metrics and m["run/n_examples"] == 10 and m["run/error_rate"] == 0.0
    # 1-hop retrieval from the linked topic entity contains every gold answer in the rebuilt KB
    assert m["metric/answer_coverage"] == pytest.approx(1.0)


def test_pairing_rog_dataset_follows_kg(tmp_path, monkeypatch):
    from pathlib import Path

    from hydra.utils import instantiate

    from kgreason.kg.linking import link_example, link_rates

    rog = Path(__file__).resolve().parents[1] / "assets" / "rog_subgraphs.jsonl"
    monkeypatch.setenv("ROG_JSONL", str(rog))
    cfg = compose_cfg(["dataset=webqsp", "kg=rog_subgraphs"], tmp_path)
    assert cfg.dataset.path == str(rog)
    kg = instantiate(cfg.kg)
    ds = instantiate({k: v for k, v in cfg.dataset.items() if k != "metrics"} | {"sample_seed": 0})
    assert link_rates(link_example(kg, e) for e in ds)["rate"] == 1.0
