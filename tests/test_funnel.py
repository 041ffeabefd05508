"""The funnel machinery (issue 72, item 3): ``Trace.stage`` records a question's stages in its
``extra["funnel"]``, the run loop turns the rows into ``funnel/*`` rates of metrics.json in the
reasoner's stage order (errored rows in the denominator, as reaching nothing)."""

from __future__ import annotations

import json

import pytest

from conftest import compose_cfg

from kgreason.metrics.funnel import funnel_columns, funnel_rates, question_funnel
from kgreason.reasoners.base import BaseReasoner, Trace
from kgreason.runner.run import run, summarise
from kgreason.types import Example


def test_trace_stage_records_bools_and_branches_in_extra():
    t = Trace()
    t.stage("linked")
    t.stage("parsed", False)
    t.stage("decided_by", "paths")
    pred = t.finish(Example("q", "?"), ["a"])
    assert pred.extra["funnel"] == {"linked": True, "parsed": False, "decided_by": "paths"}
    assert BaseReasoner.funnel == ()


def _row(funnel=None, error=None):
    return {"id": "x", "metrics": {}, "error": error, "extra": {} if funnel is None else {"funnel": funnel}}


def test_rates_over_every_row_errored_ones_reaching_nothing():
    rows = [_row({"linked": True, "parsed": True, "decided_by": "paths"}),
            _row({"linked": True, "parsed": False, "decided_by": "cypher"}),
            _row({"linked": False}),
            _row({"linked": True, "parsed": True, "decided_by": "paths"}, error="RuntimeError: boom")]
    got = funnel_rates(rows, ("linked", "parsed", "decided_by"))
    assert got == {"funnel/_stages": ["linked", "parsed", "decided_by"],
                   "funnel/linked": 0.5, "funnel/parsed": 0.25,
                   "funnel/decided_by/cypher": 0.25, "funnel/decided_by/paths": 0.25}
    # a stage a row recorded but the reasoner does not declare follows the declared ones
    assert funnel_rates([_row({"zeta": True, "linked": True})], ("linked",))["funnel/_stages"] == ["linked", "zeta"]
    assert funnel_rates([_row()], ()) == {}  # nothing declared, nothing recorded: no key
    # the same dict from summarise, next to the other figures
    m = summarise(rows, [], 4, funnel=("linked", "parsed", "decided_by"))
    assert m["funnel/linked"] == 0.5 and m["run/errors"] == 1


def test_columns_and_one_questions_stages_in_stage_order():
    m = {"funnel/_stages": ["linked", "decided_by", "parsed"], "funnel/parsed": 0.25, "funnel/linked": 0.5,
         "funnel/decided_by/paths": 0.25, "funnel/decided_by/cypher": 0.25, "metric/hits_at_1": 0.3}
    assert funnel_columns(m) == [("linked", "funnel/linked"), ("decided_by=cypher", "funnel/decided_by/cypher"),
                                 ("decided_by=paths", "funnel/decided_by/paths"), ("parsed", "funnel/parsed")]
    extra = {"funnel": {"parsed": True, "linked": True}}
    assert question_funnel(extra, ["linked", "decided_by", "parsed"]) == [
        ("linked", True), ("decided_by", False), ("parsed", True)]
    assert question_funnel(extra, ["linked"], errored=True) == [("linked", False), ("parsed", False)]


