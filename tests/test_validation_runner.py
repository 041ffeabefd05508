"""The validation runner (experiments/validation/run_validation.py, the package
experiments/validation_runner/) keeps what it measured: a later sitting that fails or is killed never
erases a row that has metrics (the table is built over several sittings)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

MACHINE_ROOT = "/" + "work" + "/"  # the development machine's root (spelled apart: `git grep` stays clean)
RUNNER = Path(__file__).resolve().parents[1] / "experiments" / "validation" / "run_validation.py"


def _package():
    """The runner's package (experiments/validation_runner/), as the entry point imports it."""
    experiments = str(RUNNER.parents[1])
    if experiments not in sys.path:
        sys.path.insert(0, experiments)
    import validation_runner

    return validation_runner


def _runner(tmp_path, monkeypatch, rc: int):
    mod = _package()
    monkeypatch.setattr(mod.places, "HERE", tmp_path)
    monkeypatch.setattr(mod.places, "ROOT", tmp_path)
    monkeypatch.setattr(mod.places, "BUNDLES", tmp_path / "bundles")  # a test never writes into the committed bundles/
    monkeypatch.setattr(subprocess, "call", lambda cmd, cwd=None: rc)  # the row's run: exits rc
    return mod


def test_a_failed_sitting_keeps_the_measured_row(tmp_path, monkeypatch):
    measured = {"command": "…", "n": 7, "n_examples": 7, "metrics": {"hits_at_1": 0.5}, "wall_s": 60.0}
    (tmp_path / "validation_n7.json").write_text(json.dumps({"metaqa_io": measured}))
    mod = _runner(tmp_path, monkeypatch, rc=1)
    assert mod.main(["--n", "7", "--rows", "metaqa_io,metaqa_rag", "--cache", str(tmp_path / "c")]) == 0
    table = json.loads((tmp_path / "validation_n7.json").read_text())
    assert table["metaqa_io"] == {**measured, "last_sitting": "failed (exit 1)"}
    assert table["metaqa_rag"]["status"] == "failed (exit 1)" and "metrics" not in table["metaqa_rag"]


