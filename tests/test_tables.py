"""kgreason.tables on a fake multirun dir of small YAML/JSON files (pure functions + CLI)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kgreason.tables import collect, collect_examples, job_info, pivot, plot_hops, render_latex, render_markdown, write_tables

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
    hits = header.index("cwq / Hits@1")
    f1 = header.index("cwq / F1")
    ss = header.index("cwq / retrieval/search_space")
    cell = lambda key, i: [c.strip() for c in lines[key].strip("|").split("|")][i]  # noqa: E731
    assert cell(("sgr", "none"), hits) == "**0.60 ± 0.14**"
    assert cell(("rag", "none"), f1) == "**0.75 ± 0.07**"
    assert cell(("rag", "none"), hits) == "0.35 ± 0.07"
    # a search space is a count of what the method did, not a score: never bold (issue 59)
    assert cell(("sgr", "no_vote"), ss) == "1.00"
    # webqsp has one row with a value: nothing to be best of
    assert cell(("sgr", "none"), header.index("webqsp / Hits@1")) == "0.90"
    assert cell(("rag", "none"), header.index("webqsp / Hits@1")) == "–"
    tex = render_latex(wide, rows, cols, digits=2)
    # the .tex: the seed spread in small type beside the mean (tests/test_tables_tex.py: it fits a column)
    assert r"\textbf{0.60\,{\scriptsize$\pm$0.14}}" in tex and "Hits@1" in tex and r"\begin{tabular}{llrrrrr}" in tex


def test_metric_in_rows_bolds_per_metric(multirun):
    df, _ = collect(multirun)
    wide = pivot(df, ["metric", "reasoner"], ["dataset"], ["hits_at_1", "f1"])
    md = render_markdown(wide, ["metric", "reasoner"], ["dataset"], digits=2)
    # one best per metric in the cwq column; webqsp has one row per metric: nothing to be best of
    assert md.count("**") == 2 * 2
    assert "| Hits@1 | sgr | none | **0.60 ± 0.14** |" in md  # the metric axis by its label


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
    assert "| reasoner | ablation | cwq / F1 | webqsp / F1 |" in r.stdout
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
    assert "| reasoner.depth | 3 / Hits@1 | 5 / Hits@1 | 10 / Hits@1 |" in r.stdout
    assert "2 seed(s) in the sweep: 0, 1" in r.stdout


# ----------------------------------------------------------------------------- issue 31: intervals, pairs, paper
def _preds(d: Path, per_example: dict[str, dict[str, float]]) -> None:
    """predictions.jsonl as a run writes it (one row per example; the last row per id wins)."""
    rows = [{"id": i, "prediction": "x", "answers": ["x"], "metrics": m, "error": None}
            for i, m in per_example.items()]
    (d / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _run(root, num, reasoner, seed, hits, f1=None, ablation="none", dataset="cwq", extra=(), ids=None):
    """A job whose metrics.json is the mean of its per-example values (as run.py writes it)."""
    ids = ids or [f"q{i}" for i in range(len(hits))]
    f1 = f1 if f1 is not None else [h * 0.5 for h in hits]
    per = {i: {"hits_at_1": float(h), "f1": float(f)} for i, h, f in zip(ids, hits, f1)}
    d = _job(root, num, reasoner, ablation, dataset, seed,
             {"metric/hits_at_1": sum(hits) / len(hits), "metric/f1": sum(f1) / len(f1), "run/n_examples": len(hits)},
             list(extra))
    _preds(d, per)
    return d


def _bin(rng, n, p):
    return [int(x) for x in (rng.random(n) < p)]


def test_cells_carry_a_bootstrap_interval_over_questions(tmp_path):
    import numpy as np

    from kgreason.stats import bootstrap_ci
    from kgreason.tables import CIOptions

    rng = np.random.default_rng(0)
    root = tmp_path / "m"
    io = _bin(rng, 80, 0.3)
    sgr = [_bin(rng, 80, 0.6) for _ in range(3)]
    _run(root, 0, "io", 0, io)
    for s in range(3):
        _run(root, 1 + s, "sgr", s, sgr[s])
    df, _ = collect(root)
    ex = collect_examples(root)
    wide = pivot(df, ["reasoner"], ["metric"], ["hits_at_1"], ex, CIOptions(B=500, seed=4))
    want = bootstrap_ci(io, B=500, seed=4)
    assert wide[("lo", "metric/hits_at_1")]["io"] == pytest.approx(want.lo)
    assert wide[("hi", "metric/hits_at_1")]["io"] == pytest.approx(want.hi)
    # three seeds: the interval resamples questions, each question's value its mean over the seeds
    qmean = np.mean(sgr, axis=0)
    want3 = bootstrap_ci(qmean, B=500, seed=4)
    assert wide[("lo", "metric/hits_at_1")]["sgr"] == pytest.approx(want3.lo)
    assert wide[("q", "metric/hits_at_1")]["sgr"] == 80 and wide[("n", "metric/hits_at_1")]["sgr"] == 3
    # the seed spread is reported apart from the interval
    assert wide[("std", "metric/hits_at_1")]["sgr"] == pytest.approx(np.std(np.mean(sgr, axis=1), ddof=1))
    md = write_tables(root, ["reasoner"], ["metric"], ["hits_at_1"]).get("md").read_text()
    assert "95% percentile bootstrap interval of the mean over the cell's 80 questions" in md
    assert "B = 2,000" in md and "not seeds" in md and "the same question resampled for every seed" in md
    line = next(ln for ln in md.splitlines() if ln.startswith("| sgr |"))
    assert " ± " in line and " [" in line
    off = write_tables(root, ["reasoner"], ["metric"], ["hits_at_1"], name="off",
                       ci=CIOptions(kind="none"))["md"].read_text()
    assert "bootstrap" not in off and "[" not in off.split("\n\n")[0]


def test_table_interval_covers_the_true_mean_at_the_nominal_rate(tmp_path):
    """Synthetic sweeps whose per-example values are known (0/1 with true mean 0.4): over 60
    table cells, written and read back as runs, the 90 % interval covers 0.4 in 80–100 %
    (the 500-replicate check of the same interval is tests/test_stats.py)."""
    import numpy as np

    from kgreason.tables import CIOptions

    rng = np.random.default_rng(11)
    root = tmp_path / "m"
    for k in range(60):
        _run(root, k, "ro", 0, _bin(rng, 60, 0.4), extra=[f"reasoner.top_k={k}"])
    df, _ = collect(root)
    wide = pivot(df, ["reasoner.top_k"], ["metric"], ["hits_at_1"], collect_examples(root),
                 CIOptions(B=400, level=0.90))
    lo, hi = wide[("lo", "metric/hits_at_1")], wide[("hi", "metric/hits_at_1")]
    covered = ((lo <= 0.4) & (0.4 <= hi)).mean()
    assert 0.8 <= covered <= 1.0, covered


def test_metrics_order_is_the_column_order(tmp_path):
    """Issue 33 item 5: --metrics f1,hits_at_1 gives f1 first (was: alphabetical)."""
    root = tmp_path / "m"
    _run(root, 0, "io", 0, [1, 0, 0, 1])
    _run(root, 1, "sgr", 0, [1, 1, 0, 1])
    df, _ = collect(root)
    wide = pivot(df, ["reasoner"], ["metric"], ["hits_at_1", "f1"])
    assert list(wide["mean"].columns) == ["metric/hits_at_1", "metric/f1"]
    wide = pivot(df, ["reasoner"], ["metric"], ["f1", "hits_at_1"])
    assert list(wide["mean"].columns) == ["metric/f1", "metric/hits_at_1"]
    md = write_tables(root, ["reasoner"], ["metric"], ["f1", "hits_at_1"], ci=None)["md"].read_text()
    assert md.splitlines()[0].startswith("| reasoner | F1 | Hits@1 |")


def test_constant_columns_go_to_the_caption(tmp_path):
    root = tmp_path / "m"
    _run(root, 0, "io", 0, [1, 0, 0, 1])
    _run(root, 1, "sgr", 0, [1, 1, 0, 1])
    md = write_tables(root, ["reasoner"], ["metric"], ["hits_at_1", "run/n_examples"])["md"].read_text()
    assert md.splitlines()[0] == "| reasoner | Hits@1 |"
    assert "Constant columns (not shown): N = 4.000 in every row." in md


def test_seeds_that_change_nothing_warn_instead_of_pm_zero(tmp_path, capsys):
    root = tmp_path / "m"
    for s in range(3):
        _run(root, s, "io", s, [1, 0, 0, 1])
        _run(root, 3 + s, "sgr", s, [1, 1, 0, 1])
    md = write_tables(root, ["reasoner"], ["metric"], ["hits_at_1"])["md"].read_text()
    assert "± 0.000" not in md and "the seeds (0, 1, 2) changed nothing" in md
    assert "changed nothing" in capsys.readouterr().err
    # one seed that differs on one question: the spread is real and shown
    root2 = tmp_path / "m2"
    _run(root2, 0, "io", 0, [1, 0, 0, 1])
    _run(root2, 1, "io", 1, [1, 1, 0, 1])
    md2 = write_tables(root2, ["reasoner"], ["metric"], ["hits_at_1"])["md"].read_text()
    assert "changed nothing" not in md2 and "0.625 ± 0.177" in md2


def test_baseline_gives_paired_differences(tmp_path):
    import numpy as np
    from scipy import stats as sps

    from kgreason.stats import paired_bootstrap

    rng = np.random.default_rng(5)
    root = tmp_path / "m"
    io = _bin(rng, 120, 0.3)
    sgr = [1 if (a or rng.random() < 0.4) else 0 for a in io]  # sgr better on the same questions
    cot = list(io)
    cot[0] = 1 - cot[0]
    _run(root, 0, "io", 0, io)
    _run(root, 1, "sgr", 0, sgr)
    _run(root, 2, "cot", 0, cot)
    paths = write_tables(root, ["reasoner"], ["metric"], ["hits_at_1", "f1"], baseline="reasoner=io")
    md = paths["md"].read_text()
    import pandas as pd

    paired = pd.read_csv(paths["paired"])
    r = paired[(paired.row == "reasoner=sgr") & (paired.column == "hits_at_1")].iloc[0]
    want = paired_bootstrap(sgr, io)
    assert r["diff"] == pytest.approx(np.mean(sgr) - np.mean(io)) and r["lo"] == pytest.approx(want.lo)
    b = sum(1 for s, i in zip(sgr, io) if s and not i)
    assert r["mcnemar_p"] == pytest.approx(sps.binomtest(0, b, 0.5).pvalue) and bool(r["excludes_zero"])
    c = paired[(paired.row == "reasoner=cot") & (paired.column == "hits_at_1")].iloc[0]
    assert c["mcnemar_p"] == 1.0 and not c["excludes_zero"]
    f1 = paired[(paired.row == "reasoner=sgr") & (paired.column == "f1")].iloc[0]
    assert pd.isna(f1["mcnemar_p"])  # f1 is not 0/1 here (0.5 per hit)... it is {0, 0.5}: no McNemar
    assert "Paired comparisons against reasoner=io (same questions)" in md
    assert f"| reasoner=sgr | hits_at_1 | {np.mean(sgr) - np.mean(io):+.3f} * |" in md


def test_baseline_refuses_rows_that_answered_different_questions(tmp_path):
    root = tmp_path / "m"
    _run(root, 0, "io", 0, [1, 0, 0, 1, 1], ids=["a", "b", "c", "d", "e"])
    _run(root, 1, "sgr", 0, [1, 1, 0, 1, 1], ids=["a", "b", "c", "x", "y"])
    with pytest.raises(ValueError) as e:
        write_tables(root, ["reasoner"], ["metric"], ["hits_at_1"], baseline="reasoner=io")
    msg = str(e.value)
    assert "row reasoner=sgr and baseline row reasoner=io did not answer the same questions" in msg
    assert "4 ids differ" in msg and "only in the row: x, y" in msg and "only in the baseline: d, e" in msg
    r = subprocess.run([sys.executable, "-m", "kgreason.tables", str(root), "--rows", "reasoner", "--metrics",
                        "hits_at_1", "--baseline", "reasoner=io"], cwd=REPO, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and "did not answer the same questions" in r.stderr
    with pytest.raises(ValueError, match="no row has reasoner=tog"):
        write_tables(root, ["reasoner"], ["metric"], ["hits_at_1"], baseline="reasoner=tog")


def test_paper_values_beside_ours(tmp_path):
    """A SubQRAG Table 2 sweep (experiment=subqrag_table2): --paper prints paper | ours [CI] |
    difference for each cell of experiments/subqrag_table2/paper.yaml, and labels the model."""
    root = tmp_path / "m"
    abl = ["none", "subqrag_no_decomposition", "subqrag_no_rewriting", "subqrag_no_update"]
    for k, a in enumerate(abl):
        d = _job(root, k, "subqrag", a, "hotpotqa", 0, {"metric/em": 0.5, "metric/f1": 0.6})
        _preds(d, {f"q{i}": {"em": float(i % 2), "f1": 0.6} for i in range(10)})
        hy = yaml.safe_load((d / ".hydra" / "hydra.yaml").read_text())
        hy["hydra"]["runtime"]["choices"]["experiment"] = "subqrag_table2"
        (d / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump(hy))
        (d / "config.yaml").write_text(yaml.safe_dump({"seed": 0, "llm": {"model": "qwen2.5-1.5b" if k else "gpt-4o-mini"}}))
    r = subprocess.run([sys.executable, "-m", "kgreason.tables", str(root), "--rows", "ablation", "--metrics",
                        "em,f1", "--paper"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "| 2 | SubQRAG | HotpotQA EM (em) | 0.560 | 0.500 [" in out and "| -0.060" in out
    assert "gpt-4o-mini (same)" in out
    assert "**differs**: ours qwen2.5-1.5b, paper gpt-4o-mini" in out
    assert "| 2 | w/o Rewriting | HotpotQA F1 (f1) | 0.502 | 0.600 [0.600, 0.600] | +0.098 |" in out


def test_real_tiny_sweep_gets_intervals_and_paired_comparisons(tmp_path):
    """A real sweep (embedded default, retrieval_only, hops 1 and 2, 20 sampled questions): the
    tables tool reads the runs' predictions.jsonl, every headline cell gets an interval that holds
    its mean, and hops=2 is compared with hops=1 on the same 20 questions."""
    import os

    import pandas as pd

    sweep = tmp_path / "sweep"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    r = subprocess.run([sys.executable, "-m", "kgreason", "--multirun", "reasoner=retrieval_only",
                        "reasoner.hops=1,2", "tracking=none", "dataset.sample=20", f"hydra.sweep.dir={sweep}"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    r = subprocess.run([sys.executable, "-m", "kgreason", "tables", str(sweep), "--metrics", "hits_at_1,answer_coverage",
                        "--baseline", "reasoner.hops=1", "--boot", "500"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    # one reasoner, one ablation, one dataset: said once in the caption, not in every row / header
    assert r.stdout.startswith("| variant | Hits@1 | Coverage | Retrieved |")
    assert "Every row: reasoner = retrieval_only, ablation = none." in r.stdout
    assert "Every column: dataset = embedded." in r.stdout
    assert "over the cell's 20 questions (B = 500" in r.stdout
    res = pd.read_csv(sweep / "results.csv")
    size = res[res["metric"] == "retrieval/retrieved_size"]  # shown beside answer_coverage, no interval
    assert len(size) == 2 and (size["mean"] > 0).all()
    res = res[res["metric"].str.startswith("metric/")]
    assert len(res) == 4 and res["q"].eq(20).all()
    assert ((res["lo"] <= res["mean"] + 1e-9) & (res["mean"] <= res["hi"] + 1e-9)).all()
    paired = pd.read_csv(sweep / "results_paired.csv")
    assert paired["row"].tolist() == ["variant=reasoner.hops=2"] * 2 and paired["questions"].eq(20).all()
    hits = res[res["metric"] == "metric/hits_at_1"].set_index("variant")["mean"]
    row = paired.set_index("column").loc["embedded / hits_at_1"]
    assert row["diff"] == pytest.approx(hits["reasoner.hops=2"] - hits["reasoner.hops=1"], abs=1e-6)


def test_unscored_questions_are_left_out_not_a_mismatch(tmp_path):
    """A metric that does not apply to a question (None) in one row: both rows answered the
    same questions, so the pair is compared on the questions scored in both."""
    import pandas as pd

    root = tmp_path / "m"
    for k, (reasoner, cov) in enumerate([("io", [None, 1.0, 0.0, 1.0]), ("sgr", [1.0, 1.0, 1.0, None])]):
        d = _job(root, k, reasoner, "none", "cwq", 0, {"metric/hits_at_1": 0.5, "metric/answer_coverage": 0.6})
        _preds(d, {f"q{i}": {"hits_at_1": float(i % 2), "answer_coverage": c} for i, c in enumerate(cov)})
    paths = write_tables(root, ["reasoner"], ["metric"], ["hits_at_1", "answer_coverage"], baseline="reasoner=io")
    paired = pd.read_csv(paths["paired"]).set_index("column")
    assert paired.loc["answer_coverage", "questions"] == 2 and paired.loc["answer_coverage", "diff"] == 0.5
    assert paired.loc["hits_at_1", "questions"] == 4
    res = pd.read_csv(paths["csv"]).set_index(["reasoner", "metric"])
    assert res.loc[("io", "metric/answer_coverage"), "q"] == 3


def test_same_mean_different_questions_is_not_a_constant_column(tmp_path):
    root = tmp_path / "m"
    _run(root, 0, "io", 0, [1, 1, 0, 0], f1=[0.5, 0.5, 0.5, 0.5])
    _run(root, 1, "sgr", 0, [1, 1, 0, 0], f1=[1.0, 0.0, 1.0, 0.0])
    md = write_tables(root, ["reasoner"], ["metric"], ["hits_at_1", "f1"])["md"].read_text()
    # f1 0.5 in both rows, but [0.5, 0.5] vs [0, 1]; hits_at_1 the same in both rows is a score: kept,
    # neither row bold (issue 59: a score equal in every row is a result, not a constant column)
    assert md.splitlines()[0] == "| reasoner | Hits@1 | F1 |"
    assert "Constant columns" not in md and "**" not in md.split("\n\n")[0]


def _logoskg_job(root, num, model, metrics):
    """A LogosKG Table 5 job (experiment=logoskg_dx_hops, judge=pdsqi chosen by every job, so no
    column of its own) whose config has the swept settings."""
    d = _job(root, num, "logoskg_dx", "none", "ddxplus", 0, metrics, [f"llm.model={model}"])
    hy = yaml.safe_load((d / ".hydra" / "hydra.yaml").read_text())
    hy["hydra"]["runtime"]["choices"].update(experiment="logoskg_dx_hops", judge="pdsqi", kg="umls")
    (d / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump(hy))
    (d / "config.yaml").write_text(yaml.safe_dump({
        "seed": 0, "llm": {"model": model}, "reasoner": {"hops": 5, "rounds": 2},
        "judge": {"_target_": "kgreason.judges.pdsqi.PDSQIJudge", "llm": {"model": "gpt-5-mini"}}}))
    return d


def test_paper_group_override_shared_by_every_job(tmp_path):
    """An entry's group override (judge=pdsqi) that every job shares has no column of its own: the
    job's Hydra choice matches it (not its judge config, a dict)."""
    from kgreason.tables import paper_comparison

    root = tmp_path / "m"
    _logoskg_job(root, 0, "gpt-4.1", {"judge/baseline/accurate": 2.5, "judge/round2/pdsqi_average": 3.0})
    df, _ = collect(root)
    comp, doc = paper_comparison(root, df, None)
    assert doc["preset"] == "logoskg_dx_hops"
    acc = comp[(comp["metric"] == "judge/baseline/accurate") & (comp["column"] == "DDXPlus / UMLS / GPT-4.1 / B")]
    assert acc["paper"].tolist() == [2.54] and acc["ours"].tolist() == [2.5]
    avg = comp[(comp["metric"] == "judge/round2/pdsqi_average") & (comp["column"] == "DDXPlus / UMLS / GPT-4.1 / R2")]
    assert avg["ours"].tolist() == [3.0] and avg["paper"].tolist() == [3.36]
    qwen = comp[comp["column"] == "DDXPlus / UMLS / Qwen-2.5-7B-Instruct / B"]
    assert qwen["ours"].isna().all()  # another model's cell is not filled with GPT-4.1's run


