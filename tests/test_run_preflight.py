"""Preflight through ``run()`` (issue 18): a run that cannot produce a meaningful number stops
before the first example, with a message that says why and what would fit; a dead LLM endpoint is
found by one probe; a run whose endpoint dies stops after ``max_consecutive_failures`` examples;
what a run records (run.json, fingerprint.json, preflight/* figures, null metrics with a note).

Each case here used to answer every example and report zeros (or NaN) with exit code 0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import compose_cfg

from kgreason.bench.llm import FakeChatServer
from kgreason.preflight import PreflightError
from kgreason.runner.run import LLMUnavailable, run


def _run(tmp_path: Path, *overrides: str):
    return run(compose_cfg(["tracking=none", "reports.hop_distribution=false", *overrides], tmp_path), tmp_path)


def _nothing_answered(run_dir: Path) -> None:
    assert not (run_dir / "predictions.jsonl").exists()
    assert not (run_dir / "metrics.json").exists()
    assert not (run_dir / "fingerprint.json").exists()  # a fixed config may start this dir afresh


# ----------------------------------------------------------------------------- bad settings

@pytest.mark.parametrize("override, expected", [
    ("reasoner.hops=-1", "reasoner.hops=-1: expected an integer >= 1 or null"),
    ("reasoner.hops=0", "reasoner.hops=0: expected an integer >= 1"),
    ("reasoner.hops=1.5", "reasoner.hops=1.5: expected an integer >= 1"),
    ("dataset.limit=0", "dataset.limit=0: expected an integer >= 1"),
    ("dataset.limit=-5", "dataset.limit=-5: expected an integer >= 1"),
    ("reports.max_hops=0", "reports.max_hops=0: expected an integer >= 1"),
    ("llm_cache.mode=write", "llm_cache.mode='write': expected one of readwrite, readonly, off"),
    ("llm=hf", "llm=hf needs a model: set llm.model="),
    ("max_consecutive_failures=-1", "max_consecutive_failures=-1: expected an integer >= 0"),
])
def test_bad_settings_stop_at_start_up(tmp_path, override, expected):
    with pytest.raises(PreflightError, match="the run cannot start") as e:
        _run(tmp_path, override)
    assert expected in str(e.value)
    _nothing_answered(tmp_path)


def test_missing_api_key_stops_at_start_up(tmp_path, monkeypatch):
    monkeypatch.delenv("KGREASON_TEST_UNSET_KEY", raising=False)
    with pytest.raises(PreflightError, match=r"llm.api_key_env='KGREASON_TEST_UNSET_KEY': the environment "
                                             r"variable is not set"):
        _run(tmp_path, "reasoner=io", "llm=openai", "llm.api_key_env=KGREASON_TEST_UNSET_KEY")
    _nothing_answered(tmp_path)
    # retrieval_only never calls the LLM: the same unset key is no reason to stop it
    res = _run(tmp_path / "b", "llm=openai", "llm.api_key_env=KGREASON_TEST_UNSET_KEY", "dataset.limit=3")
    assert res.metrics["run/n_examples"] == 3


def test_damaged_call_cache_is_named_at_start_up(tmp_path):
    from kgreason.storage.callstore import StoreCorrupt

    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "llm_calls.sqlite").write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreCorrupt, match="llm_calls.sqlite"):
        _run(tmp_path / "run", "reasoner=io", "llm=scripted", f"llm_cache.dir={cache}", "dataset.limit=3")
    assert not (tmp_path / "run" / "predictions.jsonl").exists()


# ----------------------------------------------------------------------------- components that do not fit

def test_reasoner_that_cannot_serve_the_task_stops(tmp_path):
    with pytest.raises(PreflightError, match="reasoner 'retrieval_only' answers kgqa tasks, but dataset "
                                             "'embedded_multihop' poses multihop questions"):
        _run(tmp_path, "dataset=embedded_multihop", "dataset.limit=5")
    with pytest.raises(PreflightError, match="poses diagnosis questions; choose a reasoner for them "
                                             r"\(logoskg_dx, kg_dx, io, cot\)"):
        _run(tmp_path / "b", "dataset=embedded_clinical", "dataset.limit=5")
    _nothing_answered(tmp_path)


def test_unlinked_examples_stop_with_dataset_kg_and_rate(tmp_path):
    # the embedded questions on a synthetic power-law KG: no topic entity links
    with pytest.raises(PreflightError) as e:
        _run(tmp_path, "kg=synthetic", "kg.n_entities=300", "kg.n_triples=2000", "dataset.limit=20")
    msg = str(e.value)
    assert "only 0 of 20 examples of dataset 'embedded' (0.0%) have a topic entity in kg='" in msg
    assert "preflight.min_link_rate=0.5" in msg and "meant for kg=embedded" in msg
    _nothing_answered(tmp_path)


def test_shared_data_mismatches_stop_before_the_first_example(tmp_path, shared_data, monkeypatch):
    """The four cases of issue 18, on the real data files."""
    monkeypatch.setenv("KGREASON_DATA", str(shared_data))
    cases = [
        (["dataset=metaqa"], ["dataset 'metaqa'", "kg='", "meant for kg=metaqa", "min_link_rate"]),
        (["dataset=hotpotqa"], ["reasoner 'retrieval_only' answers kgqa", "'hotpotqa' poses multihop",
                                "rag_text, subqrag"]),
        (["dataset=ddxplus", "kg=ddxplus"], ["'ddxplus' poses diagnosis", "logoskg_dx, kg_dx"]),
    ]
    for i, (over, needles) in enumerate(cases):
        d = tmp_path / str(i)
        with pytest.raises(PreflightError) as e:
            _run(d, *over, "dataset.limit=20")
        for needle in needles:
            assert needle in str(e.value), (over, str(e.value))
        _nothing_answered(d)


def test_cwq_on_the_freebase_slice_stops(tmp_path, shared_data, monkeypatch):
    """16 of 20 CWQ topics are not in FB15k-237: the slice links too few for a meaningful score."""
    monkeypatch.setenv("KGREASON_DATA", str(shared_data))
    with pytest.raises(PreflightError) as e:
        _run(tmp_path, "dataset=cwq", "kg=freebase_slice", "dataset.limit=20")
    msg = str(e.value)
    assert "examples of dataset 'cwq'" in msg and "kg='" in msg and "freebase_sparql" in msg
    assert "%)" in msg  # the rate
    _nothing_answered(tmp_path)


def test_lower_min_link_rate_lets_the_run_go_and_the_rate_is_logged(tmp_path):
    res = _run(tmp_path, "dataset.limit=10")
    m = json.loads((tmp_path / "metrics.json").read_text())
    assert m["preflight/link_rate"] == 1.0 and m["preflight/examples_checked"] == 10
    assert m == res.metrics
    res = _run(tmp_path / "b", "kg=synthetic", "kg.n_entities=300", "kg.n_triples=2000", "dataset.limit=5",
               "preflight.min_link_rate=0")
    assert res.metrics["preflight/link_rate"] == 0.0


# ----------------------------------------------------------------------------- the record of a run

def test_run_json_and_tracker_config_hold_the_same_record(tmp_path, monkeypatch):
    monkeypatch.setenv("KGREASON_TEST_SECRET_KEY", "sk-run-json-secret-0000000")
    run(compose_cfg(["tracking=jsonl", "dataset.limit=5", "reports.hop_distribution=false",
                     "+llm.api_key=sk-run-json-secret-0000000"], tmp_path), tmp_path)
    rec = json.loads((tmp_path / "run.json").read_text())
    assert {"config", "choices", "git", "versions", "data_files", "fingerprint", "preflight"} <= set(rec)
    assert rec["config"]["dataset"]["limit"] == 5 and rec["preflight"]["example_rate"] == 1.0
    assert rec["fingerprint"] == json.loads((tmp_path / "fingerprint.json").read_text())["sha256"]
    lines = [json.loads(x) for x in (tmp_path / "tracking.jsonl").read_text().splitlines()]
    configs = [x["config"] for x in lines if x["type"] == "config"]
    assert configs[-1] == rec
    for p in tmp_path.rglob("*"):
        if p.is_file():
            assert b"sk-run-json-secret" not in p.read_bytes(), p


def test_metric_with_no_applicable_example_is_null_with_a_note(tmp_path):
    res = _run(tmp_path, "reasoner=kg_dx", "dataset=embedded_clinical", "dataset.limit=4",
               "dataset.metrics=[dx_f1,dx_round1_f1]")
    text = (tmp_path / "metrics.json").read_text()
    m = json.loads(text)
    assert "NaN" not in text
    assert m["metric/dx_round1_f1"] is None and "not applicable to any of the 4 examples" in \
        m["metric_notes/dx_round1_f1"]
    assert isinstance(m["metric/dx_f1"], float) and "metric_notes/dx_f1" not in m
    assert res.metrics == m


# ----------------------------------------------------------------------------- the LLM endpoint

def _dead_url() -> str:
    with FakeChatServer() as srv:
        return srv.base_url


def _openai(url: str, *extra: str) -> list[str]:
    # one example at a time (the default with an HTTP model is 16): these tests count the requests
    # the server saw, which concurrent examples in flight when the run stops would add to
    return ["reasoner=io", "llm=openai", f"llm.base_url={url}", "llm.api_key_env=null", "llm.model=fake",
            "llm.backoff_base_s=0.01", "llm.backoff_max_s=0.02", "example_workers=1", *extra]


def test_dead_endpoint_is_found_by_one_probe_before_the_run(tmp_path):
    with pytest.raises(PreflightError, match=r"the LLM endpoint http://127\.0\.0\.1:\d+/v1 \(llm=.*\) did not "
                                             r"answer a one-token probe"):
        _run(tmp_path, *_openai(_dead_url(), "dataset.limit=5"))
    _nothing_answered(tmp_path)


def test_endpoint_that_dies_stops_the_run_and_resume_retries_the_errors(tmp_path):
    # the probe is answered, then every request fails: 5 examples error, then the run stops
    faults = [("slow", 0.0)] + [("503",)] * 500
    with FakeChatServer(faults=faults) as srv:
        with pytest.raises(LLMUnavailable, match=r"stopped after 5 examples in a row failed on the LLM "
                                                 r"\(max_consecutive_failures=5\)"):
            _run(tmp_path, *_openai(srv.base_url, "dataset.limit=30", "llm.max_retries=1"))
        assert len(srv.requests) == 1 + 5 * 2  # the probe, then 2 attempts for each of 5 examples
    rows = [json.loads(x) for x in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 5 and all(r["error"].startswith("LLMError") for r in rows)
    assert not (tmp_path / "metrics.json").exists()

    with FakeChatServer() as srv:  # the endpoint is back (on another port): resume answers the 5 again
        res = _run(tmp_path, *_openai(srv.base_url, "dataset.limit=30", "llm.max_retries=1",
                                      "resume_allow_changes=true"))
    assert res.metrics["run/n_examples"] == 30 and res.metrics["run/errors"] == 0
    lines = (tmp_path / "predictions.jsonl").read_text().splitlines()
    assert len(lines) == 35  # the failed attempts stay in the file; the last row per id wins

    from kgreason.score import read_pairs, score

    names = [k.split("/", 1)[1] for k in res.metrics if k.startswith("metric/")]
    assert len(read_pairs(tmp_path / "predictions.jsonl")) == 30
    assert {f"metric/{k}": v for k, v in score(read_pairs(tmp_path / "predictions.jsonl"), names).items()} == \
        {k: v for k, v in res.metrics.items() if k.startswith("metric/")}


def test_retry_errors_false_keeps_error_rows(tmp_path):
    faults = [("slow", 0.0)] + [("503",)] * 4
    with FakeChatServer(faults=faults) as srv:
        _run(tmp_path, *_openai(srv.base_url, "dataset.limit=6", "llm.max_retries=1", "fail_on_error_rate=false"))
    with FakeChatServer() as srv:
        res = _run(tmp_path, *_openai(srv.base_url, "dataset.limit=6", "llm.max_retries=1",
                                      "fail_on_error_rate=false", "retry_errors=false", "resume_allow_changes=true"))
        assert len(srv.requests) == 1  # the probe; no example is answered again
    assert res.metrics["run/errors"] == 2


# ----------------------------------------------------------------------------- a busy endpoint is waited for (issue 30 item 4)

def _http_run(tmp_path: Path, url: str, *extra: str):
    return _run(tmp_path, "reasoner=io", "llm=openai", f"llm.base_url={url}", "llm.api_key_env=null",
                "llm.model=fake", "dataset.limit=2", "llm_cache.mode=off", *extra)


def test_a_busy_endpoint_at_start_is_waited_for(tmp_path):
    """429 then 500 to the probe: retried with backoff as mid-run, so the run completes (the probe
    used to cap retries at 1 and stop the run)."""
    with FakeChatServer(faults=[("429", None), ("500",)]) as srv:
        res = _http_run(tmp_path, srv.base_url, "llm.backoff_base_s=0.01", "llm.backoff_max_s=0.05")
        assert len(srv.requests) == 3 + 2  # two refused probes, the probe, one call per example
    assert res.metrics["run/n_examples"] == 2 and res.metrics["run/errors"] == 0


def test_a_dead_endpoint_stops_the_run_in_seconds(tmp_path):
    import time

    with FakeChatServer() as srv:
        url = srv.base_url  # closed once the server is gone
    t0 = time.perf_counter()
    with pytest.raises(PreflightError, match=r"did not answer a one-token probe.*connection error"):
        _http_run(tmp_path, url, "llm.max_retries=5")  # default backoff: retried, this would take ~16 s
    assert time.perf_counter() - t0 < 15  # a behaviour bound, not a benchmark
    _nothing_answered(tmp_path)


# ----------------------------------------------------------------------------- LogosKG Table 5's judge (issue 30 item 3)

def _pdsqi_reply(body) -> str:
    from kgreason.judges.pdsqi import PDSQI_ATTRIBUTES, PDSQI_SCALES

    scores = {a: (4 if PDSQI_SCALES[a][0] == (1, 2, 3, 4, 5) else 0) for a in PDSQI_ATTRIBUTES}
    scores["abstraction_needed"] = 1
    return json.dumps(scores)


def _table5(tmp_path: Path, url: str, *over: str, preset: str = "experiment=logoskg_dx_hops_ddxplus_kg"):
    from omegaconf import open_dict

    cfg = compose_cfg([preset, "judge=pdsqi", "llm=scripted",
                       f"judge.llm.base_url={url}", "judge.llm.api_key_env=null", "judge.llm.max_retries=0",
                       "reasoner.hops=1", "dataset.limit=2", "tracking=none", "reports.hop_distribution=false",
                       *over], tmp_path)
    with open_dict(cfg):
        cfg.llm.rules = [{"pattern": "Candidate diagnoses:", "reply": '["Bronchitis"]'},
                         {"pattern": "most likely diagnoses", "reply": '["Bronchitis", "Pneumonia", "URTI"]'}]
    return run(cfg, tmp_path)


def test_logoskg_table5_preset_judge_gpt5_mini_scores_against_openai_rules(tmp_path, shared_data, monkeypatch):
    """The LogosKG Table 5 preset (logoskg_dx_hops_ddxplus_kg + judge=pdsqi, judge gpt-5-mini)
    against a server that refuses what the OpenAI API refuses from reasoning models and spends
    500 reasoning tokens per reply: the judge's requests are accepted and every example is
    judged (it used to stop at the probe: "Unsupported parameter: 'max_tokens'")."""
    monkeypatch.setenv("KGREASON_DATA", str(shared_data))
    with FakeChatServer(openai_rules=True, reasoning_tokens=500, reply=_pdsqi_reply) as srv:
        res = _table5(tmp_path, srv.base_url)
        bodies = list(srv.requests)
        assert srv.rejected == []
    m = res.metrics
    assert m["run/n_examples"] == 2 and m["run/errors"] == 0 and "judge/errors" not in m
    assert m["judge/pdsqi_average"] == 4.0 and m["judge/accurate"] == 4.0 and m["judge/round1/accurate"] == 4.0
    assert m["judge/calls"] >= 2 and m["judge/reasoning_tokens"] == 500 * m["judge/calls"]
    judged = [b for b in bodies if "Diagnostic output to evaluate" in b["messages"][-1]["content"]]
    assert len(judged) == m["judge/calls"]
    for b in judged:  # greedy judgements: no temperature; room to reason on top of the 300-token reply
        assert b["model"] == "gpt-5-mini" and "temperature" not in b and "max_tokens" not in b
        assert b["max_completion_tokens"] == 300 + 8192


def test_logoskg_table5_judge_without_the_shared_data(tmp_path):
    """The same judge through the UMLS/PrimeKG preset (experiment=logoskg_dx_hops) on the embedded
    clinical world, so the check runs where the DDXPlus sample is absent."""
    with FakeChatServer(openai_rules=True, reasoning_tokens=500, reply=_pdsqi_reply) as srv:
        res = _table5(tmp_path, srv.base_url, "dataset=embedded_clinical", "kg=embedded",
                      "reasoner.link_embedding=false", "reasoner.disease_type=[disease,pathology]",
                      preset="experiment=logoskg_dx_hops")
        assert srv.rejected == [] and len(srv.requests) > 2
    m = res.metrics
    assert m["run/n_examples"] == 2 and m["run/errors"] == 0 and "judge/errors" not in m
    assert m["judge/pdsqi_average"] == 4.0 and m["judge/reasoning_tokens"] == 500 * m["judge/calls"] > 0


def test_logoskg_table5_sampling_judge_temperature_is_refused_at_start_up(tmp_path, shared_data, monkeypatch):
    monkeypatch.setenv("KGREASON_DATA", str(shared_data))
    with FakeChatServer(openai_rules=True) as srv:
        with pytest.raises(PreflightError, match=r"judge.temperature=0.7: judge.llm.model='gpt-5-mini' is a "
                                                 r"reasoning model"):
            _table5(tmp_path, srv.base_url, "judge.samples=3")
        assert srv.requests == []
    _nothing_answered(tmp_path)
    with FakeChatServer(openai_rules=True, reply=_pdsqi_reply) as srv:
        res = _table5(tmp_path / "b", srv.base_url, "judge.samples=2", "judge.temperature=1")
        assert srv.rejected == [] and res.metrics["judge/pdsqi_average"] == 4.0


# ----------------------------------------------------------------------------- nothing written before a failure

def test_bad_graphdb_engine_stops_before_the_call_cache_is_created(tmp_path):
    """Issue #32 item 7: the call-cache file was created at start-up and the run then failed on the
    unknown engine; now the engine is checked with the settings and nothing is written."""
    cache = tmp_path / "cache"
    with pytest.raises(PreflightError, match=r"graphdb.engine='bogus': expected one of"):
        _run(tmp_path / "run", "reasoner=sgr", "graphdb.engine=bogus", "llm=scripted", f"llm_cache.dir={cache}")
    assert not (cache / "llm_calls.sqlite").exists() and not (cache / "llm_calls").exists()
    _nothing_answered(tmp_path / "run")


def test_a_fresh_call_cache_is_not_created_by_the_start_up_check(tmp_path):
    from kgreason.llm.cache import check_cache

    check_cache({"dir": str(tmp_path / "c"), "mode": "readwrite"})
    assert not (tmp_path / "c").exists()


def test_missing_dataset_file_fails_before_the_kg_is_compiled(tmp_path):
    """Issue #32 item 7: the compiled KG cache was written before the dataset file was found missing."""
    kb = tmp_path / "kb.txt"
    kb.write_text("A|r|B\nB|r|C\n")
    kgc = tmp_path / "kgcache"
    with pytest.raises(Exception, match="missing.jsonl"):
        _run(tmp_path / "run", "kg=metaqa", f"kg.path={kb}", f"kg.cache_dir={kgc}", "dataset=metaqa",
             f"dataset.path={tmp_path / 'missing.jsonl'}")
    assert not kgc.exists() or not any(kgc.iterdir())
