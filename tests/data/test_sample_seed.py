"""The question sample has its own seed (issue 41 item 1): ``dataset.sample_seed`` (fixed, 0 by
default) draws ``dataset.sample``; the run's ``seed`` varies the method, never the questions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import compose_cfg
from kgreason.data.embedded import load_embedded

REPO = Path(__file__).resolve().parents[2]
DATASETS = sorted(p.stem for p in (REPO / "conf" / "dataset").glob("*.yaml"))


@pytest.mark.parametrize("name", DATASETS)
def test_every_dataset_draws_its_sample_with_sample_seed_not_the_run_seed(name, tmp_path):
    text = (REPO / "conf" / "dataset" / f"{name}.yaml").read_text()
    assert "${seed}" not in text, f"conf/dataset/{name}.yaml: the question sample must not follow the run seed"
    cfg = compose_cfg([f"dataset={name}", "seed=5"], tmp_path)
    assert cfg.dataset.sample_seed == 0 and "seed" not in cfg.dataset


def test_sample_seed_draws_the_sample():
    a = [e.id for e in load_embedded(sample=50, sample_seed=0)]
    assert a == [e.id for e in load_embedded(sample=50, sample_seed=0)] and len(set(a)) == 50
    assert a != [e.id for e in load_embedded(sample=50, sample_seed=1)]


def test_a_seed_sweep_answers_the_same_sampled_questions(tmp_path):
    """`seed=0,1 dataset.sample=50`: both jobs answer the same 50 question ids, and each run
    records the sample seed (config.yaml and run.json)."""
    from kgreason.tables import job_dirs

    sweep = tmp_path / "sweep"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    r = subprocess.run([sys.executable, "-m", "kgreason", "--multirun", "seed=0,1", "dataset.sample=50",
                        "tracking=none", f"hydra.sweep.dir={sweep}"], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    ids, seeds = [], []
    for job in job_dirs(sweep):
        rows = [json.loads(x) for x in (job / "predictions.jsonl").read_text().splitlines()]
        ids.append(sorted(row["id"] for row in rows))
        cfg = yaml.safe_load((job / "config.yaml").read_text())
        seeds.append(cfg["seed"])
        assert cfg["dataset"]["sample_seed"] == 0
        assert json.loads((job / "run.json").read_text())["config"]["dataset"]["sample_seed"] == 0
    assert sorted(seeds) == [0, 1] and len(ids[0]) == 50 and ids[0] == ids[1]
