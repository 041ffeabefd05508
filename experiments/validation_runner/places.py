"""Where the validation table lives: the JSON tables and the bundles (``experiments/validation/``),
the clone's root (README.md, docs/), the call cache of the table's model replies. Read at call
time (``places.HERE``), so a test can point them at a scratch folder."""

from __future__ import annotations

from pathlib import Path

#: the clone's root (README.md, docs/, outputs/validation/)
ROOT = Path(__file__).resolve().parents[2]
#: the committed tables (``validation_<table>.json``) and their bundles
HERE = ROOT / "experiments" / "validation"
#: where each row's bundle is committed: ``bundles/<table>/<row>.tar.gz`` (issue 58)
BUNDLES = HERE / "bundles"
#: the call cache every row's model replies go through (re-running a finished row costs no call)
DEFAULT_CACHE = "~/.cache/kgreason/validation"
#: the README's figure
FIGURE = "docs/figures/heldout_methods.png"
