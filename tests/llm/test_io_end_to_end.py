"""`reasoner=io llm=openai` end to end against the local server: metrics, cache, no key leak."""

from __future__ import annotations

import json

import pytest

from conftest import compose_cfg

from kgreason.bench.llm import FakeChatServer
from kgreason.runner.run import run

KEY_ENV = "KGREASON_TEST_FAKE_KEY"
KEY = "sk-e2e-SECRET-ZZZ-987654321"


def _cfg(srv, out, *extra):
    return compose_cfg(["reasoner=io", "llm=openai", f"llm.base_url={srv.base_url}", "llm.model=fake-model",
                        f"llm.api_key_env={KEY_ENV}", "+llm.prices.fake-model={input:1.0,output:2.0}",
                        "dataset.limit=6", "tracking=jsonl", "max_error_rate=0", *extra], out)


def test_io_openai_run_counts_calls_then_replays_from_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    with FakeChatServer() as srv:
        res = run(_cfg(srv, tmp_path / "a"), tmp_path / "a")
        assert len(srv.requests) == 1 + 6  # the preflight probe (never cached, never counted), 6 calls
        m = res.metrics
        assert m["llm/calls"] == 6 and m["llm/cache_hits"] == 0
        assert m["llm/prompt_tokens"] > 0 and m["llm/completion_tokens"] > 0 and m["llm/cost_usd"] > 0
        rows = [json.loads(x) for x in (tmp_path / "a" / "predictions.jsonl").read_text().splitlines()]
        assert len(rows) == 6 and all(r["usage"]["calls"] == 1 for r in rows)
        assert all(r["prediction"] for r in rows)
        assert rows[0]["trace"][0]["kind"] == "llm" and "Question:" in rows[0]["trace"][0]["data"]["messages"][-1]["content"]
        # a fresh run dir, same cache: zero backend calls, all hits, same tokens, zero cost
        res2 = run(_cfg(srv, tmp_path / "b"), tmp_path / "b")
        assert len(srv.requests) == 1 + 6 + 1  # only the second run's probe
        m2 = res2.metrics
        assert m2["llm/calls"] == 0 and m2["llm/cache_hits"] == 6 and m2["llm/cost_usd"] == 0
        assert m2["llm/prompt_tokens"] == m["llm/prompt_tokens"]
        assert m2["metric/hits_at_1"] == m["metric/hits_at_1"]
        # replay mode works without the server
        res3 = run(_cfg(srv, tmp_path / "c", "llm_cache.mode=readonly"), tmp_path / "c")
        assert res3.metrics["llm/calls"] == 0
    assert all(h["authorization"] == f"Bearer {KEY}" for h in srv.headers)
    for d in ("a", "b", "c"):
        for f in (tmp_path / d).rglob("*"):
            if f.is_file():
                assert KEY.encode() not in f.read_bytes(), f
    for f in (tmp_path / "cache").rglob("*"):
        if f.is_file():
            assert KEY.encode() not in f.read_bytes(), f
    assert KEY_ENV in (tmp_path / "a" / "config.yaml").read_text()


@pytest.mark.slow
def test_cli_io_openai_run_dir_has_no_key(tmp_path):
    """`python -m kgreason reasoner=io llm=openai ...` as a subprocess (Hydra writes .hydra/ too)."""
    import os
    import subprocess
    import sys

    from conftest import REPO

    env = dict(os.environ, **{KEY_ENV: KEY, "KGREASON_CACHE_DIR": str(tmp_path / "cache")})
    out = tmp_path / "run"
    with FakeChatServer() as srv:
        cmd = [sys.executable, "-m", "kgreason", "reasoner=io", "llm=openai", f"llm.base_url={srv.base_url}",
               "llm.model=fake-model", f"llm.api_key_env={KEY_ENV}", "dataset.limit=3", "tracking=jsonl",
               f"hydra.run.dir={out}"]
        p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
        assert len(srv.requests) == 1 + 3  # the preflight probe, then the 3 calls
    assert KEY not in p.stdout + p.stderr
    m = json.loads((out / "metrics.json").read_text())
    assert m["llm/calls"] == 3 and m["llm/prompt_tokens"] > 0
    files = [f for f in out.rglob("*") if f.is_file()]
    assert any(f.parent.name == ".hydra" for f in files)
    for f in files:
        assert KEY.encode() not in f.read_bytes(), f


def test_example_workers_overlap_requests_and_keep_order(tmp_path, monkeypatch):
    """example_workers=4: examples' LLM calls overlap at the server (bounded by the worker
    count), and predictions.jsonl keeps dataset order with the same answers as a serial run."""
    monkeypatch.setenv(KEY_ENV, KEY)
    with FakeChatServer(latency_s=0.05) as srv:
        run(_cfg(srv, tmp_path / "serial", "llm_cache.mode=off", "example_workers=1"), tmp_path / "serial")
        assert srv.max_in_flight == 1
        srv.max_in_flight = 0
        run(_cfg(srv, tmp_path / "par", "llm_cache.mode=off", "example_workers=4"), tmp_path / "par")
        assert 2 <= srv.max_in_flight <= 4
    rows = {d: [json.loads(x) for x in (tmp_path / d / "predictions.jsonl").read_text().splitlines()]
            for d in ("serial", "par")}
    assert [r["id"] for r in rows["par"]] == [r["id"] for r in rows["serial"]]
    assert [r["prediction"] for r in rows["par"]] == [r["prediction"] for r in rows["serial"]]


def test_example_workers_refused_for_order_dependent_reasoners(tmp_path):
    from conftest import compose_cfg

    cfg = compose_cfg(["reasoner=subqrag", "dataset=embedded", "dataset.task=multihop", "llm=scripted",
                       "dataset.limit=2", "tracking=none", "example_workers=2"], tmp_path)
    with pytest.raises(ValueError, match="example_workers"):
        run(cfg, tmp_path)
