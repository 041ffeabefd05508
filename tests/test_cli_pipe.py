"""A tool's output piped into a reader that stops early (``kgreason tables DIR | head``, ``kgreason
data list | head -3``): what was written stands and the command ends quietly, with no
``BrokenPipeError`` traceback after the lines the reader wanted (checked as a user would)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_a_tool_piped_into_a_reader_that_stops_early_prints_no_traceback(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    p = subprocess.Popen([sys.executable, "-m", "kgreason", "data", "list"], cwd=REPO, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()  # the reader is gone before the first line (as `| head -0`)
    err = p.stderr.read().decode()
    rc = p.wait(timeout=300)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err[-2000:]
    assert rc == 141, (rc, err[-2000:])  # 128 + SIGPIPE, as a shell reports a writer its reader left
