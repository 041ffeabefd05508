"""A bundle of a sweep whose job dirs are named after their overrides replays (issue #58, checked
as a user would). Hydra's own convention names a sweep's job dirs after their overrides
(``0_dataset.limit=2,llm=scripted,...``); kgreason's default was that until issue 71 made it the
job number (conf/hydra/default.yaml), and a user may still choose it
(``hydra.sweep.subdir=${hydra.job.num}_${hydra.job.override_dirname}``), as older sweeps have it. A
replay that hands such a path to Hydra unquoted stopped with a parser traceback on every such sweep."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: Hydra's own job dir name, made of the overrides
OVERRIDE_NAMED = "hydra.sweep.subdir=${hydra.job.num}_${hydra.job.override_dirname}"


def _kg(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "KGREASON_OUTPUT": str(tmp / "outputs"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "kgreason", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)


def test_replay_of_a_sweep_with_job_dirs_named_after_their_overrides(tmp_path):
    """One io job (scripted model, a reply with a space and a quote), its dir named
    ``<num>_<overrides>``: export, then replay on a fresh cache, one line, identical."""
    r = _kg(tmp_path, "--multirun", "reasoner=io", "llm=scripted", "llm.default=\"it's Favark Pictures\"",
            "dataset.limit=2", "tracking=none", f"hydra.sweep.dir={tmp_path / 'sweep'}", OVERRIDE_NAMED)
    assert r.returncode == 0, r.stderr[-3000:]
    (job,) = [p for p in (tmp_path / "sweep").iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert "=" in job.name and "," in job.name, job.name  # Hydra's naming by overrides, as a user gets it
    r = _kg(tmp_path, "bundle", "export", str(tmp_path / "sweep"), "-o", str(tmp_path / "b.tar.gz"))
    assert r.returncode == 0, r.stderr[-3000:]
    r = _kg(tmp_path, "bundle", "replay", str(tmp_path / "b.tar.gz"), "--out", str(tmp_path / "replayed"))
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    assert f"{job.name}: identical" in r.stdout.splitlines(), r.stdout[-2000:]
    m = json.loads((tmp_path / "replayed" / "runs" / job.name / "metrics.json").read_text())
    assert m["llm/calls"] == 0 and m["llm/cache_hits"] == 2
