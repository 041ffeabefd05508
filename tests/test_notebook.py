"""notebooks/analysis.ipynb: committed with its outputs (tables and figures visible when the
notebook is viewed on the hosting site), papermill-style parameters, and it runs headless
(nbclient, python3 kernel) on a real tiny multirun, drawing its figures inline; the metrics its
stored outputs name are the ones a fresh run writes (stale outputs: ``make notebook``)."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NB = REPO / "notebooks" / "analysis.ipynb"


def _pngs(cell) -> list[bytes]:
    return [base64.b64decode(o["data"]["image/png"]) for o in cell.get("outputs", [])
            if "image/png" in o.get("data", {})]


def test_committed_notebook_shows_its_outputs():
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(NB, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    tagged = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1 and "MULTIRUN = None" in tagged[0].source
    assert all(c.get("execution_count") for c in code), "commit the notebook executed (make notebook)"
    figures = [png for c in code for png in _pngs(c)]
    assert len(figures) == 2 and all(p[:4] == b"\x89PNG" for p in figures)
    tables = [o for c in code for o in c.get("outputs", []) if "text/html" in o.get("data", {})]
    assert tables, "the per-hop and per-ablation tables render as HTML"
    assert "matplotlib.use(" not in "".join(c.source for c in code), "no forced backend: plots show inline"


@pytest.mark.slow
def test_analysis_notebook_executes(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    sweep = tmp_path / "multirun"
    env = {**os.environ, "WANDB_MODE": "offline", "KGREASON_PROGRESS": "off"}
    r = subprocess.run([sys.executable, "-m", "kgreason", "--multirun", "tracking=none", "dataset.sample=12",
                        "reasoner.hops=1,2", "seed=0,1", f"hydra.sweep.dir={sweep}"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    nb = nbformat.read(NB, as_version=4)
    for c in nb.cells:  # start from a clean notebook, as a reader re-running it would
        if c.cell_type == "code":
            c.outputs, c.execution_count = [], None
    # inject parameters after the tagged cell, as papermill does
    i = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    injected = nbformat.v4.new_code_cell(f"MULTIRUN = {str(sweep)!r}\nMETRIC = 'hits_at_1'")
    injected.metadata["tags"] = ["injected-parameters"]
    nb.cells.insert(i + 1, injected)
    client = nbclient.NotebookClient(nb, timeout=240, kernel_name="python3",
                                     resources={"metadata": {"path": str(REPO / "notebooks")}})
    client.execute()
    out = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "4 finished jobs, 0 missing/failed" in out
    assert "| retrieval_only | none | reasoner.hops=1 |" in out and "| none | reasoner.hops=2 |" in out
    figure_cells = [c for c in nb.cells if c.cell_type == "code" and "plt.show()" in c.source]
    assert len(figure_cells) == 2
    for c in figure_cells:  # each figure was drawn inline (an image/png display output)
        pngs = _pngs(c)
        assert len(pngs) == 1 and pngs[0][:4] == b"\x89PNG", [o.get("output_type") for o in c.outputs]
    for name in ("analysis_metric_vs_hops.png", "analysis_metric_vs_ablation.png"):
        assert (sweep / name).read_bytes()[:4] == b"\x89PNG"


def _stored_metric_names(nb) -> dict[str, str]:
    """``metric/<name>`` -> where the committed notebook names it: its stored outputs (table header
    cells ``<dataset> / <name>``, the ``| metric: <name>`` line, any literal ``metric/<name>``), the
    ``METRIC`` default of the parameters cell and the ``-p METRIC <name>`` of its papermill example."""
    import re

    found: dict[str, str] = {}
    for i, c in enumerate(nb.cells):
        texts = []
        for o in c.get("outputs", []):
            texts.append("".join(o.get("text", "")))
            texts += ["".join(v) for k, v in o.get("data", {}).items() if k.startswith("text/")]
        for t in texts:
            for line in t.splitlines():
                if line.startswith("|") and " / " in line:  # the results table's header
                    for cell in line.strip("|").split("|"):
                        if " / " in cell:
                            found.setdefault("metric/" + cell.split(" / ")[-1].strip().strip("*"), f"cell {i} output")
            for m in re.finditer(r"\| metric: (\w+)", t):
                found.setdefault(f"metric/{m.group(1)}", f"cell {i} output")
            for m in re.finditer(r"\bmetric/(\w+)", t):
                found.setdefault(f"metric/{m.group(1)}", f"cell {i} output")
        for m in re.finditer(r"^METRIC = [\"'](\w+)[\"']|-p METRIC (\w+)", c.source, re.M):
            found.setdefault(f"metric/{m.group(1) or m.group(2)}", f"cell {i} source")
    return found


def test_notebook_names_only_metrics_a_fresh_run_writes(tmp_path):
    """The committed outputs go stale when a metric is renamed (issue 33): every metric the stored
    outputs name is a key of a fresh default run's metrics.json (the notebook's sweep runs the
    default reasoner; which keys a run writes does not depend on its size)."""
    import json

    nbformat = pytest.importorskip("nbformat")
    stored = _stored_metric_names(nbformat.read(NB, as_version=4))
    assert "metric/hits_at_1" in stored, stored  # the scan reads the outputs at all
    run = tmp_path / "run"
    env = {**os.environ, "KGREASON_PROGRESS": "off"}
    r = subprocess.run([sys.executable, "-m", "kgreason", "tracking=none", "dataset.limit=2",
                        f"hydra.run.dir={run}"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    fresh = set(json.loads((run / "metrics.json").read_text()))
    stale = {k: v for k, v in stored.items() if k not in fresh}
    assert not stale, (f"notebooks/analysis.ipynb names metrics a fresh run no longer writes: {stale}; "
                       f"the run writes {sorted(k for k in fresh if k.startswith('metric/'))}: "
                       "re-execute it (make notebook) and fix the names in its sources")
