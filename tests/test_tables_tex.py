"""Tables that fit a paper (issue 74, item 3): ``kgreason tables`` writes a booktabs table that
fits one column of a two-column article, with its interval as a second line, a subscript or a
``\\pm`` half-width (``--tex-ci``), numbers to the precision the questions support, a short caption
that names the model (``--caption`` replaces it), the long explanation as a note under the table,
and a label of the user's (``--tex-label``). Compiled with ``pdflatex`` (Debian's
``texlive-latex-base`` and ``texlive-latex-recommended``; ``make test`` installs them as root) and
checked for an overfull box; skipped, saying so, where ``pdflatex`` is not installed."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml

from kgreason.tables.cli import main

METRICS = ("hits_at_1", "all_answers_found", "answer_set_f1", "answer_coverage")
MODEL = "qwen2.5-coder-1.5b-instruct"
Q = 12  # questions per run, as `dataset.limit=12`

needs_pdflatex = pytest.mark.skipif(shutil.which("pdflatex") is None,
                                    reason="pdflatex not installed (apt-get install texlive-latex-base "
                                           "texlive-latex-recommended; `make test` does it as root)")


def _job(root: Path, num: int, reasoner: str, seed: int, rng, metrics=METRICS, q: int = Q) -> Path:
    """One job dir as a sweep writes it: Hydra's record, config.yaml (with the model), metrics.json
    and predictions.jsonl with per-question values (so cells carry an interval)."""
    d = root / str(num)
    (d / ".hydra").mkdir(parents=True)
    choices = {"dataset": "embedded", "reasoner": reasoner, "ablation": "none", "llm": "qwen_coder_1_5b",
               "kg": "embedded", "retriever": "scipy", "tracking": "none"}
    (d / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump({"hydra": {"runtime": {"choices": choices}}}))
    (d / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"reasoner={reasoner}", f"seed={seed}"]))
    (d / "config.yaml").write_text(yaml.safe_dump({"seed": seed, "llm": {"model": MODEL, "temperature": 0.7},
                                                   "dataset": {"metrics": list(metrics)}}))
    rows = [{"id": f"q{i}", "prediction": "x", "answers": ["x"], "error": None,
             "metrics": {m: float(rng.random() < 0.4) for m in metrics}} for i in range(q)]
    (d / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    means = {f"metric/{m}": float(np.mean([r["metrics"][m] for r in rows])) for m in metrics}
    (d / "metrics.json").write_text(json.dumps({**means, "run/n_examples": q, "run/n_expected": q,
                                                "llm/calls": 2 * q, "llm/sampled_calls": 2 * q,
                                                "retrieval/retrieved_size": 115.3333333333}))
    return d


def _sweep(root: Path, reasoners=("io", "rag"), seeds=(0, 1), metrics=METRICS, q: int = Q) -> Path:
    rng = np.random.default_rng(7)
    num = 0
    for r in reasoners:
        for s in seeds:
            _job(root, num, r, s, rng, metrics, q)
            num += 1
    return root


def _tables(root: Path, *args: str) -> str:
    assert main([str(root), "--boot", "200", *args]) == 0
    return (root / "results.tex").read_text()


def _compile(tmp: Path, tex: str, natural: bool = False) -> str:
    """Compile ``tex`` in a two-column article (10 pt, the column about 241 pt wide) with booktabs and
    graphicx; return the log. ``natural``: the table at its own size (the shrink-to-column fallback
    taken out), to see that it fits without being scaled."""
    if natural:
        fallback = r"\ifdim\wd0>\columnwidth\resizebox{\columnwidth}{!}{\usebox0}\else\usebox0\fi"
        assert fallback in tex
        tex = tex.replace(fallback, r"\usebox0")
    d = tmp / ("natural" if natural else "as_written")
    d.mkdir(exist_ok=True)
    (d / "results.tex").write_text(tex)
    (d / "paper.tex").write_text("\\documentclass[twocolumn]{article}\n\\usepackage{booktabs}\n\\usepackage{graphicx}\n"
                                 "\\begin{document}\n\\input{results}\n\\end{document}\n")
    r = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "paper.tex"], cwd=d,
                       capture_output=True, text=True, timeout=120)
    log = (d / "paper.log").read_text(errors="replace")
    assert r.returncode == 0, log[-3000:]
    return log


def test_the_table_uses_booktabs_rules_and_a_note_under_it(tmp_path):
    tex = _tables(_sweep(tmp_path / "s"))
    assert r"\toprule" in tex and r"\midrule" in tex and r"\bottomrule" in tex
    assert r"\hline" not in tex
    assert "booktabs" in tex.splitlines()[0] and "graphicx" in tex.splitlines()[0]  # what the preamble needs
    body, note = tex.split(r"\end{tabular}", 1)
    assert "bootstrap interval of the mean over the cell's 12 questions" in note  # the long text is a note
    cap = re.search(r"\\caption\{(.*?)\}\n", tex).group(1)
    assert len(cap) < 200 and "bootstrap interval of the mean over" not in cap, cap


def test_the_caption_names_the_model_and_the_label_and_caption_take_options(tmp_path):
    root = _sweep(tmp_path / "s")
    tex = _tables(root)
    cap = re.search(r"\\caption\{(.*?)\}\n", tex).group(1)
    assert MODEL in cap and "12 questions" in cap and "2 seeds" in cap, cap
    assert r"\label{tab:results}" in tex
    tex = _tables(root, "--tex-label", "tab:metaqa-ablation", "--caption", "SGR ablations on MetaQA (100 questions)")
    assert r"\label{tab:metaqa-ablation}" in tex
    assert r"\caption{SGR ablations on MetaQA (100 questions)}" in tex
    assert r"\label{tab:results}" not in tex


@pytest.mark.parametrize("bad", ["tab:a b", "tab:{x}", "tab:a%b", ""])
def test_a_label_latex_cannot_use_is_refused_in_one_line(tmp_path, bad, capsys):
    root = _sweep(tmp_path / "s")
    assert main([str(root), "--ci", "none", "--tex-label", bad]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --tex-label") and "\n" not in err, err


def test_numbers_have_the_precision_the_questions_support(tmp_path):
    """12 questions: a 95 % interval about ±0.28 wide; the .tex shows two decimals (the Markdown keeps
    --digits, 3 by default); 400 questions: three; --digits fixes both."""
    tex = _tables(_sweep(tmp_path / "a"))
    cells = re.findall(r"\d*\.\d+", tex.split(r"\midrule", 1)[1].split(r"\bottomrule")[0])
    assert cells and all(len(c.split(".")[1]) == 2 for c in cells), cells
    assert all(not c.startswith("0.") for c in cells)  # a score's leading zero left out: .38, as papers print them
    md = (tmp_path / "a" / "results.md").read_text()
    assert re.search(r"\| 0\.\d{3}", md)
    tex = _tables(_sweep(tmp_path / "b", q=400))
    cells = re.findall(r"\d*\.\d+", tex.split(r"\midrule", 1)[1].split(r"\bottomrule")[0])
    assert cells and all(len(c.split(".")[1]) == 3 for c in cells), cells
    tex = _tables(_sweep(tmp_path / "c"), "--digits", "4")
    assert re.search(r"0\.\d{4}", tex.split(r"\midrule", 1)[1])  # --digits: every figure as the .md has it


def test_the_interval_forms(tmp_path):
    root = _sweep(tmp_path / "s")
    below = _tables(root)
    body = below.split(r"\midrule", 1)[1].split(r"\bottomrule")[0].strip().splitlines()
    assert len(body) == 4  # two methods, each a line of means and a line of intervals under it
    assert body[1].startswith(" &") and r"\scriptsize" in body[1] and re.search(r"\[\.\d\d, \.\d\d\]", body[1])
    assert "$\\pm$" in body[0]  # two seeds that differ: the seed spread beside the mean
    sub = _tables(root, "--tex-ci", "sub")
    lines = sub.split(r"\midrule", 1)[1].split(r"\bottomrule")[0].strip().splitlines()
    assert len(lines) == 2 and re.search(r"\$_\{\[\.\d\d,\\,\.\d\d\]\}\$", lines[0]), lines[0]
    pm = _tables(root, "--tex-ci", "pm")
    lines = pm.split(r"\midrule", 1)[1].split(r"\bottomrule")[0].strip().splitlines()
    assert len(lines) == 2 and "[" not in lines[0], lines[0]
    assert "half the width of the 95% percentile bootstrap interval" in pm.replace(r"\%", "%")


@needs_pdflatex
@pytest.mark.parametrize("form", ["below", "sub", "pm"])
def test_a_two_method_two_seed_sweep_fits_a_two_column_articles_column(tmp_path, form):
    """The must-show: the .tex compiles in a two-column article with no overfull box; in the default
    form and the ``pm`` form at its own size (not shrunk to fit). The subscript form is the widest
    (the interval beside each mean): it is scaled to the column."""
    tex = _tables(_sweep(tmp_path / "s"), "--tex-ci", form)
    for natural in (False, True) if form != "sub" else (False,):
        log = _compile(tmp_path, tex, natural)
        assert "Overfull \\hbox" not in log, re.findall(r"Overfull \\hbox.*", log)


@needs_pdflatex
def test_a_table_too_wide_for_the_column_is_shrunk_to_it(tmp_path):
    """Eight metric columns cannot fit 241 pt at any readable size: the table is scaled to the
    column (the .tex says so in a comment), never overfull."""
    metrics = ("hits_at_1", "all_answers_found", "answer_set_f1", "answer_coverage", "em", "f1",
               "hits_at_any", "recall_at_k")
    tex = _tables(_sweep(tmp_path / "s", reasoners=("io", "rag", "retrieval_only"), metrics=metrics))
    assert "Overfull \\hbox" in _compile(tmp_path, tex, natural=True)  # it really is too wide
    log = _compile(tmp_path, tex)
    assert "Overfull \\hbox" not in log, re.findall(r"Overfull \\hbox.*", log)