def test_a_python_without_the_projects_dependencies_runs_no_row_and_writes_nothing(tmp_path, monkeypatch, capsys):
    """Started with a Python that lacks the project's packages (the system `python` rather than
    `.venv/bin/python`), every row's run failed alike and each was written down as a failed
    sitting; it now stops first in one line naming the interpreter and what to run instead."""
    mod = _runner(tmp_path, monkeypatch, rc=1)
    monkeypatch.setattr(mod.sitting, "DEPS", ("hydra", "no_such_module_for_kgreason"))
    assert mod.main(["--n", "7", "--rows", "metaqa_io,metaqa_rag", "--cache", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert "no_such_module_for_kgreason" in err and ".venv/bin/python" in err
    assert not list(tmp_path.glob("validation_*.json"))


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
    assert "llm.route=transformers" in mod.command("metaqa_io", 20, str(tmp_path))  # qwen's default is auto
    mod.main(["--n", "5", "--rows", "metaqa_io", "--route", "llamacpp", "--cache", str(tmp_path / "c")])
    assert json.loads((tmp_path / "validation_n5_llamacpp.json").read_text())["metaqa_io"]["status"] == "failed (exit 1)"
    assert not (tmp_path / "validation_n5.json").exists()
    md = mod.markdown()
    assert "**validation_n5_llamacpp** (dev split, llama.cpp route)" in md and "| metaqa_io | 5 | failed" in md


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


def _fake_run(run_dir: Path, values: list[float], metric: str = "hits_at_1") -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    rows = [{"id": str(i), "metrics": {metric: v}} for i, v in enumerate(values)]
    (run_dir / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run_dir / "metrics.json").write_text(json.dumps({"run/n_examples": len(values),
                                                      f"metric/{metric}": sum(values) / len(values)}))


def test_the_heldout_split_never_reaches_the_dev_questions_and_reports_intervals(tmp_path, monkeypatch):
    mod = _runner(tmp_path, monkeypatch, rc=0)
    cmd = mod.command("metaqa_rag", 100, str(tmp_path), route="llamacpp", split="heldout")
    assert "questions.split=heldout" in cmd and "questions.heldout_n=100" in cmd and "questions.dev_size=20" in cmd
    assert not [c for c in cmd if c.startswith("dataset.limit")]
    assert "hydra.run.dir=outputs/validation/heldout_n100_llamacpp/metaqa_rag" in cmd
    # the dev split is the first 20 questions: a larger dev N would reach into the held-out ones
    import pytest

    with pytest.raises(SystemExit):
        mod.main(["--n", "30", "--split", "dev", "--rows", "metaqa_io"])
    base = tmp_path / "outputs" / "validation" / "heldout_n10"
    _fake_run(base / "metaqa_io", [0.0] * 10)
    _fake_run(base / "metaqa_rag", [1.0] * 6 + [0.0] * 4)
    assert mod.main(["--n", "10", "--split", "heldout", "--rows", "metaqa_rag", "--cache", str(tmp_path / "c")]) == 0
    e = json.loads((tmp_path / "validation_heldout_n10.json").read_text())["metaqa_rag"]
    lo, hi = e["ci95"]["hits_at_1"]
    assert e["split"] == "heldout" and lo < 0.6 < hi and 0 <= lo and hi <= 1
    pd = e["paired"]
    assert pd["against"] == "metaqa_io" and pd["by_metric"]["hits_at_1"]["diff"] == 0.6
    assert pd["by_metric"]["hits_at_1"]["mcnemar_p"] == float(f"{2 * 0.5 ** 6:.3g}")  # 6 discordant pairs, all one way
    md = mod.markdown()
    assert md.index("held-out split") < md.index("dev split") if "dev split" in md else "held-out split" in md


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
    files = sorted(RUNNER.parent.glob("validation_*.json"))  # dev and held-out tables alike
    assert any("heldout" in f.name for f in files)
    for f in files:
        text = f.read_text()
        assert MACHINE_ROOT not in text and "/root/" not in text and "/home/" not in text, f.name


def test_logoskg_dx_rounds_are_compared_question_by_question_and_a_no_op_resume_keeps_the_wall_time(
        tmp_path, monkeypatch):
    """The LogosKG-Dx row pairs its rounds with its no-KG baseline on the same questions; re-running
    a finished row (to recompute its statistics) keeps the sitting's wall time that answered it."""
    import os

    mod = _runner(tmp_path, monkeypatch, rc=0)
    run = tmp_path / "outputs" / "validation" / "heldout_n6" / "ddxplus_logoskg_dx"
    run.mkdir(parents=True)
    base, r1, r2 = [0, 0, 1, 0, 0, 0], [0, 1, 1, 0, 0, 0], [1, 1, 1, 1, 0, 1]
    rows = [{"id": str(i), "metrics": {"dx_baseline_f1": b, "dx_round1_f1": x, "dx_round2_f1": y}}
            for i, (b, x, y) in enumerate(zip(base, r1, r2))]
    (run / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    os.utime(run / "predictions.jsonl", (1, 1))  # written by an earlier sitting
    (run / "metrics.json").write_text(json.dumps({"run/n_examples": 6, "llm/calls": 12, "metric/dx_f1": 5 / 6}))
    (run / "timing.json").write_text(json.dumps({"wall_s": 0.5}))
    earlier = {"ddxplus_logoskg_dx": {"metrics": {"dx_f1": 5 / 6}, "wall_s": 300.0, "backend_calls": 12}}
    (tmp_path / "validation_heldout_n6.json").write_text(json.dumps(earlier))
    assert mod.main(["--n", "6", "--split", "heldout", "--rows", "ddxplus_logoskg_dx", "--cache", str(tmp_path / "c")]) == 0
    e = json.loads((tmp_path / "validation_heldout_n6.json").read_text())["ddxplus_logoskg_dx"]
    within = e["paired_within"]
    assert within["dx_round2_f1 - dx_baseline_f1"]["diff"] == round(4 / 6, 4)
    assert within["dx_round1_f1 - dx_baseline_f1"]["diff"] == round(1 / 6, 4)
    assert within["dx_round2_f1 - dx_round1_f1"]["n"] == 6
    assert e["wall_s"] == 300.0 and e["no_new_rows"] is True
    assert "dx_round2_f1 - dx_baseline_f1: +0.667" in mod.markdown()


def test_each_row_keeps_its_per_question_values_and_pairs_against_a_committed_base(tmp_path, monkeypatch):
    """A row's per-question values go into the committed JSON, so the paired difference can be taken
    on another machine whose outputs/ holds only the new row (the base row's run dir is gone; its
    committed values stand in, on the questions both answered)."""
    mod = _runner(tmp_path, monkeypatch, rc=0)
    name = "heldout_n8"
    _fake_run(tmp_path / "outputs" / "validation" / name / "metaqa_io", [0.0] * 8)
    assert mod.main(["--n", "8", "--split", "heldout", "--rows", "metaqa_io", "--cache", str(tmp_path / "c")]) == 0
    io = json.loads((tmp_path / f"validation_{name}.json").read_text())["metaqa_io"]
    assert io["per_question"] == {str(i): {"hits_at_1": 0.0} for i in range(8)}
    import shutil

    shutil.rmtree(tmp_path / "outputs" / "validation" / name / "metaqa_io")  # another machine: no run dir
    _fake_run(tmp_path / "outputs" / "validation" / name / "metaqa_tog", [1.0] * 5 + [0.0] * 3)
    assert mod.main(["--n", "8", "--split", "heldout", "--rows", "metaqa_tog", "--cache", str(tmp_path / "c")]) == 0
    tog = json.loads((tmp_path / f"validation_{name}.json").read_text())["metaqa_tog"]
    hits = tog["paired"]["by_metric"]["hits_at_1"]
    assert tog["paired"]["against"] == "metaqa_io" and hits["diff"] == 0.625 and hits["n"] == 8
    assert tog["paired"]["base_from"] == f"validation_{name}.json"


def test_a_smaller_table_pairs_against_the_nested_questions_of_a_larger_one(tmp_path, monkeypatch):
    """The held-out draw is nested (the first 30 of N = 100 are N = 30's questions): an N = 30 row with
    no N = 30 base pairs against the larger table's committed base on the questions they share."""
    mod = _runner(tmp_path, monkeypatch, rc=0)
    big = {str(i): {"hits_at_1": float(i % 2)} for i in range(12)}
    (tmp_path / "validation_heldout_n12.json").write_text(json.dumps({"metaqa_io": {"per_question": big}}))
    _fake_run(tmp_path / "outputs" / "validation" / "heldout_n4" / "metaqa_sgr", [1.0] * 4)
    assert mod.main(["--n", "4", "--split", "heldout", "--rows", "metaqa_sgr", "--cache", str(tmp_path / "c")]) == 0
    sgr = json.loads((tmp_path / "validation_heldout_n4.json").read_text())["metaqa_sgr"]
    hits = sgr["paired"]["by_metric"]["hits_at_1"]
    assert hits["n"] == 4 and hits["diff"] == 0.5 and sgr["paired"]["base_from"] == "validation_heldout_n12.json"


def test_collect_summarises_a_run_dir_without_running_it_and_marks_a_partial_row(tmp_path, monkeypatch):
    """``--collect`` reads each row's run dir as it stands (no model run): a row stopped early is
    committed with ``partial`` and its own N; an ablation finished before its full method is paired
    again once the full method's row exists."""
    mod = _runner(tmp_path, monkeypatch, rc=1)  # a run would fail: --collect must not start one
    runs = tmp_path / "outputs" / "validation" / "heldout_n6"
    _fake_run(runs / "metaqa_sgr", [1.0, 0.0, 1.0])
    m = json.loads((runs / "metaqa_sgr" / "metrics.json").read_text())
    (runs / "metaqa_sgr" / "metrics.json").write_text(json.dumps({**m, "run/partial": True}))
    _fake_run(runs / "metaqa_sgr_no_cypher", [0.0] * 6)
    assert mod.main(["--n", "6", "--split", "heldout", "--collect", "--rows", "metaqa_sgr,metaqa_sgr_no_cypher"]) == 0
    table = json.loads((tmp_path / "validation_heldout_n6.json").read_text())
    assert table["metaqa_sgr"]["partial"] is True and table["metaqa_sgr"]["n_examples"] == 3
    pd = table["metaqa_sgr_no_cypher"]["paired"]
    assert pd["against"] == "metaqa_sgr" and pd["by_metric"]["hits_at_1"]["n"] == 3
    assert "status" not in table["metaqa_sgr_no_cypher"]


def test_collect_leaves_a_row_without_metrics_out_of_the_table(tmp_path, monkeypatch, capsys):
    """A run still going (or killed before it wrote ``metrics.json``) has nothing to summarise:
    ``--collect`` says so and writes no row, rather than a ``failed`` one for a run that did not
    fail."""
    mod = _runner(tmp_path, monkeypatch, rc=1)
    run = tmp_path / "outputs" / "validation" / "heldout_n6" / "metaqa_tog"
    run.mkdir(parents=True)
    (run / "predictions.jsonl").write_text(json.dumps({"id": "q1", "metrics": {"hits_at_1": 1.0}}) + "\n")
    assert mod.main(["--n", "6", "--split", "heldout", "--collect", "--rows", "metaqa_tog"]) == 0
    out = tmp_path / "validation_heldout_n6.json"
    assert not out.exists() or "metaqa_tog" not in json.loads(out.read_text())
    err = capsys.readouterr().err
    assert "metaqa_tog" in err and "no metrics.json yet" in err and "failed" not in err


def _real_runner():
    return _package()


def test_the_generated_doc_tables_agree_with_the_json():
    """README's method table and docs/validation.md's row tables are made from the committed JSON
    (`run_validation.py --write-docs`); a hand edit of either, or a JSON change without a rewrite, fails here."""
    assert _real_runner().write_docs(check=True) == []


#: what a committed row holds once its bundle replayed identical on today's code (issue 71)
CURRENT = {"bundle": {"file": "bundles/t/x.tar.gz", "bytes": 1000, "sha256": "0" * 64},
           "currency": {"verdict": "current", "at": "abc123def456", "line": "identical"}}


def test_the_method_table_takes_each_method_from_its_current_held_out_row():
    mod = _real_runner()
    table = mod.method_table()
    rows, every = mod.heldout_rows(current_only=True), mod.heldout_rows()
    for reasoner, _, row, _, metric, label in mod.METHODS:
        line = next(ln for ln in table.splitlines() if ln.startswith(f"| `{reasoner}` |"))
        if row in rows:
            assert f"{label} {rows[row]['metrics'][metric]:.2f}" in line, line
        else:
            assert "| – | no current row (" in line and (row not in every or mod.verdict(every[row]) != "current"), line


def test_a_fresh_heldout_draw_files_apart_and_pairs_only_within_itself(tmp_path, monkeypatch):
    """``--heldout-skip 30`` (issue 41 item 8: a row re-measured on questions disjoint from its first
    draw): the run skips the first 30 of the seeded order, its run dirs and table are
    ``heldout_n<N>_skip30``, a dev split refuses it, and its rows never pair with a table of the
    first draw (no shared question)."""
    import pytest

    mod = _runner(tmp_path, monkeypatch, rc=1)
    cmd = mod.command("hotpotqa_subqrag", 30, str(tmp_path), route="llamacpp", split="heldout", skip=30)
    assert "questions.heldout_skip=30" in cmd
    assert "hydra.run.dir=outputs/validation/heldout_n30_skip30_llamacpp/hotpotqa_subqrag" in cmd
    assert not any("heldout_skip" in c for c in mod.command("hotpotqa_subqrag", 30, str(tmp_path), split="heldout"))
    with pytest.raises(SystemExit):
        mod.main(["--n", "5", "--heldout-skip", "30", "--rows", "hotpotqa_io", "--cache", str(tmp_path / "c")])
    (tmp_path / "validation_heldout_n30_llamacpp.json").write_text(json.dumps(
        {"hotpotqa_io": {"metrics": {"em": 0.1}, "per_question": {"1": {"em": 1.0}}}}))
    assert mod.base_values("hotpotqa_io", "heldout_n30_skip30_llamacpp", "llamacpp", {}) is None
    assert mod.base_values("hotpotqa_io", "heldout_n20_llamacpp", "llamacpp", {}) is not None


def test_the_papers_kgqa_rows_report_their_ceiling_and_run_below_the_link_rate(tmp_path, monkeypatch):
    """Issue 43 item 5: CWQ and WebQSP rows on the Freebase slice, each KG row beside the slice's
    coverage ceiling (``*_retrieval_only``, no LLM call, paired with nothing); CWQ links under
    half its questions there, so its rows lower the link-rate preflight on purpose."""
    mod = _runner(tmp_path, monkeypatch, rc=0)
    for ds in ("cwq", "webqsp"):
        assert {f"{ds}_{r}" for r in ("retrieval_only", "io", "rag", "reknos", "tog", "sgr")} <= set(mod.ROWS)
        assert mod.baseline_of(f"{ds}_retrieval_only") is None and mod.baseline_of(f"{ds}_rag") == f"{ds}_io"
        assert "kg=freebase_slice" in mod.command(f"{ds}_rag", 20, str(tmp_path))
    assert "preflight.min_link_rate=0" in mod.command("cwq_rag", 20, str(tmp_path))
    # SGR's Cypher prompt on Freebase outgrows the route's 4,096-token context (8,198 tokens seen)
    for ds in ("cwq", "webqsp"):
        ctx = [x for x in mod.command(f"{ds}_sgr", 30, str(tmp_path), route="llamacpp") if x.startswith("llm.n_ctx=")]
        assert ctx == ["llm.n_ctx=32768"], ctx
    assert [x for x in mod.command("webqsp_rag", 30, str(tmp_path), route="llamacpp")
            if x.startswith("llm.n_ctx=")] == ["llm.n_ctx=4096"]
    for ds in ("musique", "twowiki"):
        assert {f"{ds}_{r}" for r in ("io", "rag_text", "subqrag")} <= set(mod.ROWS) and ds in mod.KEY_METRICS


def test_a_subqrag_row_reports_its_fallbacks_and_the_triples_its_update_wrote(tmp_path, monkeypatch):
    """Issue 41: a SubQRAG row says where Eq. 4's update could write (the sub-questions that fell
    back to the passages, from the traces) and how many triples it wrote; w/o Update writes none."""
    mod = _runner(tmp_path, monkeypatch, rc=1)
    runs = tmp_path / "outputs" / "validation" / "heldout_n3"

    def sub(source):
        return {"kind": "subquestion", "name": "q1", "data": {"source": source}}

    for row, written in (("hotpotqa_subqrag", [4, 0, 3]), ("hotpotqa_subqrag_no_update", [0, 0, 0])):
        d = runs / row
        d.mkdir(parents=True)
        traces = [[sub("passages"), sub("triples")], [sub("triples")], [sub("passages"), sub("passages")]]
        rows = [{"id": str(i), "metrics": {"em": 1.0, "triples_written": w}, "trace": tr}
                for i, (w, tr) in enumerate(zip(written, traces))]
        (d / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (d / "metrics.json").write_text(json.dumps({"run/n_examples": 3, "metric/em": 1.0,
                                                    "metric/triples_written": sum(written) / 3,
                                                    "metric/triples_written_total": sum(written)}))
    _fake_run(runs / "hotpotqa_io", [0.0, 0.0, 1.0], metric="em")
    assert mod.main(["--n", "3", "--split", "heldout", "--collect",
                     "--rows", "hotpotqa_io,hotpotqa_subqrag,hotpotqa_subqrag_no_update"]) == 0
    table = json.loads((tmp_path / "validation_heldout_n3.json").read_text())
    full, ablated = table["hotpotqa_subqrag"], table["hotpotqa_subqrag_no_update"]
    assert (full["fallbacks"], full["questions_with_fallback"], full["triples_written"]) == (3, 2, 7)
    assert full["per_question"]["2"]["triples_written"] == 3.0  # per question, in the row
    assert (ablated["fallbacks"], ablated["triples_written"]) == (3, 0)
    assert "fallbacks" not in table["hotpotqa_io"]
    md = mod.markdown()
    assert "fallbacks 3 on 2 questions, triples written 7" in md and "triples written 0" in md


def test_a_sitting_stopped_by_hand_is_committed_as_a_partial_row_not_a_failure(tmp_path, monkeypatch):
    """A row stopped with SIGTERM (exit 143) after its run summed up what it answered is a partial
    row with its own N, at once; an older metrics.json left from an earlier sitting does not count,
    and a plain failure is still a failure."""
    runs = tmp_path / "outputs" / "validation" / "heldout_n6"

    def stopped(cmd, cwd=None):  # the run answers 3 of 6, gets SIGTERM, writes run/partial, exits 143
        _fake_run(runs / "cwq_sgr", [1.0, 0.0, 1.0])
        preds = runs / "cwq_sgr" / "predictions.jsonl"
        rows = [{**json.loads(x), "usage": {"calls": 2, "cache_hits": 0, "latency_s": s}}
                for x, s in zip(preds.read_text().splitlines(), (30, 60, 90))]
        preds.write_text("".join(json.dumps(r) + "\n" for r in rows))
        m = json.loads((runs / "cwq_sgr" / "metrics.json").read_text())
        (runs / "cwq_sgr" / "metrics.json").write_text(json.dumps({**m, "run/partial": True}))
        return 143

    mod = _runner(tmp_path, monkeypatch, rc=143)
    monkeypatch.setattr(subprocess, "call", stopped)
    assert mod.main(["--n", "6", "--split", "heldout", "--rows", "cwq_sgr", "--cache", str(tmp_path / "c")]) == 0
    e = json.loads((tmp_path / "validation_heldout_n6.json").read_text())["cwq_sgr"]
    assert e["partial"] is True and e["n_examples"] == 3 and "status" not in e and "last_sitting" not in e
    # no end-of-run timing.json: the cost shown is the model's own time, read from the rows
    assert e["wall_s"] is None and e["llm_seconds_per_question"] == 60.0
    assert "| 3 of 6 (partial) |" in mod.markdown()
    assert "– (LLM 60 s/q over 3)" in mod.markdown()

    # killed before it wrote anything new: the earlier partial metrics are not this sitting's
    import os

    old = runs / "cwq_sgr" / "metrics.json"
    os.utime(old, (0, 0))
    mod2 = _runner(tmp_path, monkeypatch, rc=143)
    assert mod2.main(["--n", "6", "--split", "heldout", "--rows", "cwq_sgr", "--cache", str(tmp_path / "c")]) == 0
    e = json.loads((tmp_path / "validation_heldout_n6.json").read_text())["cwq_sgr"]
    assert e["last_sitting"] == "failed (exit 143)" and e["partial"] is True


def test_stop_after_sends_the_row_sigterm_once_its_budget_is_spent(tmp_path, monkeypatch):
    """``--stop-after S``: a real child process that would run far longer gets SIGTERM after S
    seconds, and its exit status (a terminated process's) comes back to be committed as partial."""
    import sys
    import time

    mod = _real_runner()
    monkeypatch.setattr(mod.places, "ROOT", tmp_path)
    t0 = time.monotonic()
    rc = mod.run_row([sys.executable, "-c", "import time; time.sleep(60)"], stop_after=0.5)
    assert rc == -15 and time.monotonic() - t0 < 30
    assert mod.run_row([sys.executable, "-c", "raise SystemExit(3)"], stop_after=30) == 3
    assert mod.stopped_by_hand(-15, tmp_path / "metrics.json", 0) is False  # nothing written: not a partial row


def test_stop_at_sends_the_row_sigterm_once_its_run_dir_holds_k_answered_questions(tmp_path, monkeypatch):
    """``--stop-at K``: a real child process answering a question every 0.2 s (one an error the run
    would retry, one answered twice) gets SIGTERM once its predictions hold K answered questions,
    not before (a row already at K is not run: the next test)."""
    import sys
    import time

    mod = _real_runner()
    monkeypatch.setattr(mod.places, "ROOT", tmp_path)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    script = ("import json, sys, time\n"
              "rows = [{'id': 'a'}, {'id': 'b', 'error': 'x'}, {'id': 'a'}, {'id': 'c'}, {'id': 'b'}] + "
              "[{'id': f'q{i}'} for i in range(200)]\n"
              "with open(sys.argv[1], 'a') as f:\n"
              "    for r in rows:\n"
              "        f.write(json.dumps(r) + '\\n'); f.flush(); time.sleep(0.2)\n")
    t0 = time.monotonic()
    rc = mod.run_row([sys.executable, "-c", script, str(run_dir / "predictions.jsonl")], stop_at=4, run_dir=run_dir)
    assert rc == -15 and time.monotonic() - t0 < 20
    assert 4 <= mod.sitting.answered(run_dir) <= 4 + 2 / 0.2 * mod.sitting.POLL_S
    assert mod.sitting.answered(run_dir) < 200, "stopped long before the child's own end"
    (run_dir / "predictions.jsonl").write_text('{"id": "a"}\n{"id": "b", "error": "x"}\n{"id": "c"}\n{"id": "c"}\n')
    assert mod.sitting.answered(run_dir) == 2  # b's last row is an error: the run retries it


def test_a_row_already_at_stop_at_is_not_run(tmp_path, monkeypatch, capsys):
    mod = _runner(tmp_path, monkeypatch, rc=0)
    run_dir = tmp_path / "outputs" / "validation" / "n7" / "metaqa_io"
    run_dir.mkdir(parents=True)
    (run_dir / "predictions.jsonl").write_text("".join(f'{{"id": "q{i}"}}\n' for i in range(5)))
    monkeypatch.setattr(mod.sitting, "run_row", lambda *a, **k: pytest.fail("a row already at --stop-at was run"))
    assert mod.main(["--n", "7", "--rows", "metaqa_io", "--stop-at", "5", "--cache", str(tmp_path / "c")]) == 0
    assert "--stop-at 5 reached; not run" in capsys.readouterr().err
    assert not (tmp_path / "validation_n7.json").exists()


def test_stop_at_the_rows_whole_n_lets_the_run_end_by_itself(tmp_path, monkeypatch, capsys):
    """``--stop-at K`` with K the row's N (more is refused): the run is not stopped at its last question
    (a SIGTERM there reached the run while it summed up its 100 questions, and it wrote no metrics),
    and a run dir holding all N without its metrics is run again to sum them up, not skipped."""
    mod = _runner(tmp_path, monkeypatch, rc=0)
    run_dir = tmp_path / "outputs" / "validation" / "n7" / "metaqa_io"
    run_dir.mkdir(parents=True)
    (run_dir / "predictions.jsonl").write_text("".join(f'{{"id": "q{i}"}}\n' for i in range(7)))
    seen = []
    monkeypatch.setattr(mod.sitting, "run_row", lambda cmd, stop_after, stop_at, run_dir: seen.append(stop_at) or 0)
    assert mod.main(["--n", "7", "--rows", "metaqa_io", "--stop-at", "7", "--cache", str(tmp_path / "c")]) == 0
    assert seen == [None]
    assert "the row runs to its end" in capsys.readouterr().err


def _another_sitting(tmp_path, monkeypatch, row, n, earlier, finish_run, sitting_s, resumed=True):
    """A row committed as partial after an earlier sitting (``earlier`` adds to its entry) is run
    again: the sitting writes a 4-question run, ``finish_run(run_dir)`` adds to it and returns the
    exit status, and the runner's clock says the sitting took ``sitting_s``. ``resumed``: the run
    dir holds the earlier sitting's 2 answered questions (else none: the row measured afresh).
    Returns the runner module and the row's new entry."""
    runs = tmp_path / "outputs" / "validation" / f"heldout_n{n}"
    if resumed:
        _fake_run(runs / row, [1.0, 0.0])
    first = {"command": "…", "split": "heldout", "n": n, "n_examples": 2, "metrics": {"hits_at_1": 0.5},
             "partial": True, **earlier}
    out = tmp_path / f"validation_heldout_n{n}.json"
    out.write_text(json.dumps({row: first}))

    def sitting(cmd, cwd=None):
        _fake_run(runs / row, [1.0, 0.0, 1.0, 0.0])
        return finish_run(runs / row)

    mod = _runner(tmp_path, monkeypatch, rc=0)
    monkeypatch.setattr(subprocess, "call", sitting)
    times = iter([1000.0, 1000.0 + sitting_s])
    monkeypatch.setattr(time, "time", lambda: next(times))
    assert mod.main(["--n", str(n), "--split", "heldout", "--rows", row, "--cache", str(tmp_path / "c")]) == 0
    return mod, json.loads(out.read_text())[row]


def test_a_row_finished_over_several_sittings_costs_the_sum_of_its_sittings(tmp_path, monkeypatch):
    """A partial row resumed to the end: its timing.json holds the last sitting only, so the row's
    seconds per question is the sum of the runner's sitting times over its N, with a note."""
    def finish(run_dir):
        (run_dir / "timing.json").write_text(json.dumps({"wall_s": 90.0}))
        return 0

    mod, e = _another_sitting(tmp_path, monkeypatch, "cwq_reknos", 4, {"sitting_s": 300.0}, finish, 100.0)
    assert "partial" not in e and e["sittings_s"] == [300.0, 100.0]
    assert e["seconds_per_question"] == 100.0 and mod.seconds_per_question(e) == 100.0 and "2 sittings" in e["wall_note"]
    assert "| 400 (2 sittings) |" in mod.markdown()  # the generated table shows the sum, not the last sitting


def test_a_partial_row_whose_last_sitting_only_sums_up_still_costs_all_its_sittings(tmp_path, monkeypatch):
    """A sitting stopped after its last question but before its metrics leaves every question
    answered; the next sitting appends no row and only sums up. The row's cost is still the sum of
    its sittings, not the few seconds of the last one (which made the README's SGR row read < 1 s a
    question)."""
    import os

    def sums_up(run_dir):
        (run_dir / "timing.json").write_text(json.dumps({"wall_s": 5.0}))
        os.utime(run_dir / "predictions.jsonl", (1.0, 1.0))  # written by an earlier sitting
        return 0

    mod, e = _another_sitting(tmp_path, monkeypatch, "cwq_reknos", 4, {"sittings_s": [300.0, 500.0]}, sums_up, 8.0)
    assert "partial" not in e and e["sittings_s"] == [300.0, 500.0, 8.0]
    assert mod.seconds_per_question(e) == 202.0 and "3 sittings" in e["wall_note"]


def test_the_model_time_per_question_does_not_depend_on_the_call_cache(tmp_path, monkeypatch):
    """``llm_seconds_per_question`` averages the questions the backend answered in full (no cache
    hit), so a question replayed from the cache (latency 0) does not pull it down; a sitting that
    only replays keeps the earlier figure instead of recording nothing or 0."""
    runs = tmp_path / "outputs" / "validation" / "heldout_n4"
    usage = [{"calls": 10, "cache_hits": 0, "latency_s": 600.0},
             {"calls": 0, "cache_hits": 1, "latency_s": 0.0},  # answered from the cache
             {"calls": 9, "cache_hits": 1, "latency_s": 330.0},  # partly from the cache
             {"calls": 10, "cache_hits": 0, "latency_s": 500.0}]

    def stopped(cmd, cwd=None):
        _fake_run(runs / "cwq_sgr", [1.0, 0.0, 1.0, 0.0])
        preds = runs / "cwq_sgr" / "predictions.jsonl"
        rows = [{**json.loads(x), "usage": u} for x, u in zip(preds.read_text().splitlines(), usage)]
        preds.write_text("".join(json.dumps(r) + "\n" for r in rows))
        m = json.loads((runs / "cwq_sgr" / "metrics.json").read_text())
        (runs / "cwq_sgr" / "metrics.json").write_text(json.dumps({**m, "run/partial": True, "llm/calls": 29,
                                                                   "llm/cache_hits": 2}))
        return 143

    mod = _runner(tmp_path, monkeypatch, rc=143)
    monkeypatch.setattr(subprocess, "call", stopped)
    assert mod.main(["--n", "4", "--split", "heldout", "--rows", "cwq_sgr", "--cache", str(tmp_path / "c")]) == 0
    e = json.loads((tmp_path / "validation_heldout_n4.json").read_text())["cwq_sgr"]
    assert e["llm_seconds_per_question"] == 550.0 and e["llm_seconds_questions"] == 2
    assert "– (LLM 550 s/q over 2)" in mod.markdown()

    # a sitting that replays every call from the cache: the earlier figure stands
    import shutil

    def replay(cmd, cwd=None):
        shutil.rmtree(runs / "cwq_sgr")
        _fake_run(runs / "cwq_sgr", [1.0, 0.0, 1.0, 0.0])
        preds = runs / "cwq_sgr" / "predictions.jsonl"
        rows = [{**json.loads(x), "usage": {"calls": 0, "cache_hits": 3, "latency_s": 0.0}}
                for x in preds.read_text().splitlines()]
        preds.write_text("".join(json.dumps(r) + "\n" for r in rows))
        m = json.loads((runs / "cwq_sgr" / "metrics.json").read_text())
        (runs / "cwq_sgr" / "metrics.json").write_text(json.dumps({**m, "llm/calls": 0, "llm/cache_hits": 12}))
        return 0

    monkeypatch.setattr(subprocess, "call", replay)
    assert mod.main(["--n", "4", "--split", "heldout", "--rows", "cwq_sgr", "--cache", str(tmp_path / "c")]) == 0
    e = json.loads((tmp_path / "validation_heldout_n4.json").read_text())["cwq_sgr"]
    assert e["replayed_from_cache"] is True
    assert e["llm_seconds_per_question"] == 550.0 and e["llm_seconds_questions"] == 2


def test_a_partial_row_measured_afresh_costs_its_own_sitting_only(tmp_path, monkeypatch):
    """A partial row whose run dir is gone (recorded stale and measured again, or run on another
    machine) starts from its first question: its cost is this sitting's, not the sum with the
    sittings of the measurement it replaces (webqsp_sgr read "2 sittings, 7156 s" for a 970 s one)."""
    def stopped(run_dir):
        m = json.loads((run_dir / "metrics.json").read_text())
        (run_dir / "metrics.json").write_text(json.dumps({**m, "run/partial": True}))
        return 143

    _, e = _another_sitting(tmp_path, monkeypatch, "webqsp_sgr", 6, {"sitting_s": 6186.0, "sittings_s": [6186.0]},
                            stopped, 970.0, resumed=False)
    assert e["partial"] is True and e["sitting_s"] == 970.0
    assert "sittings_s" not in e and "wall_note" not in e


def test_a_partial_row_resumed_and_still_partial_notes_all_its_sittings(tmp_path, monkeypatch):
    """A partial row resumed and stopped again: the note names every sitting and their sum, so a
    note from an earlier sitting is not lost."""
    def stopped(run_dir):
        m = json.loads((run_dir / "metrics.json").read_text())
        (run_dir / "metrics.json").write_text(json.dumps({**m, "run/partial": True}))
        return 143

    _, e = _another_sitting(tmp_path, monkeypatch, "webqsp_reknos", 6,
                            {"sitting_s": 300.0, "sittings_s": [300.0]}, stopped, 200.0)
    assert e["partial"] is True and e["sittings_s"] == [300.0, 200.0]
    assert "2 sittings" in e["wall_note"] and "500 s" in e["wall_note"] and "partial" in e["wall_note"]


def test_a_sitting_stopped_in_the_set_up_is_noted_as_preparing_and_its_time_counts(tmp_path, monkeypatch):
    """A sitting whose budget ends while the row's run still prepares (SubQRAG's index of a large
    pool takes several sittings) is not a failure: the row says how far the set-up got and keeps
    the sitting's time; the sitting that answers the questions counts every sitting in the row's
    cost. A signal with no marker from this sitting is still a failure."""
    runs = tmp_path / "outputs" / "validation" / "heldout_n4"
    run_dir = runs / "twowiki_subqrag"
    out = tmp_path / "validation_heldout_n4.json"

    def stopped_preparing(done):
        def call(cmd, cwd=None):
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / "prepare_stopped.json").write_text(json.dumps({
                "status": "stopped", "stage": "prepare", "interrupted_by": "SIGTERM", "examples_done": 0,
                "n_expected": 4, "progress": {"what": "SubQRAG indexing", "done": done, "total": 6256,
                                              "unit": "passage"}}))
            return 143
        return call

    def sitting(mod, call, seconds):
        monkeypatch.setattr(subprocess, "call", call)
        times = iter([1000.0, 1000.0 + seconds])
        monkeypatch.setattr(time, "time", lambda: next(times))
        assert mod.main(["--n", "4", "--split", "heldout", "--rows", "twowiki_subqrag", "--cache",
                         str(tmp_path / "c")]) == 0
        return json.loads(out.read_text())["twowiki_subqrag"]

    mod = _runner(tmp_path, monkeypatch, rc=143)
    e = sitting(mod, stopped_preparing(800), 7000.0)
    assert "metrics" not in e and e["prepare_sittings_s"] == [7000.0]
    assert e["prepare_progress"]["done"] == 800 and "failed" not in e["status"]
    assert e["status"].startswith("preparing: SubQRAG indexing 800 of 6256 passage after 1 sitting (7000 s)")
    assert "preparing: SubQRAG indexing 800 of 6256" in mod.markdown()

    e = sitting(mod, stopped_preparing(1600), 6000.0)
    assert e["prepare_sittings_s"] == [7000.0, 6000.0] and "after 2 sittings (13000 s)" in e["status"]

    import os

    os.utime(run_dir / "prepare_stopped.json", (0, 0))  # killed again before it said anything: a failure
    e = sitting(mod, lambda cmd, cwd=None: 143, 100.0)
    assert e["status"] == "failed (exit 143)" and e["prepare_sittings_s"] == [7000.0, 6000.0]

    def answered(cmd, cwd=None):  # the set-up finishes (the marker goes) and the questions are answered
        (run_dir / "prepare_stopped.json").unlink()
        _fake_run(runs / "twowiki_subqrag_tmp", [1.0, 0.0, 1.0, 0.0], metric="em")
        for f in (runs / "twowiki_subqrag_tmp").iterdir():
            f.replace(run_dir / f.name)
        (run_dir / "timing.json").write_text(json.dumps({"wall_s": 3000.0}))
        return 0

    e = sitting(mod, answered, 3000.0)
    assert e["n_examples"] == 4 and "status" not in e and "prepare_sittings_s" not in e
    assert e["sittings_s"] == [7000.0, 6000.0, 3000.0] and e["seconds_per_question"] == 4000.0
    assert "3 sittings" in e["wall_note"] and "2 of them preparing" in e["wall_note"]


def test_a_row_is_marked_from_its_replay_verdict_not_from_its_files_blob_ids(tmp_path, monkeypatch):
    """Issue 71: a row records the blob ids of its method's files when it is measured (the record
    of the code it measured), but the generator marks it from its bundle's replay on today's code
    (``currency``): a changed file that changes no request leaves the row current, and a stale
    verdict marks it whatever files changed."""
    mod = _runner(tmp_path, monkeypatch, 0)
    for rel in ("kgreason/reasoners/sgr/reasoner.py", "conf/reasoner/sgr.yaml", "kgreason/reasoners/prompts/sgr/schema.txt"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(f"{rel} as measured\n")
    bundle = {"file": "bundles/t/metaqa_sgr.tar.gz", "bytes": 1000, "sha256": "0" * 64}
    entry = {"metrics": {"hits_at_1": 0.5}, "n_examples": 30, "n": 30, "command": "", "unparseable_replies": 0,
             "llm_calls_per_question": 9.0, "bundle": bundle,
             "code": {"commit": "abc", "files": mod.code_stamp("metaqa_sgr")},
             "currency": {"verdict": "current", "line": "identical", "at": "def456789012"}}
    (tmp_path / "kgreason/reasoners/prompts/sgr/schema.txt").write_text("rewritten\n")
    assert mod.code_changed("metaqa_sgr", entry) == ["kgreason/reasoners/prompts/sgr/schema.txt"]  # the record
    assert mod.row_notes("metaqa_sgr", entry, {}) == []
    stale = {**entry, "currency": {"verdict": "stale", "at": "def456789012",
                                   "line": "stale: example q1, request structure (purpose answer): the method now "
                                           "asks something else"}}
    (note,) = mod.row_notes("metaqa_sgr", stale, {})
    assert note.startswith("stale at def456789012: stale: example q1, request structure")
    (tmp_path / "validation_heldout_n30_llamacpp.json").write_text(json.dumps({"metaqa_sgr": stale}))
    line = next(ln for ln in mod.markdown().splitlines() if ln.startswith("| metaqa_sgr |"))
    assert line.startswith("| metaqa_sgr | 30 ¹ |") and "stale at def456789012 ¹" in line
    unchecked = {k: v for k, v in entry.items() if k != "currency"}
    assert mod.row_notes("metaqa_sgr", unchecked, {}) == ["unchecked: its bundle has not been replayed on today's code"]


def test_the_readme_shows_only_current_rows_and_history_rows_sit_apart(tmp_path, monkeypatch):
    """Item 4 of issue 71: the README's method table takes a method's score only from a current
    row (its bundle replays identical on today's code); a stale row stays in docs/validation.md,
    marked; a row retired to the history section (``--retire``) leaves the tables for a list that
    names the code it measured."""
    mod = _runner(tmp_path, monkeypatch, 0)
    base = {"n": 30, "n_examples": 30, "command": "", "unparseable_replies": 0, "llm_calls_per_question": 1.0,
            "bundle": {"file": "bundles/t/x.tar.gz", "bytes": 1000, "sha256": "0" * 64}, "code": {"commit": "c0de"}}
    io = {**base, "metrics": {"hits_at_1": 0.1}, "currency": {"verdict": "current", "at": "aaa", "line": "identical"}}
    rag = {**base, "metrics": {"hits_at_1": 0.6}, "currency": {"verdict": "stale", "at": "aaa", "line": "stale: …"}}
    cot = {**base, "metrics": {"hits_at_1": 0.2}}
    (tmp_path / "validation_heldout_n30_llamacpp.json").write_text(
        json.dumps({"metaqa_io": io, "metaqa_rag": rag, "metaqa_cot": cot}))
    table = mod.method_table().splitlines()
    assert "Hits@1 0.10" in next(ln for ln in table if ln.startswith("| `io` |"))
    assert "no current row (stale: docs/validation.md)" in next(ln for ln in table if ln.startswith("| `rag` |"))
    assert "no current row (unchecked" in next(ln for ln in table if ln.startswith("| `cot` |"))
    assert mod.retire("heldout_n30_llamacpp", "metaqa_rag", "measured before issue 70's prompts; not re-run") == (
        "heldout_n30_llamacpp/metaqa_rag: moved to the history section (measured before issue 70's prompts; not re-run)")
    doc = mod.markdown()
    tables, history = doc.split("#### History: rows that will not be re-measured")
    assert "| metaqa_rag |" not in tables and "| metaqa_io |" in tables
    assert "heldout_n30_llamacpp/metaqa_rag, N 30: hits_at_1 0.600" in history and "measured on c0de" in history
    assert "no current row (retired to the history section" in next(
        ln for ln in mod.method_table().splitlines() if ln.startswith("| `rag` |"))


def test_stamps_from_git_history_take_the_first_commit_holding_the_rows_metrics(tmp_path, monkeypatch):
    mod = _runner(tmp_path, monkeypatch, 0)

    def git(*a):
        subprocess.run(["git", "-C", str(tmp_path), *a], check=True, capture_output=True)

    git("init", "-q")
    git("config", "user.email", "t@t")
    git("config", "user.name", "t")
    code = tmp_path / "kgreason" / "reasoners" / "io.py"
    code.parent.mkdir(parents=True)
    table = tmp_path / "validation_heldout_n30.json"
    code.write_text("v1\n")
    table.write_text(json.dumps({"metaqa_io": {"metrics": {"hits_at_1": 0.1}}}))
    git("add", "-A")
    git("commit", "-qm", "first sitting")
    code.write_text("v2\n")
    table.write_text(json.dumps({"metaqa_io": {"metrics": {"hits_at_1": 0.2}}}))
    git("add", "-A")
    git("commit", "-qm", "re-measured on v2")
    code.write_text("v3\n")
    git("commit", "-qam", "code changed after")
    assert mod.stamp_from_history(table) == ["metaqa_io"]
    e = json.loads(table.read_text())["metaqa_io"]
    assert e["code"]["files"]["kgreason/reasoners/io.py"] == mod.blob_id(b"v2\n")
    assert mod.code_changed("metaqa_io", e) == ["kgreason/reasoners/io.py"]
    assert mod.stamp_from_history(table) == []  # stamped rows are left as they are


def test_the_method_table_marks_ceilings_pools_and_rows_that_cannot_be_compared(tmp_path, monkeypatch):
    """Issue 57: the kg_dx row is a structural ceiling, rag_text (N = 100, its pool) and subqrag
    (N = 30 of another draw, another pool) are not comparable; all generated from the JSON."""
    table = _real_runner().method_table()
    line = {ln.split("|")[1].strip(): ln for ln in table.splitlines() if ln.startswith("| `")}
    assert "structural ceiling, not a method score" in line["`kg_dx`"]
    assert "pool: 4,858 passages, the paragraphs of every question of the dataset's sample" in line["`rag_text`"]
    assert "Every score shown is current" in table
    mod = _runner(tmp_path, monkeypatch, rc=0)
    base = {"command": "", "split": "heldout", "metrics": {"em": 0.3}, "unparseable_replies": 0,
            "llm_calls_per_question": 1.0, **CURRENT}
    rag_text = {**base, "n": 100, "n_examples": 100, "pool_passages": 4858, "pool_from": "the sample's paragraphs"}
    subqrag = {**base, "n": 30, "n_examples": 30, "pool_passages": 286, "pool_from": "the 30 questions run",
               "command": "… questions.heldout_skip=30 …"}
    (tmp_path / "validation_heldout_n100_llamacpp.json").write_text(json.dumps({"hotpotqa_rag_text": rag_text}))
    (tmp_path / "validation_heldout_n30_llamacpp.json").write_text(json.dumps({"hotpotqa_subqrag": subqrag}))
    line = {ln.split("|")[1].strip(): ln for ln in mod.method_table().splitlines() if ln.startswith("| `")}
    assert "not comparable with `subqrag` (other questions and another passage pool)" in line["`rag_text`"]
    assert "pool: 286 passages" in line["`subqrag`"] and "not comparable with `rag_text`" in line["`subqrag`"]


def test_the_method_table_shows_a_partial_row_as_partial_only_where_no_finished_one_exists(tmp_path, monkeypatch):
    mod = _runner(tmp_path, monkeypatch, rc=0)
    row = {"command": "…", "split": "heldout", "n": 30, "metrics": {"hits_at_1": 0.5}, "unparseable_replies": 0,
           "llm_calls_per_question": 20.0, **CURRENT}
    (tmp_path / "validation_heldout_n30_llamacpp.json").write_text(json.dumps(
        {"metaqa_sgr": {**row, "n_examples": 9, "partial": True}}))
    line = next(ln for ln in mod.method_table().splitlines() if ln.startswith("| `sgr` |"))
    assert "| 9 of 30 (partial) |" in line and "Hits@1 0.50" in line
    (tmp_path / "validation_heldout_n20_llamacpp.json").write_text(json.dumps(
        {"metaqa_sgr": {**row, "n": 20, "n_examples": 20, "metrics": {"hits_at_1": 0.25}}}))
    line = next(ln for ln in mod.method_table().splitlines() if ln.startswith("| `sgr` |"))
    assert "| 20 |" in line and "Hits@1 0.25" in line and "partial" not in line


def test_a_row_timed_with_many_cached_replies_says_so_beside_its_seconds(tmp_path, monkeypatch):
    """A sitting that replayed a good part of its replies from the call cache has a low wall time
    a question; the table says how many replies were cached and the model's own time, and says
    nothing of a row with no (or few) cached replies."""
    mod = _runner(tmp_path, monkeypatch, rc=0)
    row = {"command": "…", "split": "heldout", "n": 100, "n_examples": 100, "metrics": {"hits_at_1": 0.05},
           "unparseable_replies": 0, "llm_calls_per_question": 1.0, "wall_s": 117.6,
           "cache_hits": 30, "backend_calls": 70, "llm_seconds_per_question": 1.7, "llm_seconds_questions": 70,
           **CURRENT}
    (tmp_path / "validation_heldout_n100_llamacpp.json").write_text(json.dumps({"metaqa_io": row}))
    line = next(ln for ln in mod.method_table().splitlines() if ln.startswith("| `io` |"))
    assert "| 1 |" in line
    assert ("wall time with 30 of 100 model replies from the call cache (model time 1.7 s a question "
            "over the 70 questions answered without it)") in line
    (tmp_path / "validation_heldout_n100_llamacpp.json").write_text(json.dumps(
        {"metaqa_io": {**row, "cache_hits": 2, "backend_calls": 98}}))
    line = next(ln for ln in mod.method_table().splitlines() if ln.startswith("| `io` |"))
    assert "call cache" not in line
    # a cell that is not one sitting's wall time (a partial row's model time, a figure summed by
    # hand over sittings) is not called one
    for other in ({"wall_s": None, "partial": True, "n_examples": 9}, {"seconds_per_question": 23}):
        (tmp_path / "validation_heldout_n100_llamacpp.json").write_text(json.dumps({"metaqa_io": {**row, **other}}))
        line = next(ln for ln in mod.method_table().splitlines() if ln.startswith("| `io` |"))
        assert "wall time" not in line
    # a row the runner timed over several sittings (``sittings_s``): their summed wall time a
    # question holds the cached replies as much as one sitting's does
    (tmp_path / "validation_heldout_n100_llamacpp.json").write_text(json.dumps({"metaqa_io": {
        **row, "seconds_per_question": 86.1, "sittings_s": [665.4, 7941.6], "wall_note": "2 sittings"}}))
    line = next(ln for ln in mod.method_table().splitlines() if ln.startswith("| `io` |"))
    assert "| 86 |" in line and ("s / question is the 2 sittings' wall time with 30 of 100 model replies from the "
                                 "call cache (model time 1.7 s a question") in line


def test_the_method_table_names_the_commits_its_rows_are_current_at(tmp_path, monkeypatch):
    mod = _runner(tmp_path, monkeypatch, rc=0)
    row = {"command": "…", "split": "heldout", "n": 30, "n_examples": 30, "metrics": {"hits_at_1": 0.5},
           "unparseable_replies": 0, "llm_calls_per_question": 1.0}
    other = {**CURRENT, "currency": {**CURRENT["currency"], "at": "fed987"}}
    (tmp_path / "validation_heldout_n30_llamacpp.json").write_text(json.dumps(
        {"metaqa_io": {**row, **CURRENT}, "metaqa_cot": {**row, **other}, "metaqa_rag": row}))
    table = mod.method_table()
    assert "replays identical on the code of abc123def456, fed987 (CI replays" in table
    assert "no current row (unreplayable" in next(ln for ln in table.splitlines() if ln.startswith("| `rag` |"))


def test_a_text_row_records_its_pool_from_its_own_run(tmp_path):
    """A rag_text/SubQRAG row carries its passage pool (size from ``retrieval/pool_size``, what it
    holds from the run's config), so the tables print it and refuse to compare other pools; a row
    re-measured after issue 57 had lost its pool note because the runner did not record it."""
    mod = _real_runner()
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("dataset:\n  corpus: null\n  pool: protocol\n")
    assert mod.pool_info(run, {"retrieval/pool_size": 4858.0}, 100) == {
        "pool_passages": 4858,
        "pool_from": "the paragraphs of every question of the dataset's sample (dataset.pool=protocol: the same for any N)"}
    (run / "config.yaml").write_text("dataset:\n  corpus: /x/corpus.json\n  pool: questions_run\n")
    assert mod.pool_info(run, {"retrieval/pool_size": 527.0}, 30) == {
        "pool_passages": 527, "pool_from": "the dataset's corpus file + the paragraphs of the 30 questions run"}
    (run / "config.yaml").write_text("dataset:\n  pool: protocol\nreasoner:\n  corpus: my_pool.jsonl\n")
    assert mod.pool_info(run, {"retrieval/pool_size": 12.0}, 30)["pool_from"] == "reasoner.corpus=my_pool.jsonl"
    assert mod.pool_info(run, {}, 30) == {}  # a KG row: no pool


def _committed_row(name: str, row: str) -> dict:
    return json.loads((RUNNER.parent / f"validation_{name}.json").read_text())[row]


def test_from_bundle_restores_a_rows_run_dir_and_its_replies_so_the_same_command_resumes(tmp_path, monkeypatch, capsys):
    """A partial row moved to a new machine came back by hand (unpack the bundle's run into the
    run dir, copy its replies into the call cache as a shard); ``--from-bundle`` does both, checked,
    and the cache then answers the bundle's keys."""
    import shutil

    from kgreason.storage.bundle import cache_records, open_bundle
    from kgreason.storage.callstore import LLM_STORE, KeyValueStore

    name, row = "heldout_n100_llamacpp", "metaqa_io"
    entry = _committed_row(name, row)
    mod = _runner(tmp_path, monkeypatch, rc=0)
    (tmp_path / "bundles" / name).mkdir(parents=True)
    shutil.copy(RUNNER.parent / entry["bundle"]["file"], tmp_path / entry["bundle"]["file"])
    (tmp_path / f"validation_{name}.json").write_text(json.dumps({row: entry}))
    ran = []
    monkeypatch.setattr(mod.sitting, "run_row", lambda cmd, *budget: ran.append(cmd) or 1)
    cache = tmp_path / "cache"
    argv = ["--split", "heldout", "--n", "100", "--route", "llamacpp", "--rows", row, "--cache", str(cache),
            "--from-bundle", "--no-bundle"]
    mod.main(argv)
    run_dir = tmp_path / "outputs" / "validation" / name / row
    answered = (run_dir / "predictions.jsonl").read_text().splitlines()
    assert len(answered) == entry["n_examples"] and ran, "restored, then the row's run was started"
    err = capsys.readouterr().err
    assert f"restored {len(answered)} answered question(s)" in err
    keys = cache_records(open_bundle(tmp_path / entry["bundle"]["file"], tmp_path / "b"))
    store = KeyValueStore(cache / LLM_STORE, "readonly")
    assert keys and all(store.get(k) is not None for k in keys)
    # the run dir now holds answers: a second restore would overwrite them, and is refused
    assert mod.main(argv) == 2
    assert "already holds answered questions" in capsys.readouterr().err


def test_from_bundle_refuses_a_bundle_that_is_not_the_rows_and_a_row_without_one(tmp_path, monkeypatch, capsys):
    import shutil

    name, row = "heldout_n100_llamacpp", "metaqa_io"
    entry = _committed_row(name, row)
    mod = _runner(tmp_path, monkeypatch, rc=0)
    (tmp_path / "bundles" / name).mkdir(parents=True)
    other = _committed_row(name, "metaqa_cot")["bundle"]["file"]
    shutil.copy(RUNNER.parent / other, tmp_path / entry["bundle"]["file"])  # another row's bundle under its name
    (tmp_path / f"validation_{name}.json").write_text(json.dumps({row: entry, "metaqa_cot": {"n": 100}}))
    argv = ["--split", "heldout", "--n", "100", "--route", "llamacpp", "--cache", str(tmp_path / "c"), "--from-bundle"]
    assert mod.main(argv + ["--rows", row]) == 2
    err = capsys.readouterr().err
    assert "is not the file the JSON row records" in err and "Nothing was run" in err
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "c").exists()
    assert mod.main(argv + ["--rows", "metaqa_cot"]) == 2
    assert "has no committed bundle" in capsys.readouterr().err


def test_a_row_carries_its_funnel_into_its_doc_line(tmp_path, monkeypatch):
    """Issue 72, item 3: a row whose run recorded a funnel (``funnel/*`` of metrics.json) keeps its
    shares in stage order and its doc line lists each stage with the questions that reached it; a
    row without one (measured before issue 72) keeps its line as it was."""
    mod = _runner(tmp_path, monkeypatch, rc=1)
    runs = tmp_path / "outputs" / "validation" / "heldout_n4"
    _fake_run(runs / "metaqa_io", [0.0, 0.0, 1.0, 1.0])
    _fake_run(runs / "metaqa_sgr", [0.0, 1.0, 1.0, 1.0])
    m = json.loads((runs / "metaqa_sgr" / "metrics.json").read_text())
    m.update({"funnel/_stages": ["linked", "cypher_validated", "decided_by"], "funnel/linked": 0.75,
              "funnel/cypher_validated": 0.0, "funnel/decided_by/paths": 0.5, "funnel/decided_by/io": 0.25})
    (runs / "metaqa_sgr" / "metrics.json").write_text(json.dumps(m))
    assert mod.main(["--n", "4", "--split", "heldout", "--collect", "--rows", "metaqa_io,metaqa_sgr"]) == 0
    table = json.loads((tmp_path / "validation_heldout_n4.json").read_text())
    assert list(table["metaqa_sgr"]["funnel"].items()) == [
        ("linked", 0.75), ("cypher_validated", 0.0), ("decided_by=io", 0.25), ("decided_by=paths", 0.5)]
    assert "funnel" not in table["metaqa_io"]
    md = mod.markdown()
    line = next(x for x in md.splitlines() if x.startswith("| metaqa_sgr |"))
    assert "funnel (of 4): linked 3 → cypher_validated 0 → decided_by=io 1 → decided_by=paths 2" in line
    assert "funnel" not in next(x for x in md.splitlines() if x.startswith("| metaqa_io |"))


def test_sgr_table2_rows_run_one_factor_at_a_time_under_one_setting():
    """Issue 72: the held-out Table 2 arms (full, no_schema, dataset_topics, no_cypher) are rows,
    each paired with full SGR: "Without Schema" keeps the model's own Eq. 2 V_q (ee10034), so it
    differs from full SGR in the schema alone (it was paired with the dataset-topics row while it
    also took the dataset's topics), and every MetaQA SGR row runs under the same dev-chosen reply
    caps and structured output (issue 70), so a paired difference is the ablation's alone."""
    rows = _package().rows
    arms = ["metaqa_sgr", "metaqa_sgr_no_schema", "metaqa_sgr_dataset_topics", "metaqa_sgr_no_cypher"]
    assert set(arms) <= set(rows.ROWS)
    assert rows.baseline_of("metaqa_sgr_no_schema") == "metaqa_sgr"
    assert rows.baseline_of("metaqa_sgr_dataset_topics") == "metaqa_sgr"
    assert rows.baseline_of("metaqa_sgr_no_cypher") == "metaqa_sgr"
    for row, (data, reasoner, extra) in rows.ROWS.items():
        if reasoner == "sgr" and "dataset=metaqa" in data:
            assert set(rows.METAQA_SGR) <= set(extra), row
            cmd = rows.command(row, 100, "c", route="llamacpp", split="heldout")
            assert sum(a.startswith("reasoner.max_tokens=") for a in cmd) == 1, row
            assert "llm.structured_output=true" in cmd, row


def test_every_ablation_row_differs_from_the_row_it_is_paired_with_by_its_own_ablation_only():
    """A paired difference is one factor's: an ablation row's baseline runs every setting the row's
    ablation does not change. Read from the ablation presets (conf/ablation/*.yaml), so a preset
    that comes to change another setting (as "Without Schema" once also swapped V_q) fails here
    until the pairing says what it then compares."""
    import yaml

    rows = _package().rows
    conf = Path(__file__).resolve().parents[1] / "conf" / "ablation"

    def settings(row: str) -> dict:
        out: dict = {}
        for x in rows.ROWS[row][2]:
            if x.startswith("ablation="):
                for name in x.split("=", 1)[1].strip("[]").split(","):
                    out.update((yaml.safe_load((conf / f"{name}.yaml").read_text()) or {}).get("reasoner") or {})
        return out

    for row in rows.ROWS:
        base = rows.baseline_of(row)
        if not any(x.startswith("ablation=") for x in rows.ROWS[row][2]) or base is None:
            continue
        mine, theirs = settings(row), settings(base)
        assert theirs.items() <= mine.items(), (row, base, theirs, mine)
        assert [x for x in rows.ROWS[row][2] if not x.startswith("ablation=")] == \
            [x for x in rows.ROWS[base][2] if not x.startswith("ablation=")], (row, base)


def test_the_method_table_says_which_settings_a_row_ran_with():
    """Issue 70: "the rows say which setting they used": a row run with structured output or
    dev-fitted caps says so beside its score; a row run with the defaults says nothing."""
    docs = _package().docs
    base = "KGREASON_DATA=../shared/data python -m kgreason reasoner=sgr dataset=metaqa kg=metaqa llm.n_threads=1"
    assert docs.settings_note({"command": base}) is None
    note = docs.settings_note({"command": base + " 'reasoner.max_tokens={step:80,default:512}' llm.structured_output=true"})
    assert note == ("run with per-prompt reply caps fitted on the dev split (`reasoner.max_tokens={step:80,default:512}`)"
                    " and `llm.structured_output=true` (docs/llm.md)")


def test_a_row_remeasured_at_a_larger_n_is_paired_with_its_earlier_row(tmp_path, monkeypatch):
    """Issue 70: a held-out row re-measured (N = 100, cheaper settings) is paired with the same row
    at N = 30 on the questions both answered, history row included, with both settings named."""
    mod = _package()
    monkeypatch.setattr(mod.places, "HERE", tmp_path)
    qs = [f"q{i}" for i in range(30)]
    old = {"metaqa_sgr": {"n": 30, "n_examples": 30, "metrics": {"hits_at_1": 0.5}, "command": "python -m kgreason reasoner=sgr",
                          "code": {"commit": "aaa"}, "history": {"why": "retired"},
                          "per_question": {q: {"hits_at_1": float(i % 2)} for i, q in enumerate(qs)}}}
    new = {"metaqa_sgr": {"n": 100, "n_examples": 40, "partial": True, "metrics": {"hits_at_1": 0.6},
                          "command": "python -m kgreason reasoner=sgr llm.structured_output=true", "code": {"commit": "bbb"},
                          "per_question": {**{q: {"hits_at_1": 1.0} for q in qs}, **{f"x{i}": {"hits_at_1": 0.0} for i in range(10)}}}}
    (tmp_path / "validation_heldout_n30_llamacpp.json").write_text(json.dumps(old))
    (tmp_path / "validation_heldout_n100_llamacpp.json").write_text(json.dumps(new))
    lines = [x for x in mod.docs.remeasured_section() if x.startswith("| metaqa_sgr")]
    assert len(lines) == 1, lines
    assert "40 (partial) vs 30 (history)" in lines[0] and "bbb vs aaa" in lines[0]
    assert "`llm.structured_output=true`" in lines[0] and "vs defaults" in lines[0]
    assert "hits_at_1 +0.500" in lines[0] and lines[0].endswith("| 30 |")  # 15 of 30 gained, on the 30 shared


def test_two_sittings_that_end_at_once_each_keep_their_row(tmp_path, monkeypatch):
    """One SIGTERM stopped three rows' sittings at once; each summed up and bundled its row, and the
    one that wrote last put back the table it had read before another's row was written: a stopped
    ``webqsp_sgr`` row (2 questions, its bundle written) was lost from the JSON. Here the other
    sitting's row lands while this sitting summarises its run; both rows must stay."""
    mod = _runner(tmp_path, monkeypatch, rc=0)
    runs = tmp_path / "outputs" / "validation" / "heldout_n4"
    out = tmp_path / "validation_heldout_n4.json"
    other = {"command": "…", "split": "heldout", "n": 4, "n_examples": 2, "metrics": {"hits_at_1": 0.5},
             "partial": True}

    def sitting(cmd, cwd=None):
        _fake_run(runs / "metaqa_rag", [1.0, 0.0, 1.0, 0.0])
        return 0

    summarise = mod.collect.summarise

    def summarise_while_another_sitting_writes(run_dir):
        table = json.loads(out.read_text()) if out.exists() else {}  # the other sitting ends now
        out.write_text(json.dumps({**table, "webqsp_sgr": other}))
        return summarise(run_dir)

    monkeypatch.setattr(subprocess, "call", sitting)
    monkeypatch.setattr(mod.collect, "summarise", summarise_while_another_sitting_writes)
    assert mod.main(["--n", "4", "--split", "heldout", "--rows", "metaqa_rag", "--cache", str(tmp_path / "c")]) == 0
    table = json.loads(out.read_text())
    assert table["webqsp_sgr"] == other and table["metaqa_rag"]["n_examples"] == 4


def test_table_writes_from_several_processes_lose_no_row(tmp_path):
    """:func:`validation_runner.tablefile.update` re-reads, changes and replaces a table under a
    lock on its folder: 4 processes that each hold their change for 0.3 s keep all 4 rows (without
    the lock, each read the table before the others wrote, and one row was left)."""
    _package()
    out = tmp_path / "validation_x.json"
    code = ("import sys, time; sys.path.insert(0, sys.argv[1]); from pathlib import Path; "
            "from validation_runner import tablefile; "
            "tablefile.update(Path(sys.argv[2]), lambda t: (time.sleep(0.3), t.__setitem__(sys.argv[3], {'n': 1})))")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(RUNNER.parents[1]), str(out), f"row{i}"])
             for i in range(4)]
    assert [p.wait(timeout=60) for p in procs] == [0] * 4
    assert sorted(json.loads(out.read_text())) == ["row0", "row1", "row2", "row3"]
    assert [p.name for p in tmp_path.iterdir()] == ["validation_x.json"]  # no lock or temp file left beside it


