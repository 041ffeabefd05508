"""A run whose model replies were never stored (``llm_cache.mode=off``, the switch the end-of-run
line names) cannot be replayed: exporting it made a bundle that ``verify`` passed ("1 of 1 runs
verified", 0 cache entries) and ``replay`` then missed on every example. Export refuses it, naming
the run and the reason; ``verify`` fails such a run in an older bundle (checked as a user would)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from kgreason.storage.bundle import BundleError, export, open_bundle
from kgreason.runner.replay import verify

REPO = Path(__file__).resolve().parents[2]


def _run(tmp: Path, name: str, *overrides: str) -> Path:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    r = subprocess.run([sys.executable, "-m", "kgreason", "reasoner=io", "llm=scripted", "dataset.limit=2",
                        "tracking=none", f"llm_cache.dir={tmp / 'cache'}", f"hydra.run.dir={tmp / name}", *overrides],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return tmp / name


def test_a_run_without_its_replies_is_refused_by_export_and_failed_by_verify(tmp_path):
    off = _run(tmp_path, "off", "llm_cache.mode=off")
    with pytest.raises(BundleError, match=r"off: made [0-9]+ model requests but no cache key of them is listed"):
        export([off], tmp_path / "off.tar.gz")
    # an older bundle of such a run (made before export refused it): verify names what it lacks
    on = _run(tmp_path, "on")
    export([on], tmp_path / "on.tar.gz")
    with tarfile.open(tmp_path / "on.tar.gz") as t:
        blobs = {m.name: t.extractfile(m).read() for m in t}
    del blobs["runs/on/calls.jsonl"]
    blobs["calls/llm_calls.jsonl"] = b""
    man = json.loads(blobs["manifest.json"])
    man["entries"] = {n: hashlib.sha256(b).hexdigest() for n, b in blobs.items() if n != "manifest.json"}
    man.pop("sizes")  # a bundle made before issue 73 lists no sizes
    blobs["manifest.json"] = json.dumps(man).encode()
    with tarfile.open(tmp_path / "old.tar.gz", "w:gz") as t:
        for n, b in blobs.items():
            ti = tarfile.TarInfo(n)
            ti.size = len(b)
            t.addfile(ti, io.BytesIO(b))
    (line,) = verify(open_bundle(tmp_path / "old.tar.gz", tmp_path / "opened"))
    assert line[1] is False and re.search(r"made [0-9]+ model requests but the bundle lists no cache key", line[2]), line
