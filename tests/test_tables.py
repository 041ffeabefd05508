"""kgreason.tables on a fake multirun dir of small YAML/JSON files (pure functions + CLI)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kgreason.tables import collect, collect_examples, pivot, plot_hops, render_latex, render_markdown, write_tables

REPO = Path(__file__).resolve().parents[1]

# (reasoner, ablation, seed) -> metrics ; dataset fixed per job
JOBS = [
    ("sgr", "none", "cwq", 0, {"metric/hits_at_1": 0.50, "metric/f1": 0.40, "retrieval/search_space": 10}),
    ("sgr", "none", "cwq", 1, {"metric/hits_at_1": 0.70, "metric/f1": 0.60, "retrieval/search_space": 30}),
    ("rag", "none", "cwq", 0, {"metric/hits_at_1": 0.30, "metric/f1": 0.80, "retrieval/search_space": 5}),
    ("rag", "none", "cwq", 1, {"metric/hits_at_1": 0.40, "metric/f1": 0.70, "retrieval/search_space": 7}),
    ("sgr", "no_vote", "cwq", 0, {"metric/hits_at_1": 0.20, "metric/f1": 0.10, "retrieval/search_space": 1}),
    ("sgr", "none", "webqsp", 0, {"metric/hits_at_1": 0.90, "metric/f1": 0.90}),
]


def _job(root: Path, num: int, reasoner, ablation, dataset, seed, metrics, extra_overrides=()):
    overrides = [f"reasoner={reasoner}", f"ablation={ablation}", f"dataset={dataset}", f"seed={seed}", *extra_overrides]
    d = root / f"{num}_{','.join(overrides)}"
    (d / ".hydra").mkdir(parents=True)
    choices = {"dataset": dataset, "reasoner": reasoner, "ablation": ablation, "llm": "openai", "kg": "freebase",
               "retriever": "scipy", "tracking": "none", "hydra/launcher": "basic"}
    (d / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump({"hydra": {"runtime": {"choices": choices},
                                                                       "job": {"num": num}}}))
    (d / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    (d / "config.yaml").write_text(yaml.safe_dump({"seed": seed, "reasoner": {"_target_": "x"}}))
    if metrics is not None:
        (d / "metrics.json").write_text(json.dumps(metrics))
    return d


@pytest.fixture
def multirun(tmp_path):
    root = tmp_path / "multirun"
    for i, j in enumerate(JOBS):
        _job(root, i, *j)
    failed = _job(root, len(JOBS), "rag", "none", "webqsp", 0, None)
    (failed / "predictions.jsonl").write_text(json.dumps({"id": "q1", "error": "RateLimitError: 429"}) + "\n")
    _job(root, len(JOBS) + 1, "rag", "no_vote", "webqsp", 0, None)
    (root / "multirun.yaml").write_text("hydra: {}\n")
    return root


def test_collect_tidy(multirun):
    df, missing = collect(multirun)
    assert set(df.columns) >= {"job", "dataset", "reasoner", "ablation", "llm", "kg", "seed", "metric", "value"}
    assert len(df) == 5 * 3 + 2
    r = df[(df.reasoner == "rag") & (df.seed == 1) & (df.metric == "metric/f1")]
    assert r.value.tolist() == [0.70] and r.llm.tolist() == ["openai"] and r.kg.tolist() == ["freebase"]
    assert {m["job"].split("_")[0] for m in missing} == {"6", "7"}
    reasons = {m["job"].split("_")[0]: m["reason"] for m in missing}
    assert "RateLimitError" in reasons["6"] and "not started" in reasons["7"]


def test_pivot_mean_std_over_seeds(multirun):
    df, _ = collect(multirun)
    wide = pivot(df, ["reasoner", "ablation"], ["dataset", "metric"], ["hits_at_1", "f1", "retrieval/search_space"])
    assert wide[("mean", "cwq", "metric/hits_at_1")][("sgr", "none")] == pytest.approx(0.60)
    assert wide[("std", "cwq", "metric/hits_at_1")][("sgr", "none")] == pytest.approx(0.1414213562)  # sample std
    assert wide[("n", "cwq", "metric/hits_at_1")][("sgr", "none")] == 2
    assert wide[("std", "cwq", "metric/f1")][("sgr", "no_vote")] == 0.0
    with pytest.raises(KeyError, match="unknown table axes"):
        pivot(df, ["nope"], ["dataset"])


def test_bold_best_respects_direction(multirun):
    df, _ = collect(multirun)
    rows, cols = ["reasoner", "ablation"], ["dataset", "metric"]
    wide = pivot(df, rows, cols, ["hits_at_1", "f1", "retrieval/search_space"])
    md = render_markdown(wide, rows, cols, digits=2)
    lines = {tuple(c.strip() for c in ln.strip("|").split("|"))[:2]: ln for ln in md.splitlines()[2:]}
    header = [c.strip() for c in md.splitlines()[0].strip("|").split("|")]
    hits = header.index("cwq / hits_at_1")
    f1 = header.index("cwq / f1")
    ss = header.index("cwq / retrieval/search_space")
    cell = lambda key, i: [c.strip() for c in lines[key].strip("|").split("|")][i]  # noqa: E731
    assert cell(("sgr", "none"), hits) == "**0.60 ± 0.14**"
    assert cell(("rag", "none"), f1) == "**0.75 ± 0.07**"
    assert cell(("rag", "none"), hits) == "0.35 ± 0.07"
    # search space: lower is better → the one-seed 1.00 row wins
    assert cell(("sgr", "no_vote"), ss) == "**1.00**"
    assert cell(("rag", "none"), header.index("webqsp / hits_at_1")) == "–"
    tex = render_latex(wide, rows, cols, digits=2)
    assert r"\textbf{0.60 $\pm$ 0.14}" in tex and r"hits\_at\_1" in tex and r"\begin{tabular}{llrrrrr}" in tex


def test_metric_in_rows_bolds_per_metric(multirun):
    df, _ = collect(multirun)
    wide = pivot(df, ["metric", "reasoner"], ["dataset"], ["hits_at_1", "f1"])
    md = render_markdown(wide, ["metric", "reasoner"], ["dataset"], digits=2)
    assert md.count("**") == 2 * 4  # one best per metric per dataset column (2 × 2)


def test_write_tables_and_cli(multirun, tmp_path):
    paths = write_tables(multirun, metrics=["hits_at_1"])
    assert paths["md"].parent == multirun and "missing" in paths
    assert "RateLimitError" in paths["missing"].read_text()
    csv = paths["csv"].read_text().splitlines()
    assert csv[0] == "reasoner,ablation,dataset,metric,mean,std,n"  # empty `variant` axis dropped
    r = subprocess.run([sys.executable, "-m", "kgreason.tables", str(multirun), "--rows", "reasoner",
                        "--cols", "dataset,metric", "--metrics", "f1", "--out", str(tmp_path / "t")],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    # --rows reasoner alone would average sgr/none with sgr/no_vote: the differing ablation is kept
    assert "| reasoner | ablation | cwq / f1 | webqsp / f1 |" in r.stdout
    assert "| sgr | no_vote | **0.100** | – |" not in r.stdout  # best is per column, not per row
    assert "± is the sample standard deviation over those seeds" in r.stdout
    assert (tmp_path / "t" / "results.tex").exists()
    bad = subprocess.run([sys.executable, "-m", "kgreason.tables", str(tmp_path / "nope")], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "no such" in bad.stderr


def test_variant_axis_keeps_sweeps_apart(tmp_path):
    root = tmp_path / "m"
    _job(root, 0, "ro", "none", "emb", 0, {"metric/f1": 1.0}, ["reasoner.hops=1"])
    _job(root, 1, "ro", "none", "emb", 0, {"metric/f1": 0.0}, ["reasoner.hops=2"])
    df, _ = collect(root)
    wide = pivot(df, ["reasoner", "variant"], ["metric"])
    assert wide[("mean", "metric/f1")].to_dict() == {("ro", "reasoner.hops=1"): 1.0, ("ro", "reasoner.hops=2"): 0.0}


def test_collect_examples_and_plot(tmp_path):
    root = tmp_path / "m"
    d = _job(root, 0, "ro", "none", "emb", 0, {"metric/f1": 0.5})
    (d / "predictions.jsonl").write_text("\n".join(json.dumps(r) for r in [
        {"id": "a", "hops": 1, "metrics": {"f1": 1.0, "answer_coverage": None}},
        {"id": "b", "hops": 2, "metrics": {"f1": 0.0, "answer_coverage": 1.0}}]) + "\n")
    (d / "hops.json").write_text(json.dumps({"counts": {"1": 1, "2": 0, "unreachable": 1}, "per_example": {"a": 1, "b": None}}))
    ex = collect_examples(root)
    f1 = ex[ex.metric == "f1"].set_index("id")
    assert f1.loc["a", "kg_hops"] == 1 and pd_isna(f1.loc["b", "kg_hops"]) and f1.loc["b", "gold_hops"] == 2
    png = plot_hops({"1": 3, "2": 5, "unreachable": 1, "unlinked": 0}, tmp_path / "h.png", title="t")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def pd_isna(x):
    import pandas as pd

    return pd.isna(x)


def _kg_job(root, num, kg, seed, value, extra=()):
    d = _job(root, num, "ro", "none", "emb", seed, {"metric/hits_at_1": value}, list(extra))
    hy = yaml.safe_load((d / ".hydra" / "hydra.yaml").read_text())
    hy["hydra"]["runtime"]["choices"]["kg"] = kg
    (d / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump(hy))
    return d


def test_sweep_over_kgs_is_never_averaged_as_seeds(tmp_path):
    """Issue 18: a sweep over two KGs printed one row 0.375 ± 0.530 (0.75 and 0.00 averaged)."""
    root = tmp_path / "m"
    _kg_job(root, 0, "metaqa", 0, 0.75)
    _kg_job(root, 1, "embedded", 0, 0.0)
    paths = write_tables(root, metrics=["hits_at_1"])
    md = paths["md"].read_text()
    assert "0.375" not in md and "±" not in md.split("\n\n")[0]
    assert "| embedded | 0.000 |" in md.replace("**", "") and "| metaqa | 0.750 |" in md.replace("**", "")
    assert "Each cell is one run" in md


def test_numeric_sweep_values_sort_as_numbers_and_go_on_columns(tmp_path):
    """ReKnoS Table 4 shape: width on the columns, depth on the rows, 2 seeds per cell."""
    root = tmp_path / "m"
    n = 0
    for w in (3, 10, 5):
        for dpt in (2, 1):
            for seed in (0, 1):
                _job(root, n, "reknos", "none", "cwq", seed, {"metric/hits_at_1": w / 10 + dpt / 100 + seed / 1000},
                     [f"reasoner.width={w}", f"reasoner.depth={dpt}"])
                n += 1
    df, _ = collect(root)
    wide = pivot(df, rows=["reasoner.depth"], cols=["reasoner.width", "metric"], metrics=["hits_at_1"])
    assert list(wide["mean"].index) == ["1", "2"]
    assert [c[0] for c in wide["mean"].columns] == ["3", "5", "10"]  # not "10" < "3"
    assert wide["mean"].loc["2", ("10", "metric/hits_at_1")] == pytest.approx(1.0 + 0.02 + 0.0005)
    assert wide["n"].loc["1", ("5", "metric/hits_at_1")] == 2
    r = subprocess.run([sys.executable, "-m", "kgreason.tables", str(root), "--rows", "reasoner.depth",
                        "--cols", "reasoner.width,metric", "--metrics", "hits_at_1", "--out", str(tmp_path / "t")],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "| reasoner.depth | 3 / hits_at_1 | 5 / hits_at_1 | 10 / hits_at_1 |" in r.stdout
    assert "2 seed(s) in the sweep: 0, 1" in r.stdout