def test_a_run_writes_the_funnel_rates_and_each_questions_stages(tmp_path, monkeypatch):
    """A scripted ToG run on the embedded world: every row carries ``extra["funnel"]``; metrics.json
    holds ``funnel/<stage>`` for each declared stage in ToG's order and ``funnel/answered_by/<value>``;
    an errored row counts in the denominator as reaching no stage."""
    from kgreason.reasoners import tog

    orig = tog.ToG.answer

    def answer(self, ex):
        if ex.id.endswith("3"):
            raise RuntimeError("boom")
        return orig(self, ex)

    monkeypatch.setattr(tog.ToG, "answer", answer)
    cfg = compose_cfg(["reasoner=tog", "ablation=tog_bm25", "llm=scripted", "dataset.limit=20", "tracking=none",
                       "reports.hop_distribution=false", "fail_on_error_rate=false", "reasoner.depth=2"], tmp_path)
    res = run(cfg, tmp_path)
    m = json.loads((tmp_path / "metrics.json").read_text())
    assert m == json.loads(json.dumps(res.metrics))
    rows = [json.loads(x) for x in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    bad = [r for r in rows if r["error"]]
    assert bad and len(bad) < len(rows)
    assert m["funnel/_stages"] == ["topics_linked", "relations_kept_depth1", "entities_kept_depth1", "yes_depth1",
                                   "relations_kept_depth2", "entities_kept_depth2", "yes_depth2", "answered_by"]
    for stage in m["funnel/_stages"][:-1]:
        want = sum(1 for r in rows if not r["error"] and r["extra"]["funnel"].get(stage) is True) / len(rows)
        assert m[f"funnel/{stage}"] == pytest.approx(want), stage
    by = [r["extra"]["funnel"]["answered_by"] for r in rows if not r["error"]]
    for value in set(by):
        assert m[f"funnel/answered_by/{value}"] == pytest.approx(by.count(value) / len(rows))
    assert m["funnel/topics_linked"] == pytest.approx((len(rows) - len(bad)) / len(rows))  # gold topics link
    assert "funnel/answered_by" not in m


def _hydra_record(d, overrides):
    import yaml

    (d / ".hydra").mkdir(parents=True)
    choices = {o.split("=", 1)[0]: o.split("=", 1)[1] for o in overrides if "." not in o.split("=", 1)[0]}
    (d / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump({"hydra": {"runtime": {"choices": choices}}}))
    (d / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))