def test_check_current_lists_a_retired_row_and_leaves_its_record_alone(tmp_path, monkeypatch):
    """``--check-current --rows webqsp_sgr`` replayed the retired N = 30 row too and wrote a stale
    verdict at today's commit into its record, whose history note says its bundle was not replayed
    on today's code; CI lists a retired row without replaying it, and so does the check now."""
    mod = _runner(tmp_path, monkeypatch, rc=0)
    retired = {"n": 30, "bundle": {"file": "bundles/t/webqsp_sgr.tar.gz"},
               "history": {"why": "measured before issues 71-72 changed SGR"}}
    f = tmp_path / "validation_heldout_n30.json"
    f.write_text(json.dumps({"webqsp_sgr": retired}))
    monkeypatch.setattr(mod.currency, "replay_row", lambda *a, **k: pytest.fail("a retired row was replayed"))
    lines = []
    assert mod.currency.check_current(rows=["webqsp_sgr"], echo=lines.append) == []
    assert json.loads(f.read_text()) == {"webqsp_sgr": retired}
    assert lines == ["validation_heldout_n30/webqsp_sgr: retired (not replayed): measured before issues 71-72 changed SGR"]


def test_a_partial_row_of_a_split_smaller_than_n_shows_what_its_run_would_answer(tmp_path, monkeypatch):
    """WebQSP's held-out split holds 80 questions: a partial ``--n 100`` row showed "2 of 100"; its run
    says it expected 80 (``run/n_expected``), and the tables now say "2 of 80"."""
    runs = tmp_path / "outputs" / "validation" / "heldout_n100"

    def stopped(cmd, cwd=None):
        _fake_run(runs / "webqsp_sgr", [1.0, 0.0])
        m = json.loads((runs / "webqsp_sgr" / "metrics.json").read_text())
        (runs / "webqsp_sgr" / "metrics.json").write_text(json.dumps({**m, "run/partial": True, "run/n_expected": 80}))
        return 143

    mod = _runner(tmp_path, monkeypatch, rc=143)
    monkeypatch.setattr(subprocess, "call", stopped)
    assert mod.main(["--n", "100", "--split", "heldout", "--rows", "webqsp_sgr", "--cache", str(tmp_path / "c")]) == 0
    e = json.loads((tmp_path / "validation_heldout_n100.json").read_text())["webqsp_sgr"]
    assert e["n"] == 100 and e["n_expected"] == 80 and e["partial"] is True
    assert "| 2 of 80 (partial) |" in mod.markdown()


