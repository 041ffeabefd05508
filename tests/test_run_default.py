"""The default run's figures, as the README states them (``python -m kgreason``: retrieval_only
on the 300 embedded questions). A change that moves them must update this test and the README
together, on purpose."""

from __future__ import annotations

import re

import pytest

from conftest import REPO, compose_cfg

HITS_AT_1 = 0.113          # README "Quick start"; no gold hop counts (reasoner.gold_hops: false)
ANSWER_COVERAGE = 0.907


def test_readme_states_the_pinned_figures():
    text = (REPO / "README.md").read_text()
    m = re.search(r"Hits@1 (\d\.\d+), answer coverage (\d\.\d+) on the (\d+) questions", text)
    assert m, "README no longer states the default run's Hits@1 / answer coverage"
    assert (float(m.group(1)), float(m.group(2)), int(m.group(3))) == (HITS_AT_1, ANSWER_COVERAGE, 300)


def test_default_run_reproduces_the_readme_figures(tmp_path):
    from kgreason.runner.run import run

    res = run(compose_cfg(["tracking=none"], tmp_path), tmp_path)
    m = res.metrics
    assert m["run/n_examples"] == 300 and m["run/errors"] == 0
    assert m["metric/hits_at_1"] == pytest.approx(HITS_AT_1, abs=5e-4)
    assert m["metric/answer_coverage"] == pytest.approx(ANSWER_COVERAGE, abs=5e-4)
    assert m["llm/calls"] == 0  # retrieval_only never calls the LLM
    # the run records that the figure used no gold hop counts
    import yaml
    saved = yaml.safe_load((res.out_dir / "config.yaml").read_text())
    assert saved["reasoner"]["gold_hops"] is False
    # the end of the run, as the README shows it (issue 59: a results table, not raw keys)
    from kgreason.tables.summary import run_summary

    block = re.search(r"It ends like this:\n\n```text\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    assert block, "README no longer shows how the default run ends"
    printed = run_summary(res.out_dir, m, list(saved["dataset"]["metrics"])).splitlines()
    assert block.group(1).splitlines()[:-1] == printed[:-1]
    assert block.group(1).splitlines()[-1].startswith("run dir: outputs/runs/") and printed[-1].startswith("run dir: ")
