"""``python -m kgreason.score``: subprocess, hand-computed values, errors naming file:line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _run(*args):
    return subprocess.run([sys.executable, "-m", "kgreason.score", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def _write(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_cli_scores_hand_computed(tmp_path):
    f = _write(tmp_path / "p.jsonl", [
        {"id": "1", "prediction": "The Eiffel Tower", "answers": ["Eiffel Tower", "Tour Eiffel"]},
        {"id": "2", "prediction": ["Lyon", "Paris"], "answers": ["Paris"]},
        {"id": "3", "prediction": "new york city", "answers": ["New York"]},
        {"id": "4", "prediction": "yes it is", "answers": ["yes"]},
    ])
    r = _run(f, "--metrics", "em,f1,hits_at_1,musique_f1", "--out", tmp_path / "m.json")
    assert r.returncode == 0, r.stderr
    m = json.loads(r.stdout)
    assert set(m) == {"em", "f1", "hits_at_1", "musique_f1"}
    assert m["em"] == pytest.approx(1 / 4)
    assert m["hits_at_1"] == pytest.approx(1 / 4)
    # f1: 1, 0, 0.8 (p=2/3, r=1), 0 (HotpotQA yes/no rule)
    assert m["f1"] == pytest.approx((1 + 0 + 0.8 + 0) / 4)
    # MuSiQue has no yes/no rule: "yes it is" vs "yes" = 0.5
    assert m["musique_f1"] == pytest.approx((1 + 0 + 0.8 + 0.5) / 4)
    assert all(0 <= v <= 1 for v in m.values())
    assert json.loads((tmp_path / "m.json").read_text()) == m


def test_cli_groups_and_all_answers_found(tmp_path):
    f = _write(tmp_path / "p.jsonl", [
        {"id": "1", "prediction": ["Paris", "Lyon"], "answers": [["Paris", "City of Light"], ["Lyon"]]},
        {"id": "2", "predictions": ["Paris"], "prediction": "Paris", "answers": [["Paris"], ["Lyon"]]},
    ])
    m = json.loads(_run(f, "--metrics", "all_answers_found,hits_at_1").stdout)
    assert m == {"all_answers_found": 0.5, "hits_at_1": 1.0}


@pytest.mark.parametrize("bad,msg", [
    ('{"id": "2", "prediction": "x"', "invalid JSON"),
    ('{"id": "2", "prediction": "x"}', "missing required field 'answers'"),
    ('{"id": "2", "answers": ["x"]}', "missing required field 'prediction'"),
    ('{"id": "2", "prediction": 3, "answers": ["x"]}', "field 'prediction'"),
    ('[1, 2]', "expected a JSON object"),
])
def test_cli_errors_name_file_and_line(tmp_path, bad, msg):
    f = _write(tmp_path / "p.jsonl", [{"id": "1", "prediction": "a", "answers": ["a"]}, bad])
    r = _run(f)
    assert r.returncode == 2
    assert f"{f}:2" in r.stderr and msg in r.stderr


def test_cli_unknown_metric(tmp_path):
    f = _write(tmp_path / "p.jsonl", [{"id": "1", "prediction": "a", "answers": ["a"]}])
    r = _run(f, "--metrics", "nope")
    assert r.returncode == 2 and "unknown metrics" in r.stderr


def test_cli_diagnoses(tmp_path):
    f = _write(tmp_path / "p.jsonl", [
        {"id": "1", "prediction": ["Pneumonia", "Flu"], "answers": [], "diagnoses": ["pneumonia", "asthma"]},
        {"id": "2", "prediction": [], "answers": ["GERD"]},
    ])
    m = json.loads(_run(f, "--metrics", "dx_precision,dx_recall,dx_f1").stdout)
    assert m["dx_precision"] == pytest.approx((0.5 + 0) / 2)
    assert m["dx_recall"] == pytest.approx((0.5 + 0) / 2)
    assert m["dx_f1"] == pytest.approx((0.5 + 0) / 2)


@pytest.mark.parametrize("overrides", [
    [],  # the embedded default: retrieval_only on the embedded KGQA questions
    ["dataset.metrics=[hits_at_1,tog_hits_at_1,rog_hit,rog_acc,rog_f1,rog_precision,rog_recall,"
     "all_answers_found,answer_set_precision,answer_set_recall,answer_set_f1,em,f1,answer_coverage,search_space]"],
], ids=["default", "every_kgqa_metric"])
def test_score_of_a_run_equals_its_metrics_json(tmp_path, overrides):
    """A real run (embedded default, a few examples): re-scoring its own predictions.jsonl with
    the CLI gives exactly metrics.json for every metric (issue 16: answer groups were missing)."""
    from conftest import compose_cfg

    from kgreason.runner.run import run

    cfg = compose_cfg(["tracking=jsonl", "dataset.limit=25", "reports.hop_distribution=false", *overrides], tmp_path)
    res = run(cfg, tmp_path / "run")
    names = list(cfg.dataset.metrics)
    run_metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    rows = [json.loads(x) for x in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert any(len(r["answer_groups"]) > 1 for r in rows), "the sample needs a multi-answer question"
    r = _run(tmp_path / "run" / "predictions.jsonl", "--metrics", ",".join(names))
    assert r.returncode == 0, r.stderr
    scored = json.loads(r.stdout)
    assert {f"metric/{k}": v for k, v in scored.items()} == {k: v for k, v in run_metrics.items()
                                                             if k.startswith("metric/")}
    assert res.metrics["run/n_examples"] == 25


def test_score_of_a_dx_run_equals_its_metrics_json_with_kg_alias_matches(tmp_path, world):
    """A real logoskg_dx run (embedded clinical world, scripted LLM): the baseline names each gold
    diagnosis in a spelling only the KG links (``Grouwai_syndrome``: the KG's name index folds
    underscores, the diagnosis normaliser deletes them), so only the entity-level match scores
    it. Re-scoring predictions.jsonl offline gives exactly the run's dx metrics."""
    from omegaconf import open_dict

    from conftest import compose_cfg
    from kgreason.runner.run import run

    golds = [d for p in world.patients[:3] for d in p.diagnoses]
    cfg = compose_cfg(["reasoner=logoskg_dx", "dataset=embedded_clinical", "llm=scripted", "dataset.limit=3",
                       "tracking=none", "reasoner.hops=2", "reports.hop_distribution=false"], tmp_path)
    with open_dict(cfg):
        cfg.llm.rules = [{"pattern": "Candidate diagnoses:", "reply": "[]"},
                         {"pattern": "most likely diagnoses", "reply": json.dumps([g.replace(" ", "_") for g in golds])}]
    res = run(cfg, tmp_path / "run")
    rows = [json.loads(x) for x in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert [r["answers"] for r in rows] == [list(p.diagnoses) for p in world.patients[:3]]
    assert res.metrics["metric/dx_baseline_recall"] == 1.0, "each gold was named, under a KG-linked spelling"
    names = [n for n in cfg.dataset.metrics if n.startswith("dx_")]
    r = _run(tmp_path / "run" / "predictions.jsonl", "--metrics", ",".join(names))
    assert r.returncode == 0, r.stderr
    run_metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert {f"metric/{k}": v for k, v in json.loads(r.stdout).items()} == {
        f"metric/{n}": run_metrics[f"metric/{n}"] for n in names}


def test_dedupe_writes_the_last_row_per_id(tmp_path):
    """Issue #32 item 7: a resumed run's predictions.jsonl keeps superseded error rows; ``--dedupe``
    writes the file as every reader sees it (last row per id, in first-appearance order)."""
    rows = [
        {"id": "1", "prediction": "", "answers": ["A"], "error": "LLMError: down"},
        {"id": "2", "prediction": "B", "answers": ["B"]},
        {"id": "3", "prediction": "", "answers": ["C"], "error": "LLMError: down"},
        {"id": "1", "prediction": "A", "answers": ["A"]},
        {"id": "3", "prediction": "C", "answers": ["C"]},
    ]
    f = _write(tmp_path / "p.jsonl", rows)
    out = tmp_path / "clean.jsonl"
    r = _run(f, "--metrics", "em", "--dedupe", out)
    assert r.returncode == 0, r.stderr
    kept = [json.loads(x) for x in out.read_text().splitlines()]
    assert kept == [rows[3], rows[1], rows[4]]
    assert json.loads(r.stdout)["em"] == 1.0
    assert "3 ids" in r.stderr and "2 superseded" in r.stderr
    # scoring the deduplicated file gives the same figures
    assert json.loads(_run(out, "--metrics", "em").stdout) == json.loads(r.stdout)