def test_a_table_write_that_fails_leaves_the_table_as_it_was_and_no_temp_file(tmp_path, monkeypatch):
    """A full disk during the write: the error reaches the caller, the table keeps its rows, and no
    half-written temporary file stays beside it."""
    _package()
    from validation_runner import tablefile

    out = tmp_path / "validation_x.json"
    tablefile.put_row(out, "a", {"n": 1})
    real = Path.write_text

    def full(self, *a, **k):
        if self.name.endswith(".tmp"):
            real(self, "{", encoding="utf-8")  # a part written, then the disk is full
            raise OSError(28, "No space left on device")
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(OSError):
        tablefile.put_row(out, "b", {"n": 2})
    monkeypatch.undo()
    assert json.loads(out.read_text()) == {"a": {"n": 1}}
    assert [p.name for p in tmp_path.iterdir()] == ["validation_x.json"]


def test_sgr_table2_block_sets_each_arm_beside_the_papers_column():
    """docs/sgr.md's Table 2 block (issue 72: "Write the paper's Table 2 beside it"): each arm is
    the row that runs the column's ablation preset, and the paper's value is the one printed in
    sgr.txt's Table 2 (ChatGPT on CWQ, Hits@1), read from experiments/sgr_table2/paper.yaml."""
    mod = _package()
    assert mod.docs.paper_table2() == {"none": 0.578, "sgr_no_schema": 0.4, "sgr_no_cypher": 0.431}
    for _, row, ablation in mod.docs.TABLE2_ARMS:
        presets = [x.split("=", 1)[1] for x in mod.rows.ROWS[row][2] if x.startswith("ablation=")]
        assert presets == ([] if ablation == "none" else [ablation]), row
        assert row == "metaqa_sgr" or mod.rows.baseline_of(row) == "metaqa_sgr", row


