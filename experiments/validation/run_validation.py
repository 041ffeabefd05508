"""The validation runner's entry point: ``python experiments/validation/run_validation.py --help``.

The runner is the package ``experiments/validation_runner/`` (rows, sittings, collecting a run
dir, bundles, currency, stamps, the generated docs, the command line); this folder keeps the
committed tables (``validation_*.json``), their bundles (``bundles/``) and this file."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # experiments/: the validation_runner package

from validation_runner import *  # noqa: E402,F401,F403 - the runner's API, for a script that loads this file
from validation_runner.cli import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
