"""The PDSQI-9 judge is its own model (issue 16): ``judge.llm`` is built independently of the
run's ``llm``; a judge that is the judged model stops the run before the first example unless
``judge.allow_self_judging=true``; judge calls and cost are logged under ``judge/``."""

from __future__ import annotations

import json

import pytest
from omegaconf import open_dict

from conftest import compose_cfg
from kgreason.judges.pdsqi import PDSQI_ATTRIBUTES, PDSQI_SCALES

SCORES = {a: (4 if PDSQI_SCALES[a][0] == (1, 2, 3, 4, 5) else 0) for a in PDSQI_ATTRIBUTES}
SCORES["abstraction_needed"] = 1


def _cfg(tmp_path, *extra):
    cfg = compose_cfg(["reasoner=io", "llm=scripted", "judge=pdsqi", "llm@judge.llm=scripted",
                       "judge.llm.model=judge-model", "dataset.limit=3", "tracking=none",
                       "reports.hop_distribution=false", *extra], tmp_path)
    with open_dict(cfg):
        # the judged model answers questions; it has no idea how to grade
        cfg.llm.rules = [{"pattern": ".", "reply": '["Paris"]'}]
        cfg.judge.llm.rules = [{"pattern": "Diagnostic output to evaluate", "reply": json.dumps(SCORES)}]
    return cfg


def test_judge_uses_its_own_model_and_is_counted(tmp_path):
    from kgreason.runner.run import build, run

    c = build(_cfg(tmp_path))
    assert c.judge.llm.model == "judge-model" and c.llm.model == "scripted"
    res = run(_cfg(tmp_path), tmp_path / "run")
    m = res.metrics
    assert m["judge/accurate"] == 4.0 and m["judge/pdsqi_average"] == 4.0  # the judge model's grades
    assert m["judge/calls"] == 3 and m["llm/judge/calls"] == 3              # one judgement per example
    assert m["llm/answer/calls"] == 3 and m["llm/calls"] == 6               # every call of the run
    assert m["llm/calls_per_question"] == 1.0                               # the method's calls only
    rows = [json.loads(x) for x in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert all(r["llm_usage"]["judge"]["calls"] == 1 and r["llm_usage"]["answer"]["calls"] == 1 for r in rows)


def test_self_judging_fails_at_start_up(tmp_path):
    from kgreason.runner.run import run

    cfg = _cfg(tmp_path, "judge.llm.model=scripted")  # the judge is the judged model
    with pytest.raises(ValueError, match="allow_self_judging"):
        run(cfg, tmp_path / "run")
    assert not (tmp_path / "run" / "predictions.jsonl").exists()  # before the first example
    res = run(_cfg(tmp_path, "judge.llm.model=scripted", "judge.allow_self_judging=true"), tmp_path / "run2")
    assert res.metrics["run/n_examples"] == 3


def test_default_judge_is_gpt5_mini_not_the_run_llm(tmp_path):
    cfg = compose_cfg(["judge=pdsqi"], tmp_path)
    assert cfg.judge.llm._target_.endswith("OpenAIChat") and cfg.judge.llm.model == "gpt-5-mini"
    assert cfg.llm._target_ != cfg.judge.llm._target_


def test_a_judge_that_cannot_start_stops_the_run_before_the_first_example(tmp_path, monkeypatch):
    from kgreason.runner.run import run

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    cfg = compose_cfg(["reasoner=io", "llm=scripted", "judge=pdsqi", "dataset.limit=2", "tracking=none",
                       "reports.hop_distribution=false"], tmp_path)  # judge: openai gpt-5-mini, no key
    with pytest.raises(Exception, match="OPENAI_API_KEY"):
        run(cfg, tmp_path / "run")
    assert not (tmp_path / "run" / "predictions.jsonl").exists()
