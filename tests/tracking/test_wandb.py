"""WandbTracker offline: read the .wandb transaction log back with wandb's protobuf Record."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from conftest import compose_cfg
from wandb_reader import read_records

pytest.importorskip("wandb")


def _records(path: Path, timeout: float = 20.0):
    """Records of a finished run; waits for the core process to flush the ``exit`` record."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            recs = read_records(path)
            if any(r.WhichOneof("record_type") == "exit" for r in recs):
                return recs
        except Exception:  # noqa: BLE001 - a record in flight
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            return recs
        time.sleep(0.2)


def _parse(run_dir: Path):
    files = list(run_dir.glob("run-*.wandb"))
    assert len(files) == 1, list(run_dir.iterdir())
    recs = _records(files[0])
    by: dict[str, list] = {}
    for r in recs:
        by.setdefault(r.WhichOneof("record_type"), []).append(r)
    config = {}
    for r in by.get("run", []):
        for u in r.run.config.update:
            config[u.key] = json.loads(u.value_json)
    for r in by.get("config", []):
        for u in r.config.update:
            config[u.key] = json.loads(u.value_json)
    summary, history = {}, []
    for r in by.get("summary", []):
        for u in r.summary.update:
            key = u.key or "/".join(u.nested_key)
            summary[key] = json.loads(u.value_json)
    for r in by.get("history", []):
        row = {}
        for it in r.history.item:
            row[it.key or "/".join(it.nested_key)] = json.loads(it.value_json)
        history.append(row)
    logged_files = [f.path for r in by.get("files", []) for f in r.files.files]
    return {"run": by["run"][0].run, "config": config, "summary": summary, "history": history,
            "files": logged_files, "exit": by.get("exit", [])}


def _offline_dir(out_dir: Path) -> Path:
    runs = sorted((out_dir / "wandb").glob("offline-run-*"))
    assert runs, f"no offline run under {out_dir}/wandb"
    return runs[-1]


def test_tracker_offline_records(tmp_path):
    from kgreason.tables import plot_hops
    from kgreason.tracking.wandb_tracker import WandbTracker

    cfg = {"dataset": {"name": "embedded", "limit": 5}, "llm": {"api_key": "<redacted>"}, "seed": 3}
    t = WandbTracker(str(tmp_path), run_config=cfg, project="kgr-test", group="sweep-1", tags=["a", "b"],
                     mode="offline")
    t.log_metrics({"metric/hits_at_1": 0.25, "llm/calls": 7, "skip": "text"})
    t.log_table("predictions", [{"id": "q1", "prediction": "Paris", "correct": 1.0, "trace": ["x"]},
                                {"id": "q2", "prediction": "", "correct": None, "extra_col": 2}])
    counts = {"1": 3, "2": 5, "3": 0, "unreachable": 1, "unlinked": 2}
    t.log_histogram("hops/distribution", counts)
    png = plot_hops(counts, tmp_path / "hops.png")
    t.log_image("hops/plot", str(png))
    t.close()
    t.close()  # idempotent

    rd = _offline_dir(tmp_path)
    assert rd.parent == tmp_path / "wandb"
    rec = _parse(rd)
    assert rec["run"].project == "kgr-test" and rec["run"].run_group == "sweep-1"
    assert list(rec["run"].tags) == ["a", "b"] and rec["run"].display_name == tmp_path.name
    assert rec["config"]["dataset"] == {"name": "embedded", "limit": 5}
    assert rec["config"]["llm"] == {"api_key": "<redacted>"} and rec["config"]["seed"] == 3
    assert rec["summary"]["metric/hits_at_1"] == 0.25 and rec["summary"]["llm/calls"] == 7
    assert "skip" not in rec["summary"]
    assert any(h.get("metric/hits_at_1") == 0.25 for h in rec["history"])
    # histogram over numeric buckets 1..3
    hist = [h for h in rec["history"] if h.get("hops/distribution/_type") == "histogram"]
    assert hist and hist[0]["hops/distribution/values"] == [3, 5, 0]
    assert hist[0]["hops/distribution/bins"] == [0.5, 1.5, 2.5, 3.5]
    assert rec["exit"], "run not finished"
    # tables are files under files/media/table, with the rows
    tables = {p.name.split("_")[0]: p for p in (rd / "files" / "media" / "table").rglob("*.table.json")}
    pred_files = [p for p in (rd / "files" / "media" / "table").rglob("predictions_*.table.json")]
    assert pred_files, tables
    tab = json.loads(pred_files[0].read_text())
    assert tab["columns"] == ["id", "prediction", "correct", "trace", "extra_col"]
    assert tab["data"][0][:3] == ["q1", "Paris", 1.0] and tab["data"][1][4] == 2
    hop_tabs = list((rd / "files" / "media" / "table").rglob("*distribution_table*.table.json"))
    assert hop_tabs
    assert json.loads(hop_tabs[0].read_text())["data"] == [[k, v] for k, v in counts.items()]
    assert list((rd / "files" / "media" / "images").rglob("*.png"))
    assert any(f.startswith("media/table/predictions") for f in rec["files"])


def test_run_with_wandb_tracking(tmp_path, monkeypatch):
    from kgreason.runner.run import run

    monkeypatch.setenv("KGREASON_WANDB_GROUP", "e2e-group")
    cfg = compose_cfg(["tracking=wandb", "dataset.limit=12"], tmp_path)
    res = run(cfg, tmp_path)
    rd = _offline_dir(tmp_path)
    rec = _parse(rd)
    assert rec["run"].run_group == "e2e-group"
    m = json.loads((tmp_path / "metrics.json").read_text())
    for k, v in m.items():
        if isinstance(v, (int, float)) and v == v:
            assert rec["summary"][k] == pytest.approx(v), k
    assert rec["summary"]["metric/hits_at_1"] == res.metrics["metric/hits_at_1"]
    assert rec["config"]["dataset"]["limit"] == 12
    media = rd / "files" / "media"
    assert list(media.rglob("predictions_*.table.json")) and list(media.rglob("*.png"))
    pred = json.loads(next(media.rglob("predictions_*.table.json")).read_text())
    assert len(pred["data"]) == 12
    assert (tmp_path / "hops.png").exists() and (tmp_path / "hops.json").exists()


def test_group_from_sweep_dir():
    from kgreason.tracking.wandb_tracker import _default_group, group_from_sweep_dir

    assert group_from_sweep_dir("outputs/multirun/2026-11-23/06-45-00") == "2026-11-23_06-45-00"
    assert group_from_sweep_dir("/tmp/sweep") == "tmp_sweep"
    assert _default_group() is None  # not inside a Hydra multirun


def test_wandb_is_offline_by_default_and_nothing_claims_it_without_tracking(tmp_path, monkeypatch):
    """The offline default is the tracking config's (``mode: ${oc.env:WANDB_MODE,offline}``), not
    a process-wide variable: a run with ``tracking=none`` sets no ``WANDB_MODE``, which made
    transformers print "Running in WANDB offline mode" on runs that track nothing."""
    import os
    import subprocess
    import sys

    from omegaconf import OmegaConf

    monkeypatch.delenv("WANDB_MODE", raising=False)
    cfg = compose_cfg(["tracking=wandb"], tmp_path)
    assert OmegaConf.select(cfg, "tracking.mode") == "offline"
    env = {k: v for k, v in os.environ.items() if k != "WANDB_MODE"}
    out = subprocess.run([sys.executable, "-c", "import os, kgreason.app; print(os.environ.get('WANDB_MODE'))"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "None", out.stderr
