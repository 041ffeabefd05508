"""A small tmpfs for tests of what a full disk does (root only; the test is skipped where
mounting is not permitted)."""

from __future__ import annotations

import os
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest


@contextmanager
def small_tmpfs(d: Path, size: str = "1m", free: int | None = None) -> Iterator[Path]:
    """Mount a ``size`` tmpfs on ``d`` (created), filled to leave ``free`` bytes when given;
    unmounted afterwards."""
    d.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)], capture_output=True,
                       text=True)
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        if free is not None:
            st = os.statvfs(d)
            (d / "filler").write_bytes(b"x" * max(0, st.f_bavail * st.f_frsize - free))
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], capture_output=True)
