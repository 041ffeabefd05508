"""notebooks/analysis.ipynb runs headless (nbclient, python3 kernel) on a real tiny multirun."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_analysis_notebook_executes(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    sweep = tmp_path / "multirun"
    env = {**os.environ, "WANDB_MODE": "offline"}
    r = subprocess.run([sys.executable, "-m", "kgreason", "--multirun", "tracking=none", "dataset.sample=12",
                        "reasoner.hops=1,2", "seed=0,1", f"hydra.sweep.dir={sweep}"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    nb = nbformat.read(REPO / "notebooks" / "analysis.ipynb", as_version=4)
    monkeypatch.setenv("KGREASON_MULTIRUN", str(sweep))  # the kernel inherits the environment
    monkeypatch.setenv("KGREASON_METRIC", "hits_at_1")
    client = nbclient.NotebookClient(nb, timeout=240, kernel_name="python3",
                                     resources={"metadata": {"path": str(REPO / "notebooks")}})
    client.execute()
    out = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "4 finished jobs, 0 missing/failed" in out
    assert "| retrieval_only | none | reasoner.hops=1 |" in out and "| none | reasoner.hops=2 |" in out
    for name in ("analysis_metric_vs_hops.png", "analysis_metric_vs_ablation.png"):
        assert (sweep / name).read_bytes()[:4] == b"\x89PNG"