def test_sgr_table2_block_pairs_the_arms_from_their_committed_questions(tmp_path, monkeypatch):
    """The paired cell is computed from both rows' committed per-question values, on the questions
    both answered, whatever the arm's own ``paired`` record says (it was taken when the arm was
    committed, against the base as it then stood): an arm better on one question and worse on two
    reads "3, -0.333 …, 1 / 2"; the funnel columns are counts of questions."""
    mod = _package()
    monkeypatch.setattr(mod.places, "HERE", tmp_path)
    q = lambda *v: {f"q{i}": {"hits_at_1": x} for i, x in enumerate(v)}  # noqa: E731
    current = {"verdict": "current", "at": "abc"}
    base = {"command": "x", "n": 100, "n_examples": 4, "metrics": {"hits_at_1": 0.5}, "per_question": q(1, 1, 0, 0),
            "bundle": {"file": "b", "bytes": 1}, "currency": current, "partial": True,
            "funnel": {"rows_returned": 0.25, "decided_by=collaborative": 0.75, "decided_by=io": 0.25}}
    arm = {**base, "n_examples": 3, "per_question": q(0, 0, 1), "metrics": {"hits_at_1": 1 / 3},
           "paired": {"against": "metaqa_sgr", "by_metric": {"hits_at_1": {"diff": 0.0, "ci95": [0, 0], "n": 1}}}}
    (tmp_path / "validation_heldout_n100_llamacpp.json").write_text(
        json.dumps({"metaqa_sgr": base, "metaqa_sgr_no_schema": arm}))
    lines = mod.docs.table2_block().splitlines()
    full = next(x for x in lines if "`metaqa_sgr`," in x)
    no_schema = next(x for x in lines if "`metaqa_sgr_no_schema`," in x)
    assert "| 0.578 |" in full and full.endswith("| 1 | 0 | 0 | 0 | 3 | 1 |")
    assert "| 0.400 |" in no_schema and "| 3, -0.333 [" in no_schema and "], 1 / 2 |" in no_schema
    assert "no current row" in next(x for x in lines if "`metaqa_sgr_no_cypher`" in x)
