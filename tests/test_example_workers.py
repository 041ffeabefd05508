"""`example_workers: auto` (the default, issue 60): a run against a served model answers several
examples at once, an in-process model or an in-order reasoner one at a time; rows stay in
dataset order either way."""

from __future__ import annotations

import json

import pytest

from conftest import compose_cfg
from kgreason.bench.llm import FakeChatServer
from kgreason.preflight import check_settings
from kgreason.runner.run import AUTO_HTTP_WORKERS, example_workers, run


@pytest.mark.parametrize("overrides,expected", [
    (["reasoner=io", "llm=openai"], AUTO_HTTP_WORKERS),           # a server: many requests at once
    (["reasoner=io", "llm=scripted"], 1),                          # in process
    (["reasoner=rag", "llm=local"], 1),                            # in process (batches when told to)
    (["reasoner=subqrag", "llm=openai", "dataset=embedded_multihop", "kg=embedded"], 1),  # answers in order
    (["reasoner=io", "llm=openai", "example_workers=3"], 3),       # a number is taken as it is
])
def test_auto_is_many_for_an_http_model_and_one_otherwise(tmp_path, overrides, expected):
    cfg = compose_cfg(overrides, tmp_path)
    assert example_workers(cfg) == expected


def test_auto_passes_the_start_checks_and_a_word_does_not(tmp_path):
    assert not [p for p in check_settings(compose_cfg([], tmp_path)) if "example_workers" in p]
    bad = check_settings(compose_cfg(["example_workers=many"], tmp_path))
    assert any("example_workers='many'" in p and "or auto" in p for p in bad), bad


def test_a_default_run_against_a_served_model_answers_several_examples_at_once(tmp_path, monkeypatch):
    """The default configuration, `llm=openai` against a local server with 50 ms of latency: the
    server sees more than one request at once, and predictions.jsonl is in dataset order."""
    monkeypatch.setenv("KGREASON_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "run"
    with FakeChatServer(latency_s=0.05) as srv:
        cfg = compose_cfg(["reasoner=io", "llm=openai", f"llm.base_url={srv.base_url}", "llm.model=m",
                           "llm.api_key_env=null", "dataset.limit=24", "tracking=none",
                           "reports.hop_distribution=false"], out)
        res = run(cfg, out)
        assert srv.max_in_flight > 1, srv.max_in_flight
    assert res.metrics["run/n_examples"] == 24
    ids = [json.loads(ln)["id"] for ln in (out / "predictions.jsonl").read_text().splitlines()]
    from hydra.utils import instantiate

    want = [ex.id for ex in instantiate({k: v for k, v in cfg.dataset.items() if k not in ("metrics", "reports")})]
    assert ids == want[:24]