@pytest.mark.parametrize("preset", ["logoskg_fig2", "logoskg_dx_baseline"])
def test_paper_figure_only_prints_the_note(tmp_path, preset):
    """A preset whose paper values are a figure only (paper.yaml: entries [] and a note): --paper
    prints the note, not an empty table, and does not fail."""
    root = tmp_path / "m"
    _job(root, 0, "kg_dx", "none", "ddxplus", 0, {"metric/hits_at_1": 0.5})
    r = subprocess.run([sys.executable, "-m", "kgreason.tables", str(root), "--metrics", "hits_at_1",
                        "--paper", preset], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    note = yaml.safe_load((REPO / "experiments" / preset / "paper.yaml").read_text())["note"]
    assert note in r.stdout
    assert "| table | row | column |" not in r.stdout


def test_paper_boolean_override_matches_config_and_swept_column(tmp_path):
    """A ProbSum cell (reasoner.use_findings: false in paper.yaml) matches a job whose config has
    False, and a sweep whose column (the override ``reasoner.use_findings=false``) says false."""
    from kgreason.tables import paper_comparison

    col = "ProbSum / UMLS / GPT-4.1 / B"
    for name, extra in (("config", []), ("column", ["reasoner.use_findings=false", "reasoner.use_findings=true"])):
        root = tmp_path / name
        for n, ov in enumerate(extra or [None]):
            d = _logoskg_job(root, n, "gpt-4.1", {"judge/baseline/accurate": 3.0 + n})
            for f, fix in ((".hydra/hydra.yaml", lambda c: c["hydra"]["runtime"]["choices"].update(dataset="probsum")),
                           ("config.yaml", lambda c: c["reasoner"].update(use_findings=ov == "reasoner.use_findings=true"))):
                c = yaml.safe_load((d / f).read_text())
                fix(c)
                (d / f).write_text(yaml.safe_dump(c))
            if ov:
                o = yaml.safe_load((d / ".hydra" / "overrides.yaml").read_text())
                (d / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([*o, ov]))
        df, _ = collect(root)
        comp, _ = paper_comparison(root, df, None)
        cell = comp[(comp["column"] == col) & (comp["metric"] == "judge/baseline/accurate")]
        assert cell["ours"].tolist() == [3.0], name


# ----------------------------------------------------------------------------- issue 41 / 44: runs that cannot mislead
def _metrics(d: Path, **kv) -> None:
    m = json.loads((d / "metrics.json").read_text())
    m.update({k.replace("__", "/"): v for k, v in kv.items()})
    (d / "metrics.json").write_text(json.dumps(m))


def _cli(*args, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "kgreason.tables", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def _row(md: str, start: str) -> str:
    return next(ln for ln in md.splitlines() if ln.startswith(start))


def test_partial_run_is_not_averaged_with_complete_seeds(tmp_path):
    """Issue 41 item 4: a SIGTERM'd seed (run/partial) next to complete seeds is refused in one line
    naming the job dir; --allow-partial averages it and marks the cell; n_examples < n_expected is
    partial too, even without the flag."""
    root = tmp_path / "m"
    _run(root, 0, "io", 0, [1, 0, 0, 1])
    part = _run(root, 1, "io", 1, [1, 1])
    _metrics(part, run__partial=True, run__n_expected=4)
    short = _run(root, 2, "sgr", 0, [1, 1, 1])
    _metrics(short, run__n_expected=4)  # no flag, but 3 of 4 examples
    _run(root, 3, "sgr", 1, [1, 1, 1, 0])
    with pytest.raises(ValueError) as e:
        write_tables(root, ["reasoner"], ["metric"], ["hits_at_1"])
    msg = str(e.value)
    assert "\n" not in msg and part.name in msg and short.name in msg and "--allow-partial" in msg
    r = _cli(root, "--rows", "reasoner", "--metrics", "hits_at_1")
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert part.name in r.stderr
    r = _cli(root, "--rows", "reasoner", "--metrics", "hits_at_1", "--allow-partial")
    assert r.returncode == 0, r.stderr
    assert "partial" in _row(r.stdout, "| io |") and "partial" in _row(r.stdout, "| sgr |")
    assert "2/4 examples" in r.stdout and "3/4 examples" in r.stdout  # the partial jobs are named with their counts


def test_partial_run_alone_in_its_cell_is_marked_not_refused(tmp_path):
    root = tmp_path / "m"
    _run(root, 0, "io", 0, [1, 0, 0, 1])
    part = _run(root, 1, "sgr", 0, [1, 1])
    _metrics(part, **{"run__partial": True, "run__n_expected": 4})
    md = write_tables(root, ["reasoner"], ["metric"], ["hits_at_1"])["md"].read_text()
    assert "partial" in _row(md, "| sgr |") and "partial" not in _row(md, "| io |")
    assert part.name in md


def test_failed_job_prints_the_reason_of_its_marker(tmp_path):
    """INTERFACE.md: failed.json {"status", "reason", "stage"}; a marked dir without .hydra counts."""
    root = tmp_path / "m"
    _run(root, 0, "io", 0, [1, 0])
    bad = _job(root, 1, "sgr", "none", "cwq", 0, None)
    (bad / "failed.json").write_text(json.dumps({"status": "failed", "reason": "kg.name: no such KG 'x'",
                                                 "stage": "startup"}))
    bare = root / "2_reasoner=tog"
    bare.mkdir()
    (bare / "failed.json").write_text(json.dumps({"status": "failed", "reason": "data missing: cwq", "stage": "run"}))
    df, missing = collect(root)
    reasons = {m["job"]: m["reason"] for m in missing}
    assert reasons[bad.name] == "failed (startup): kg.name: no such KG 'x'"
    assert reasons[bare.name] == "failed (run): data missing: cwq"
    # nothing to tabulate: the error says why, not only "no metric values"
    only = tmp_path / "f"
    b2 = _job(only, 0, "sgr", "none", "cwq", 0, None)
    (b2 / "failed.json").write_text(json.dumps({"status": "failed", "reason": "RunFailed: no key", "stage": "startup"}))
    r = _cli(only)
    assert r.returncode == 2 and "RunFailed: no key" in r.stderr and "Traceback" not in r.stderr


def test_torn_lines_are_counted_and_named(tmp_path):
    root = tmp_path / "m"
    d = _run(root, 0, "io", 0, [1, 0, 0, 1, 1])
    lines = (d / "predictions.jsonl").read_text().splitlines()
    lines.insert(2, '{"id": "qx", "metrics": {"hits_at')  # torn in the middle
    lines.append('\xff\xfe not json')
    lines.append('{"id": "q9", "metr')  # torn last line (killed writer)
    (d / "predictions.jsonl").write_text("\n".join(lines), encoding="utf-8", errors="surrogateescape")
    paths = write_tables(root, ["reasoner"], ["metric"], ["hits_at_1"])
    md = paths["md"].read_text()
    assert "predictions.jsonl: 3 unreadable line(s) (lines 3, 7, 8)" in md
    assert "over the cell's 5 questions" in md


def test_non_finite_and_malformed_give_one_line_naming_the_file(tmp_path):
    root = tmp_path / "m"
    inf = _run(root, 0, "io", 0, [1, 0, 0, 1])
    (inf / "metrics.json").write_text('{"metric/hits_at_1": Infinity, "metric/f1": NaN, "run/n_examples": 4}')
    _run(root, 1, "io", 1, [1, 1, 0, 1])
    nanq = _run(root, 2, "sgr", 0, [1, 1, 0, 1])
    rows = [json.loads(x) for x in (nanq / "predictions.jsonl").read_text().splitlines()]
    rows[1]["metrics"]["hits_at_1"] = float("inf")
    (nanq / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    broken = _job(root, 3, "cot", "none", "cwq", 0, {"metric/hits_at_1": 0.5})
    (broken / ".hydra" / "hydra.yaml").write_text("hydra: [unclosed\n")
    listy = _job(root, 4, "cot", "none", "webqsp", 0, None)
    (listy / "metrics.json").write_text("[1, 2]")
    text = _job(root, 5, "io", "none", "webqsp", 0, {"metric/hits_at_1": "0.5", "run/status": "complete"})
    r = _cli(root, "--metrics", "hits_at_1")
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    out = r.stdout + r.stderr
    assert f"{inf.name}/metrics.json: metric/hits_at_1 is inf" in out
    assert f"{nanq.name}/predictions.jsonl: 1 non-finite value(s) of hits_at_1 (line 2)" in out
    assert f"{broken.name}/.hydra/hydra.yaml: invalid YAML" in out
    assert f"{listy.name}/metrics.json: expected a JSON object" in out
    assert f"{text.name}/metrics.json: metric/hits_at_1 is '0.5' (not a number)" in out
    assert "run/status" not in out
    # the io cell keeps seed 1's value; sgr keeps an interval over its 3 finite questions
    assert "over the cell's 3–4 questions" in out or "over the cell's 3-4 questions" in out
    assert "| io | 0.750 [0.250, 1.000] |" in out.replace("**", "")  # seed 1 alone, mean and interval


def test_cell_without_interval_says_why(tmp_path):
    root = tmp_path / "m"
    _run(root, 0, "io", 0, [1, 0, 0, 1])
    d = _job(root, 1, "sgr", "none", "cwq", 0, {"metric/hits_at_1": 0.5})  # no predictions.jsonl
    md = write_tables(root, ["reasoner"], ["metric"], ["hits_at_1"])["md"].read_text()
    assert f"No interval: reasoner=sgr / hits_at_1 ({d.name}: no predictions.jsonl)" in md


def test_errored_examples_are_counted_in_the_cell(tmp_path):
    root = tmp_path / "m"
    for s in (0, 1):
        _metrics(_run(root, s, "io", s, [1, 0, 0, s]), run__errors=s + 1)
    _metrics(_run(root, 2, "sgr", 0, [1, 1, 0, 1]), run__errors=0)
    md = write_tables(root, ["reasoner"], ["metric"], ["hits_at_1", "f1"])["md"].read_text()
    io = _row(md, "| io |")
    assert io.count("(3 errored)") == 2 and "errored" not in _row(md, "| sgr |")
    assert "errored)" in md.split("\n\n", 1)[1] and "run/errors" in md


def test_errors_counted_from_rows_when_metrics_json_has_none(tmp_path):
    root = tmp_path / "m"
    d = _run(root, 0, "io", 0, [1, 0, 0, 1])
    rows = [json.loads(x) for x in (d / "predictions.jsonl").read_text().splitlines()]
    rows[2]["error"] = "LLMError: down"
    (d / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    md = write_tables(root, ["reasoner"], ["metric"], ["hits_at_1"])["md"].read_text()
    assert "(1 errored)" in _row(md, "| io |")


def test_retrieved_size_is_shown_beside_answer_coverage(tmp_path):
    root = tmp_path / "m"
    for k, (r, size) in enumerate([("tog", 6.5), ("reknos", 120.0)]):
        d = _run(root, k, r, 0, [1, 0, 1, 1])
        _metrics(d, metric__answer_coverage=0.5 + k / 4, retrieval__retrieved_size=size,
                 metric__answer_coverage_n_paths=0.25 + k / 4,
                 retrieval__retrieved_size_n_paths=3.0 + k)
    md = write_tables(root, ["reasoner"], ["metric"], ["hits_at_1", "answer_coverage", "answer_coverage_n_paths"],
                      ci=None)["md"].read_text()
    header = [c.strip() for c in md.splitlines()[0].strip("|").split("|")]
    assert header[header.index("Coverage") + 1] == "Retrieved"
    assert header[header.index("Coverage (n paths)") + 1] == "Retrieved (n paths)"
    assert "120.000" in _row(md, "| reknos |") and "6.500" in _row(md, "| tog |")


def test_no_sampled_calls_shows_no_seed_spread(tmp_path):
    """INTERFACE.md: a cell whose jobs all have llm/sampled_calls == 0 shows no spread and says so."""
    root = tmp_path / "m"
    for s in (0, 1):
        _metrics(_run(root, s, "io", s, [1, 0, 0, s]), llm__sampled_calls=0)
        _metrics(_run(root, 2 + s, "tog", s, [1, s, 0, 1]), llm__sampled_calls=12)
        _metrics(_run(root, 4 + s, "cot", s, [1, 0, 0, 1]), llm__sampled_calls=0)  # seeds give the same values
    md = write_tables(root, ["reasoner"], ["metric"], ["hits_at_1"])["md"].read_text()
    assert "±" not in _row(md, "| cot |") and "±" in _row(md, "| tog |")
    assert "no sampled calls: seeds change nothing" in md and "reasoner=cot" in md
    # io's seeds differ although no LLM call was sampled (a seeded draw inside a method): said, and the ± shown
    assert "yet its seeds' values differ" in md and "±" in _row(md, "| io |")


def test_cell_whose_runs_answered_different_questions_is_flagged(tmp_path):
    root = tmp_path / "m"
    _run(root, 0, "io", 0, [1, 0, 0, 1], ids=["a", "b", "c", "d"])
    _run(root, 1, "io", 1, [1, 0, 0, 1], ids=["a", "b", "e", "f"])
    _run(root, 2, "sgr", 0, [1, 0, 0, 1], ids=["a", "b", "c", "d"])
    _run(root, 3, "sgr", 1, [1, 1, 0, 1], ids=["a", "b", "c", "d"])
    md = write_tables(root, ["reasoner"], ["metric"], ["hits_at_1"])["md"].read_text()
    assert "≠ questions" in _row(md, "| io |") and "≠ questions" not in _row(md, "| sgr |")
    assert "reasoner=io: its 2 runs answered different questions (4 ids not in every run)" in md


def test_boot_past_the_maximum_is_refused_in_one_line(tmp_path):
    from kgreason.tables import MAX_BOOT, CIOptions

    root = tmp_path / "m"
    _run(root, 0, "io", 0, [1, 0])
    for b in ("1e9", str(MAX_BOOT + 1)):
        r = _cli(root, "--boot", b)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and f"{MAX_BOOT:,}" in r.stderr, b
    with pytest.raises(ValueError, match="--boot"):
        CIOptions(B=MAX_BOOT + 1)
    assert _cli(root, "--boot", "1e3").returncode == 0


def _big_run(root: Path, n: int) -> Path:
    d = _job(root, 0, "io", "none", "cwq", 0, {"metric/hits_at_1": 0.5, "run/n_examples": n})
    pad = "x" * 400  # a trace-sized field the tables never need
    with open(d / "predictions.jsonl", "w") as f:
        for i in range(n):
            f.write(json.dumps({"id": f"q{i}", "prediction": "p", "answers": ["a"], "trace": pad,
                                "metrics": {"hits_at_1": float(i % 2), "f1": 0.5}, "error": None}) + "\n")
    return d


@pytest.mark.slow
def test_tables_stream_rows_and_keep_numbers(tmp_path, monkeypatch):
    """Issue 44 item 5: the rows of a run are read once and kept as numbers: the peak memory of
    building the table (tracemalloc) is a small fraction of the predictions file and under 400
    bytes per question (so 10^6 questions stay within a few hundred MB). The bootstrap's own
    resampling block (kgreason.stats._CHUNK, a fixed bound whatever the size) is made small here so
    that the rows' cost is what is measured."""
    import tracemalloc

    from kgreason import stats
    from kgreason.tables import CIOptions, build_tables

    monkeypatch.setattr(stats, "_CHUNK", 1 << 14)

    peaks = {}
    for n in (10_000, 100_000):
        root = tmp_path / f"m{n}"
        d = _big_run(root, n)
        tracemalloc.start()
        t = build_tables(root, ["reasoner"], ["metric"], ["hits_at_1", "f1"], ci=CIOptions(B=50))
        peaks[n] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert int(t.wide[("q", "metric/hits_at_1")].iloc[0]) == n
        size = (d / "predictions.jsonl").stat().st_size
        (d / "predictions.jsonl").unlink()  # 50 MB: not left behind in pytest's kept temp dirs
        assert peaks[n] < 0.5 * size, (n, peaks[n], size)
        assert peaks[n] / n < 400, (n, peaks[n])  # bytes per question: 10^6 questions stay within a few hundred MB


def test_failed_marker_beside_metrics_is_marked_with_its_reason(tmp_path):
    """A run that wrote metrics.json and then failed (failed.json, stage run: e.g. its error-rate
    check) is not a clean run: its cell says (failed) and its reason is printed; it is partial
    only if it answered fewer examples than expected."""
    root = tmp_path / "m"
    d = _run(root, 0, "io", 0, [1, 0, 1])
    _metrics(d, run__n_expected=3, run__errors=2)
    (d / "failed.json").write_text(json.dumps({"status": "failed", "reason": "RunFailed: 2 of 3 examples failed",
                                               "stage": "run"}))
    d2 = _run(root, 1, "sgr", 0, [1, 1])
    _metrics(d2, run__n_expected=5)
    (d2 / "failed.json").write_text(json.dumps({"status": "failed", "reason": "LLMUnavailable", "stage": "run"}))
    md = write_tables(root, ["reasoner"], ["metric"], ["hits_at_1"])["md"].read_text()
    io, sgr = _row(md, "| io |"), _row(md, "| sgr |")
    assert "(failed)" in io and "(partial)" not in io and "(2 errored)" in io
    assert "(failed)" in sgr and "(partial)" in sgr
    assert "failed (run): RunFailed: 2 of 3 examples failed" in md
    assert f"{d2.name} (2/5 examples; failed (run): LLMUnavailable)" in md


def test_a_bad_seed_in_config_is_one_line(tmp_path):
    root = tmp_path / "m"
    _run(root, 0, "io", 0, [1, 0])
    d = _run(root, 1, "io", 1, [1, 1])
    (d / "config.yaml").write_text("seed: abc\n")
    r = _cli(root)
    assert r.returncode == 0 and "Traceback" not in r.stderr
    assert f"{d.name}/config.yaml: seed is 'abc', expected an integer" in r.stdout


def test_marks_render_in_latex(tmp_path):
    root = tmp_path / "m"
    _run(root, 0, "io", 0, [1, 0, 0, 1], ids=["a", "b", "c", "d"])
    _metrics(_run(root, 1, "io", 1, [1, 0, 0, 1], ids=["a", "b", "e", "f"]), run__errors=2)
    tex = write_tables(root, ["reasoner"], ["metric"], ["hits_at_1"])["tex"].read_text()
    assert r"(2 errored) ($\neq$ questions)" in tex and "≠" not in tex


def test_a_refused_launch_on_a_run_dir_does_not_relabel_its_rows(tmp_path):
    """Hydra writes ``.hydra/`` before kgreason runs, so a second launch on a run dir that kgreason
    refuses (here: another reasoner on io's dir; then a launch while the dir's lock is held) left
    its own config there beside io's rows. The dir's ``.hydra/`` is put back as it was, and the
    table labels the rows from the record of the launch that wrote them (``run.json``)."""
    import os

    from kgreason.runs import lock_run_dir

    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    args = ["llm=scripted", "tracking=none", "reports.hop_distribution=false", "dataset.limit=3",
            f"llm_cache.dir={tmp_path / 'cache'}", f"hydra.run.dir={run_dir}"]
    r = subprocess.run([sys.executable, "-m", "kgreason", "reasoner=io", "reasoner.top_k=4", *args],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = (run_dir / "predictions.jsonl").read_bytes()
    record = {p.name: p.read_bytes() for p in (run_dir / ".hydra").iterdir()}
    assert "reasoner: io" in record["hydra.yaml"].decode()
    r = subprocess.run([sys.executable, "-m", "kgreason", "reasoner=cot", *args],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "was made with another config" in r.stderr
    assert {p.name: p.read_bytes() for p in (run_dir / ".hydra").iterdir()} == record
    with lock_run_dir(run_dir):  # a run still writing the dir: the launch stops, its .hydra/ undone
        r = subprocess.run([sys.executable, "-m", "kgreason", "reasoner=io", "reasoner.top_k=5", *args],
                           cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "is in use by another run" in r.stderr, r.stderr[-3000:]
    assert {p.name: p.read_bytes() for p in (run_dir / ".hydra").iterdir()} == record
    assert (run_dir / "predictions.jsonl").read_bytes() == rows
    info = job_info(run_dir)
    assert info["reasoner"] == "io" and "reasoner.top_k=4" in info["variant"].split(",")
    r = _cli(str(run_dir), "--rows", "reasoner", "--metrics", "hits_at_1")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "| io |" in r.stdout and "| cot |" not in r.stdout


# ----------------------------------------------------------------------------- issue 59: tables ready to paste
def test_sweep_table_is_ready_to_paste(tmp_path):
    """A real two-method sweep (retrieval_only and io on 12 embedded questions, the io model a
    scripted double that knows one answer): ``kgreason tables`` puts Hits@1 first (the dataset's
    ``metrics:`` order, though metrics.json is sorted), heads the columns with readable labels,
    leaves out what every row shares (``ablation = none``, the one dataset) and says it in the
    caption, bolds the best of the two rows of a score (never the retrieved-set size), and writes
    a ``.tex`` table float with caption and label that compiles with booktabs and graphicx."""
    import os
    import shutil

    sweep = tmp_path / "sweep"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           "KGREASON_CACHE_DIR": str(tmp_path / "cache")}
    rule = "llm.rules=[{pattern: 'Which company produced The Hollow Orchard', reply: '[\"Favark Pictures\"]'}]"
    r = subprocess.run([sys.executable, "-m", "kgreason", "--multirun", "reasoner=retrieval_only,io", "llm=scripted",
                        "llm.default=x", rule, "tracking=none", "dataset.limit=12", f"hydra.sweep.dir={sweep}"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    r = _cli(sweep, "--boot", "300")
    assert r.returncode == 0, r.stderr
    header, _, *body = r.stdout.splitlines()[:4]
    assert header == "| reasoner | Hits@1 | All answers | Answer F1 | Coverage | Retrieved |"
    cells = {ln.split("|")[1].strip(): [c.strip() for c in ln.strip("|").split("|")] for ln in body}
    assert cells["io"][1].startswith("**0.083 [") and not cells["retrieval_only"][1].startswith("**")
    assert "**" not in cells["retrieval_only"][5]  # a size is not a score
    assert "Every row: ablation = none." in r.stdout and "Every column: dataset = embedded." in r.stdout
    assert "No interval" not in r.stdout  # nothing to point to: the caption says why Retrieved has none
    assert "Retrieved: a run-level figure with no per-question values, so no interval." in r.stdout
    tex = (sweep / "results.tex").read_text()
    # a booktabs float for a paper (tests/test_tables_tex.py: it fits a two-column article's column)
    assert tex.splitlines()[1] == "\\begin{table}[t]" and tex.rstrip().endswith("\\end{table}")
    assert "\\caption{Results on embedded with scripted (12 questions)" in tex and "\\label{tab:results}" in tex
    assert "Note: Each cell is one run" in tex  # the full explanation under the table
    assert "reasoner & Hits@1 &" in tex and "ablation" not in tex.split("\\caption")[0]
    assert all(ord(ch) < 128 for ch in tex), "plain LaTeX: ASCII only"
    if shutil.which("pdflatex"):  # Debian: apt-get install texlive-latex-base texlive-latex-recommended
        doc = tmp_path / "doc.tex"
        doc.write_text("\\documentclass{article}\n\\usepackage{booktabs}\n\\usepackage{graphicx}\n"
                       "\\begin{document}\n\\input{" + str(sweep / "results.tex") + "}\n\\end{document}\n")
        c = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", doc.name], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
        assert c.returncode == 0, c.stdout[-2000:]
        assert (tmp_path / "doc.pdf").stat().st_size > 0


def test_single_run_dir_puts_the_headline_metric_first(tmp_path):
    """metrics.json is written with sorted keys; the columns follow the run's ``dataset.metrics``
    (docs/metrics.md), so Hits@1 is first, not last after ``answer_set_f1``."""
    d = _job(tmp_path, 0, "rag", "none", "embedded", 0,
             {"metric/all_answers_found": 0.2, "metric/answer_coverage": 0.9, "metric/answer_set_f1": 0.3,
              "metric/hits_at_1": 0.4})
    (d / "config.yaml").write_text(yaml.safe_dump({"seed": 0, "dataset": {
        "metrics": ["hits_at_1", "all_answers_found", "answer_set_f1", "answer_coverage"]}}))
    md = write_tables(d, ci=None)["md"].read_text()
    assert md.splitlines()[0] == "| reasoner | Hits@1 | All answers | Answer F1 | Coverage |"
    assert "**" not in md  # one row: nothing is the best of anything
    assert "Every column: dataset = embedded." in md


def test_bold_only_the_best_score_of_two_rows_never_costs_or_sizes(tmp_path):
    root = tmp_path / "m"
    for k, (r, hits, calls) in enumerate([("io", [1, 0, 0, 0], 4), ("sgr", [1, 1, 0, 0], 40), ("cot", [1, 0, 0, 0], 8)]):
        _metrics(_run(root, k, r, 0, hits), llm__calls=calls, retrieval__retrieved_size=10.0 * (k + 1),
                 metric__search_space=3.0 * (k + 1))
    df, _ = collect(root)
    rows, cols = ["reasoner"], ["metric"]
    wide = pivot(df, rows, cols, ["hits_at_1", "llm/calls", "retrieval/retrieved_size", "search_space"])
    md = render_markdown(wide, rows, cols, digits=2)
    lines = {ln.split("|")[1].strip(): ln for ln in md.splitlines()[2:]}
    assert md.splitlines()[0] == "| reasoner | Hits@1 | LLM calls | Retrieved | Search space |"
    assert md.count("**") == 2 and "| **0.50** |" in lines["sgr"]  # sgr's Hits@1 alone


def test_labels_can_be_overridden(tmp_path):
    root = tmp_path / "m"
    _run(root, 0, "io", 0, [1, 0, 0, 1])
    _run(root, 1, "sgr", 0, [1, 1, 0, 1])
    r = _cli(root, "--metrics", "hits_at_1,f1", "--label", "hits_at_1=H@1", "--label", "f1=Token F1", "--ci", "none")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "| reasoner | H@1 | Token F1 |"
    bad = _cli(root, "--label", "hits_at_1")
    assert bad.returncode == 2 and "expected METRIC=LABEL" in bad.stderr and "Traceback" not in bad.stderr


def test_pairing_group_is_not_a_variant(tmp_path):
    """``pairing`` is chosen by the dataset and KG (conf/pairing): it never labels a row."""
    root = tmp_path / "m"
    for k, (ds, kg) in enumerate([("cwq", "freebase"), ("metaqa", "metaqa")]):
        d = _run(root, k, "io", 0, [1, 0], dataset=ds)
        hy = yaml.safe_load((d / ".hydra" / "hydra.yaml").read_text())
        hy["hydra"]["runtime"]["choices"].update({"kg": kg, "pairing": f"{ds}_{kg}"})
        (d / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump(hy))
    md = write_tables(root, ci=None)["md"].read_text()
    assert "pairing" not in md


def test_tables_out_under_a_file_is_one_line(tmp_path, capsys):
    """``--out`` under a file: one line naming the path, exit 2, not a traceback."""
    from kgreason.tables import main

    root = tmp_path / "m"
    _run(root, 0, "io", 0, [1, 0, 1])
    (tmp_path / "afile").write_text("")
    assert main([str(root), "--out", str(tmp_path / "afile" / "t"), "--ci", "none"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "afile" in err[0], err
