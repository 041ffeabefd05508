"""run.json and the resume fingerprint (issue 18: the record of a run, a resume that keeps its
promise)."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from kgreason.data.metaqa import load_metaqa
from kgreason.record import ResumeConfigMismatch, check_resume, fingerprint, run_record
from kgreason.textio import files_read


def _cfg(**over):
    cfg = OmegaConf.create({"seed": 0, "resume": True, "example_workers": 1,
                            "reasoner": {"_target_": "x.Rag", "hops": None, "max_hops": 2},
                            "dataset": {"limit": 10}, "llm": {"model": "m", "api_key_env": "K"},
                            "llm_cache": {"dir": "/a", "mode": "readwrite"}, "tracking": {"mode": "offline"}})
    for k, v in over.items():
        OmegaConf.update(cfg, k, v, force_add=True)
    return cfg


def test_fingerprint_ignores_how_a_run_goes_but_not_what_it_computes():
    base, _ = fingerprint(_cfg())
    assert fingerprint(_cfg(example_workers=8))[0] == base
    assert fingerprint(_cfg(**{"llm_cache.dir": "/elsewhere"}))[0] == base
    assert fingerprint(_cfg(**{"tracking.mode": "disabled"}))[0] == base
    assert fingerprint(_cfg(**{"reasoner.max_hops": 3}))[0] != base
    assert fingerprint(_cfg(**{"llm.model": "other"}))[0] != base


def test_resume_with_another_config_refuses_and_names_the_keys(tmp_path):
    check_resume(tmp_path, _cfg())
    check_resume(tmp_path, _cfg(example_workers=4))  # same computation: fine
    with pytest.raises(ResumeConfigMismatch) as e:
        check_resume(tmp_path, _cfg(**{"reasoner.max_hops": 3, "llm.model": "other"}))
    msg = str(e.value)
    assert "reasoner.max_hops: 2 -> 3" in msg and "llm.model: 'm' -> 'other'" in msg
    assert "resume_allow_changes=true" in msg
    check_resume(tmp_path, _cfg(**{"reasoner.max_hops": 3}), allow_changes=True)
    rec = json.loads((tmp_path / "fingerprint.json").read_text())
    assert rec["history"][-1]["changed"] == ["reasoner.max_hops"]
    check_resume(tmp_path, _cfg(**{"reasoner.max_hops": 3}))  # the new config is now the dir's


def test_run_record_lists_data_files_with_hashes_git_and_versions(tmp_path):
    p = tmp_path / "q.jsonl"
    p.write_text('{"id": "1", "question": "what movies did [A] star in", "answers": ["B"]}\n')
    load_metaqa(str(p))
    rec = run_record(_cfg(**{"llm.api_key": "sk-should-not-appear-123"}))
    entry = rec["data_files"][str(p.resolve())]
    import hashlib
    assert entry == {"sha256": hashlib.sha256(p.read_bytes()).hexdigest(), "bytes": p.stat().st_size}
    assert rec["config"]["llm"]["api_key"] == "<redacted>" and "sk-should" not in json.dumps(rec)
    assert set(rec["git"]) == {"commit", "dirty"} and rec["versions"]["numpy"]
    assert str(p.resolve()) in files_read()


def test_resume_takes_a_data_path_spelled_otherwise_but_not_another_file(tmp_path, monkeypatch):
    """A first sitting with ``KGREASON_DATA=../shared/data`` and a second with the default (the
    absolute path) read the same file: the second resumes (it once refused, naming dataset.path)."""
    data = tmp_path / "shared" / "data"
    data.mkdir(parents=True)
    (data / "q.jsonl").write_text("{}\n")
    (data / "other.jsonl").write_text("{}\n")
    work = tmp_path / "main"
    work.mkdir()
    monkeypatch.chdir(work)
    run = tmp_path / "run"
    run.mkdir()
    check_resume(run, _cfg(**{"dataset.path": "../shared/data/q.jsonl"}))
    check_resume(run, _cfg(**{"dataset.path": str(data / "q.jsonl")}))  # the same file
    rec = json.loads((run / "fingerprint.json").read_text())
    assert rec["history"][-1] == {"from": rec["history"][-1]["from"], "changed": [], "respelled_paths": True}
    with pytest.raises(ResumeConfigMismatch, match="dataset.path"):
        check_resume(run, _cfg(**{"dataset.path": str(data / "other.jsonl")}))