def test_tables_funnel_prints_a_row_per_run_and_a_column_per_stage_in_stage_order(tmp_path, capsys):
    """``kgreason tables --funnel`` on a sweep of two ToG runs (widths 1 and 2): one table, the
    swept width telling the rows apart, the run's question count, then every stage in ToG's
    order with its share and count; written to results_funnel.md / .csv."""
    from kgreason.tables.cli import main

    root = tmp_path / "sweep"
    for i, width in enumerate((1, 2)):
        out = root / f"{i}_width{width}"
        overrides = ["reasoner=tog", "ablation=tog_bm25", "llm=scripted", "dataset.limit=6", "tracking=none",
                     "reports.hop_distribution=false", "reasoner.depth=2", f"reasoner.width={width}"]
        _hydra_record(out, overrides)  # what Hydra writes for a sweep's job (compose_cfg has no Hydra runtime)
        run(compose_cfg(overrides, out), out)
    (root / "2_no_funnel").mkdir()  # a job dir that failed before any metric: named, not tabulated
    (root / "2_no_funnel" / "failed.json").write_text(json.dumps({"status": "failed", "reason": "boom", "stage": "startup"}))
    assert main([str(root), "--funnel", "--digits", "2"]) == 0
    text = capsys.readouterr().out
    lines = [x for x in text.splitlines() if x.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    stages = json.loads((root / "0_width1" / "metrics.json").read_text())["funnel/_stages"]
    assert header[:2] == ["reasoner.width", "n"]
    got = [h.split("=", 1)[0] for h in header[2:]]
    assert list(dict.fromkeys(got)) == [s for s in stages if s in got]  # stage order
    assert got[:7] == stages[:7]  # every bool stage has its column, even one no question reached
    assert len(lines) == 4  # header, rule, two runs
    for i, width in enumerate((1, 2)):
        m = json.loads((root / f"{i}_width{width}" / "metrics.json").read_text())
        cells = [c.strip() for c in lines[2 + i].strip("|").split("|")]
        assert cells[:2] == [str(width), "6"]
        for h, cell in zip(header[2:], cells[2:]):
            key = "funnel/" + h.replace("=", "/")
            assert cell == f"{m[key]:.2f} ({round(m[key] * 6)})", (h, cell)
    assert "Runs without metrics: 2_no_funnel: failed (startup): boom" in text
    assert (root / "results_funnel.md").exists() and (root / "results_funnel.csv").exists()
    assert main([str(tmp_path / "nowhere"), "--funnel"]) == 2


def test_tables_funnel_runs_with_the_default_digits(tmp_path, capsys):
    """``kgreason tables SWEEP --funnel`` as docs/metrics.md types it, without ``--digits``: the
    funnel table with three decimals (the results table's default), not "Format specifier missing
    precision" from a ``None`` precision."""
    from kgreason.tables.cli import main

    root = tmp_path / "sweep"
    out = root / "0_tog"
    overrides = ["reasoner=tog", "ablation=tog_bm25", "llm=scripted", "dataset.limit=4", "tracking=none",
                 "reports.hop_distribution=false", "reasoner.depth=1"]
    _hydra_record(out, overrides)
    run(compose_cfg(overrides, out), out)
    assert main([str(root), "--funnel"]) == 0, capsys.readouterr().err
    rows = [x for x in capsys.readouterr().out.splitlines() if x.startswith("|")]
    m = json.loads((out / "metrics.json").read_text())
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    cells = [c.strip() for c in rows[2].strip("|").split("|")]
    first = header.index("n") + 1
    assert cells[first] == f"{m['funnel/' + header[first]]:.3f} ({round(m['funnel/' + header[first]] * 4)})"


def test_tables_funnel_of_several_run_dirs_and_bundles_is_one_table(tmp_path, capsys):
    """``kgreason tables A B.tar.gz C --funnel``: runs from several places (SGR's Table 2 arms are
    one bundle each) in one table, a row per run in the order given; a source that is not there is
    one line naming it."""
    from kgreason.storage.bundle import export
    from kgreason.tables.cli import main

    runs = []
    for width in (1, 2, 3):
        out = tmp_path / "runs" / f"tog_w{width}"
        overrides = ["reasoner=tog", "ablation=tog_bm25", "llm=scripted", "dataset.limit=3", "tracking=none",
                     "reports.hop_distribution=false", "reasoner.depth=1", f"reasoner.width={width}",
                     f"llm_cache.dir={tmp_path / 'cache'}"]
        _hydra_record(out, overrides)
        run(compose_cfg(overrides, out), out)
        rec = json.loads((out / "run.json").read_text())  # what a command-line run records (a bundle has no .hydra/)
        rec.update(choices={"reasoner": "tog", "ablation": "tog_bm25", "llm": "scripted"}, overrides=overrides)
        (out / "run.json").write_text(json.dumps(rec))
        runs.append(out)
    bundle = tmp_path / "w2.tar.gz"
    export([runs[1]], bundle)
    outdir = tmp_path / "tables"
    assert main([str(runs[2]), str(bundle), str(runs[0]), "--funnel", "--out", str(outdir)]) == 0, \
        capsys.readouterr().err
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("|")]
    assert len(lines) == 5  # header, rule, three runs
    assert [c.strip() for c in lines[0].strip("|").split("|")][:2] == ["reasoner.width", "n"]
    assert [[c.strip() for c in x.strip("|").split("|")][0] for x in lines[2:]] == ["3", "2", "1"]
    assert (outdir / "results_funnel.md").exists()
    assert main([str(runs[0]), str(tmp_path / "nowhere"), "--funnel", "--out", str(outdir)]) == 2
    err = capsys.readouterr().err
    assert "nowhere" in err and len(err.strip().splitlines()) == 1
    (tmp_path / "empty").mkdir()  # a folder with no run in it: named, not left out of the table without a word
    for argv in ([str(runs[0]), str(tmp_path / "empty"), "--funnel"], [str(runs[0]), str(tmp_path / "empty")]):
        assert main([*argv, "--out", str(outdir)]) == 2
        err = capsys.readouterr().err
        assert "empty: no run dir in it" in err and len(err.strip().splitlines()) == 1
