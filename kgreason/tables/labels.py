"""How a table names its rows and columns in headers and messages."""

from __future__ import annotations

from typing import Sequence


def _header(col, cols) -> str:
    parts = col if isinstance(col, tuple) else (col,)
    return " / ".join(str(p).removeprefix("metric/") for p in parts if str(p) != "")


def _label(rows: Sequence[str], key) -> str:
    """``reasoner=io, ablation=none``: a row by its axes (empty values left out)."""
    key = key if isinstance(key, tuple) else (key,)
    return ", ".join(f"{r}={k}" for r, k in zip(rows, key) if str(k) != "") or "all"
