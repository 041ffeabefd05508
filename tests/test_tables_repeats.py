"""Repeats are not seeds (issue 59 item 1): runs of one identical configuration (the same
``run.json`` fingerprint, kgreason/record.py) on a day folder are one row, the newest complete
run's, and the others are listed as superseded; a partial repeat never blocks the table."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from kgreason.tables import build_tables, write_tables


def _dir(root: Path, name: str, reasoner: str, fp: str | None, hits: list[int], mtime: float,
         partial_of: int | None = None) -> Path:
    d = root / name
    (d / ".hydra").mkdir(parents=True)
    choices = {"dataset": "embedded", "reasoner": reasoner, "ablation": "none", "llm": "scripted", "kg": "embedded",
               "retriever": "scipy"}
    (d / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump({"hydra": {"runtime": {"choices": choices}}}))
    (d / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"reasoner={reasoner}"]))
    (d / "config.yaml").write_text(yaml.safe_dump({"seed": 0}))
    if fp is not None:
        (d / "run.json").write_text(json.dumps({"fingerprint": fp}))
    rows = [{"id": f"q{i}", "prediction": "x", "answers": ["x"], "metrics": {"hits_at_1": float(h)}, "error": None}
            for i, h in enumerate(hits)]
    (d / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    m = {"metric/hits_at_1": sum(hits) / len(hits), "run/n_examples": len(hits),
         "run/n_expected": partial_of or len(hits), "run/status": "partial" if partial_of else "complete"}
    (d / "metrics.json").write_text(json.dumps(m))
    os.utime(d / "metrics.json", (mtime, mtime))
    return d


def test_the_newest_complete_repeat_is_kept_and_the_others_are_listed(tmp_path):
    day = tmp_path / "2026-11-28"
    old = _dir(day, "09-00-00_embedded_io", "io", "aaa", [0, 0, 0, 0], 1000)
    new = _dir(day, "10-00-00_embedded_io", "io", "aaa", [1, 1, 0, 0], 2000)
    orphan = _dir(day, "11-00-00_embedded_io", "io", "aaa", [1], 3000, partial_of=4)  # newest, but partial
    _dir(day, "09-30-00_embedded_rag", "rag", "bbb", [1, 1, 1, 1], 1500)
    t = build_tables(day, ["reasoner"], ["metric"], ["hits_at_1"])  # no --allow-partial needed
    md = t.markdown()
    io = [ln for ln in md.splitlines() if ln.startswith("| io")]
    assert len(io) == 1 and "0.5" in io[0] and "partial" not in io[0], md
    note = next(w for w in t.warnings if "superseded" in w.lower())
    assert old.name in note and orphan.name in note and f"by {new.name}" in note, note
    assert "seed" not in " ".join(t.warnings).lower() or "seeds (" not in " ".join(t.warnings)
    assert set(t.df["job"]) == {new.name, "09-30-00_embedded_rag"}


def test_repeats_without_a_complete_run_keep_the_newest_partial_one(tmp_path):
    day = tmp_path / "d"
    a = _dir(day, "a", "io", "aaa", [1], 1000, partial_of=4)
    b = _dir(day, "b", "io", "aaa", [1, 0], 2000, partial_of=4)
    t = build_tables(day, ["reasoner"], ["metric"], ["hits_at_1"])
    assert set(t.df["job"]) == {b.name}
    assert any(a.name in w and f"by {b.name}" in w for w in t.warnings), t.warnings


def test_runs_without_a_fingerprint_are_left_as_they_were(tmp_path):
    """Dirs from before run.json (no fingerprint) are never merged: two complete ones stay two runs."""
    day = tmp_path / "d"
    _dir(day, "a", "io", None, [1, 1], 1000)
    _dir(day, "b", "io", None, [0, 0], 2000)
    t = build_tables(day, ["reasoner"], ["metric"], ["hits_at_1"])
    assert set(t.df["job"]) == {"a", "b"} and not any("superseded" in w.lower() for w in t.warnings)


def test_the_written_files_say_which_runs_were_superseded(tmp_path):
    day = tmp_path / "d"
    _dir(day, "a", "io", "aaa", [0, 0], 1000)
    _dir(day, "b", "io", "aaa", [1, 1], 2000)
    md = write_tables(day, ["reasoner"], ["metric"], ["hits_at_1"])["md"].read_text()
    assert "superseded by b" in md.lower(), md


def test_run_control_overrides_are_not_a_variant(tmp_path):
    """``resume=false`` (what the Ctrl-C line offers), ``example_workers=2`` or ``llm.delay_s=1``
    change how a run goes, not what it computes (kgreason/record.py NOT_FINGERPRINTED): a day folder
    where one run was started with them gets no ``variant`` column, and its label does not carry
    them; a setting that does change the result (``reasoner.k=5``) still makes a variant."""
    day = tmp_path / "d"
    io = _dir(day, "a", "io", "aaa", [1, 0], 1000)
    (io / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(
        ["reasoner=io", "resume=false", "example_workers=2", "llm.delay_s=1", "llm_cache.mode=readonly"]))
    _dir(day, "b", "rag", "bbb", [1, 1], 2000)
    t = build_tables(day, metrics=["hits_at_1"])
    assert "variant" not in t.df.columns or set(t.df["variant"]) <= {""}, t.df
    md = t.markdown()
    assert "resume" not in md and "example_workers" not in md and "delay_s" not in md, md
    (io / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(["reasoner=io", "resume=false", "reasoner.k=5"]))
    t = build_tables(day, metrics=["hits_at_1"])
    assert set(t.df["variant"]) == {"reasoner.k=5", ""}, t.df
