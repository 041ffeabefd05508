"""Run bundles: one self-checking archive of what a table needs (issue #58).

A bundle is a gzip-compressed tar (``.tar.gz``; never pickles) holding::

    manifest.json                   format, kgreason version and git commit, creation time, the
                                    SHA-256 of every other entry, and per run: its data files'
                                    and embedding stores' fingerprints (from run.json)
    runs/<run>/run.json             the resolved config record (secrets redacted)
    runs/<run>/config.yaml          the run's config (secrets redacted)
    runs/<run>/predictions.jsonl    every answer with its trace
    runs/<run>/metrics.json
    runs/<run>/prepare_usage.json   when the run had a set-up stage
    runs/<run>/calls.jsonl          the call-cache keys the run served or stored
    calls/llm_calls.jsonl           every one of those cache entries (request key → reply), in the
                                    call store's shard format (kgreason/storage/callstore.py)

``<run>`` is the run dir's path relative to the dir given to ``export`` (a sweep's ``0``, ``1``,
...; the dir's own name for a single run). The data itself is not in a bundle: ``kgreason data``
fetches it, and the manifest says which files and digests a replay needs.

:func:`export` writes one; :func:`open_bundle` unpacks one into a directory after checking every
entry against the manifest (:class:`BundleError` naming the first entry that differs: a bundle
edited after export is refused). Re-scoring and replaying are in :mod:`kgreason.storage.replay`.

Ground floor: imports nothing from kgreason above :mod:`kgreason.storage.callstore`,
:mod:`kgreason.secrets` and :mod:`kgreason.record`.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Iterable, Iterator

import yaml

from kgreason.secrets import REDACTED, SECRET_KEY, scrub
from kgreason.storage.callstore import LLM_LEGACY, LLM_STORE, KeyValueStore, decode_line, encode_record

FORMAT = "kgreason-bundle/1"
MANIFEST = "manifest.json"
CALLS = "calls/llm_calls.jsonl"
RUN_FILES = ("run.json", "config.yaml", "predictions.jsonl", "metrics.json", "prepare_usage.json", "calls.jsonl")
REQUIRED = ("run.json", "config.yaml", "predictions.jsonl", "metrics.json")
SUFFIXES = (".tar.gz", ".tgz")


class BundleError(ValueError):
    """A bundle (or a run to bundle) that cannot be used; the message names the file or entry."""


def is_bundle(path: str | Path) -> bool:
    p = Path(path)
    return p.is_file() and p.name.endswith(SUFFIXES)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def run_dirs(root: Path) -> list[Path]:
    """Every run dir under ``root`` (``root`` itself for a single run): dirs holding a run.json."""
    if (root / "run.json").is_file():
        return [root]
    return sorted((p.parent for p in root.rglob("run.json")), key=lambda p: [
        (0, int(x), "") if x.isdigit() else (1, 0, x) for x in p.relative_to(root).parts])


def _redact(obj: Any) -> Any:
    """``obj`` with every secret-looking key's value and every known secret value redacted, and
    ``key=value`` overrides of secret-looking keys redacted."""
    if isinstance(obj, dict):
        return {k: (REDACTED if SECRET_KEY.search(str(k)) and v not in (None, "", REDACTED)
                    and not str(k).endswith("_env") else _redact(v)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_redact(v) for v in obj]
    if isinstance(obj, str):
        k, eq, _v = obj.partition("=")
        if eq and SECRET_KEY.search(k.lstrip("+~").rsplit(".", 1)[-1]) and not k.endswith("_env"):
            return f"{k}={REDACTED}"
        return scrub(obj)
    return obj


#: how a bundle spells the data root (paths under it are written relative to it, so a bundle names
#: no path of the machine that made it and replays wherever ``KGREASON_DATA`` points)
DATA_ROOT = "$KGREASON_DATA"


def _roots() -> list[tuple[str, str]]:
    """(absolute prefix, portable spelling), longest first: the data root, the clone, the home dir."""
    from kgreason.paths import ENV, default, repo_root

    found: list[tuple[str, str]] = []
    data = os.environ.get(ENV["data"]) or default("data")
    for form in {os.path.abspath(os.path.expanduser(data)), os.path.realpath(os.path.expanduser(data))}:
        found.append((form.rstrip("/"), DATA_ROOT))
    root = repo_root()
    if root is not None:
        for form in {str(root), os.path.realpath(root)}:
            found.append((form.rstrip("/"), "."))
    home = os.path.expanduser("~")
    if home not in ("", "/"):
        found.append((home.rstrip("/"), "~"))
    return sorted(found, key=lambda x: -len(x[0]))


def portable(obj: Any, roots: list[tuple[str, str]] | None = None) -> Any:
    """``obj`` with every absolute path under the data root, the clone or the home dir rewritten as
    ``$KGREASON_DATA/…``, ``./…`` or ``~/…`` (strings, dict keys and values, lists)."""
    roots = _roots() if roots is None else roots
    if isinstance(obj, dict):
        return {portable(k, roots): portable(v, roots) for k, v in obj.items()}
    if isinstance(obj, list):
        return [portable(v, roots) for v in obj]
    if isinstance(obj, str) and "/" in obj:
        for prefix, spelled in roots:
            if prefix and prefix in obj:
                obj = obj.replace(prefix + "/", spelled + "/").replace(prefix, spelled)
        return obj
    return obj


def local_path(path: str) -> Path:
    """A path a bundle spells portably (:func:`portable`) on this machine."""
    from kgreason.paths import ENV, default

    if path == DATA_ROOT or path.startswith(DATA_ROOT + "/"):
        root = os.environ.get(ENV["data"]) or default("data")
        return Path(os.path.expanduser(root)) / path[len(DATA_ROOT):].lstrip("/")
    return Path(os.path.expanduser(path))


def _run_entry(run: Path, rel: str) -> tuple[dict[str, bytes], dict[str, Any], list[str]]:
    files: dict[str, bytes] = {}
    for name in RUN_FILES:
        p = run / name
        if not p.is_file():
            if name in REQUIRED:
                raise BundleError(f"{p}: missing; a run dir to bundle needs {', '.join(REQUIRED)} "
                                  "(is the run finished?)")
            continue
        data = p.read_bytes()
        if name == "run.json":
            data = (json.dumps(portable(_redact(json.loads(data))), indent=2, sort_keys=True) + "\n").encode("utf-8")
        elif name == "config.yaml":
            data = yaml.safe_dump(portable(_redact(yaml.safe_load(data))), sort_keys=False,
                                  allow_unicode=True).encode("utf-8")
        files[f"runs/{rel}/{name}"] = data
    record = json.loads(files[f"runs/{rel}/run.json"])
    info = {"dir": rel, "data_files": record.get("data_files") or {}, "overrides": record.get("overrides") or [],
            "fingerprint": record.get("fingerprint"), "git": record.get("git")}
    keys: list[str] = []
    if f"runs/{rel}/calls.jsonl" in files:
        seen: dict[str, None] = {}
        for line in files[f"runs/{rel}/calls.jsonl"].decode("utf-8", "replace").splitlines():
            try:
                seen[json.loads(line)["key"]] = None
            except (ValueError, KeyError, TypeError):
                continue
        keys = list(seen)
    return files, info, keys


def requests(metrics: dict[str, Any]) -> int:
    """The model requests a run made or replayed (``llm/calls`` + ``llm/cache_hits``)."""
    n = 0
    for k in ("llm/calls", "llm/cache_hits"):
        v = metrics.get(k)
        n += int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else 0
    return n


def _cache_dir_of(run: Path) -> Path | None:
    try:
        cfg = json.loads((run / "run.json").read_text(encoding="utf-8")).get("config") or {}
    except (OSError, ValueError):
        return None
    d = (cfg.get("llm_cache") or {}).get("dir")
    return Path(os.path.expanduser(str(d))) if d and "${" not in str(d) else None


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("kgreason")
    except Exception:  # noqa: BLE001
        return "unknown"


def export(dirs: Iterable[str | Path], out: str | Path, cache_dir: str | Path | None = None) -> dict[str, Any]:
    """Write the bundle ``out`` of every run under ``dirs``; returns the manifest.

    Each run's cache entries are read from ``cache_dir`` (an ``llm_cache.dir``) or, by default,
    from the ``llm_cache.dir`` its run.json names. A key the run used that the cache no longer
    holds is an error naming the run and the key (the bundle could not be replayed)."""
    out = Path(out)
    if not out.name.endswith(SUFFIXES):
        raise BundleError(f"{out}: a bundle's name ends with .tar.gz")
    entries: dict[str, bytes] = {}
    runs: list[dict[str, Any]] = []
    records: dict[str, bytes] = {}
    dirs = [Path(d) for d in dirs]
    for d in dirs:
        if not d.is_dir():
            raise BundleError(f"{d}: not a directory (give run dirs or sweep dirs)")
        found = run_dirs(d)
        if not found:
            raise BundleError(f"{d}: no run dir under it (no run.json)")
        for run in found:
            rel = run.relative_to(d).as_posix()
            rel = d.name if rel == "." else (f"{d.name}/{rel}" if len(dirs) > 1 else rel)
            if any(r["dir"] == rel for r in runs):
                raise BundleError(f"{run}: a second run named {rel} in the bundle; give dirs with distinct names")
            files, info, keys = _run_entry(run, rel)
            asked = requests(json.loads(files[f"runs/{rel}/metrics.json"]))
            if asked and not keys:
                raise BundleError(f"{run}: made {asked} model requests but no cache key of them is listed (no "
                                  "calls.jsonl: run with llm_cache.mode=off, or by a kgreason before bundles); its "
                                  "replies were never kept, so a bundle of it could not be replayed: run it again "
                                  "with the call cache on")
            entries.update(files)
            cdir = Path(cache_dir).expanduser() if cache_dir is not None else _cache_dir_of(run)
            if keys:
                if cdir is None:
                    raise BundleError(f"{run}: its run.json names no llm_cache.dir; give --cache DIR")
                store = KeyValueStore(cdir / LLM_STORE, "readonly", legacy=cdir / LLM_LEGACY) \
                    if (cdir / LLM_STORE).is_dir() or (cdir / LLM_LEGACY).is_file() else None
                for k in keys:
                    if k in records:
                        continue
                    rec = store.record(k) if store is not None else None
                    if rec is None:
                        raise BundleError(f"{run}: cache entry {k} (listed in calls.jsonl) is not in {cdir}; "
                                          "the bundle could not be replayed (give --cache DIR with that cache)")
                    records[k] = encode_record(k, rec["value"], backend=rec.get("backend", ""),
                                               model=rec.get("model", ""), method=rec.get("method", ""),
                                               t=float(rec.get("t") or 0.0))
                if store is not None:
                    store.close()
            info["calls"] = len(keys)
            runs.append(info)
    entries[CALLS] = b"".join(records[k] for k in sorted(records))
    manifest = {"format": FORMAT, "kgreason_version": _version(), "git": _git(), "created": time.strftime(
        "%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "runs": runs, "entries": {n: sha256(b) for n, b in sorted(entries.items())},
        "needs": _needs(runs)}
    entries[MANIFEST] = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode("utf-8")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    with tarfile.open(tmp, "w:gz", compresslevel=9) as tar:
        for name in [MANIFEST, *sorted(n for n in entries if n != MANIFEST)]:
            ti = tarfile.TarInfo(name)
            ti.size, ti.mtime, ti.mode = len(entries[name]), 0, 0o644
            tar.addfile(ti, io.BytesIO(entries[name]))
    os.replace(tmp, out)
    return manifest


def _git() -> dict[str, Any]:
    from kgreason.record import git_state

    try:
        return dict(git_state())
    except Exception:  # noqa: BLE001
        return {}


def _needs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Every data file and embedding store the runs read, with its fingerprint (what a replay needs)."""
    out: dict[str, Any] = {}
    for r in runs:
        for path, fp in (r.get("data_files") or {}).items():
            out.setdefault(path, fp)
    return out


@dataclass
class Opened:
    """An unpacked, checked bundle: ``root`` holds ``runs/`` and ``calls/``."""

    path: Path
    root: Path
    manifest: dict[str, Any]

    def run_dir(self, rel: str) -> Path:
        return self.root / "runs" / rel

    @property
    def runs(self) -> list[str]:
        return [r["dir"] for r in self.manifest["runs"]]


def open_bundle(path: str | Path, into: str | Path | None = None) -> Opened:
    """Unpack ``path`` into ``into`` (default: a new temporary dir) and check every entry against
    the manifest; :class:`BundleError` names the first entry that is edited, missing or extra."""
    path = Path(path)
    if not path.is_file():
        raise BundleError(f"{path}: no such bundle file")
    root = Path(into) if into is not None else Path(tempfile.mkdtemp(prefix="kgreason-bundle-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        tar = tarfile.open(path, "r:*")
    except (tarfile.TarError, OSError) as e:
        raise BundleError(f"{path}: not a bundle (a .tar.gz written by kgreason bundle export): {e}") from None
    with tar:
        blobs: dict[str, bytes] = {}
        for m in tar:
            name = PurePosixPath(m.name)
            if not m.isfile() or name.is_absolute() or ".." in name.parts:
                raise BundleError(f"{path}: entry {m.name}: not a plain file inside the bundle; refused")
            f = tar.extractfile(m)
            blobs[m.name] = f.read() if f is not None else b""
    if MANIFEST not in blobs:
        raise BundleError(f"{path}: no {MANIFEST}; not a bundle written by kgreason bundle export")
    try:
        manifest = json.loads(blobs.pop(MANIFEST))
    except ValueError as e:
        raise BundleError(f"{path}: entry {MANIFEST} is not valid JSON ({e})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BundleError(f"{path}: entry {MANIFEST}: format {manifest.get('format') if isinstance(manifest, dict) else None!r}, "
                          f"expected {FORMAT!r}")
    want = manifest.get("entries") or {}
    for name in sorted(set(want) | set(blobs)):
        if name not in blobs:
            raise BundleError(f"{path}: entry {name} is listed in the manifest but missing; refused")
        if name not in want:
            raise BundleError(f"{path}: entry {name} is not in the manifest (added after export); refused")
        if sha256(blobs[name]) != want[name]:
            raise BundleError(f"{path}: entry {name} does not match its SHA-256 in the manifest "
                              "(edited after export); refused")
    for name, data in blobs.items():
        dest = root / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
    (root / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return Opened(path=path, root=root, manifest=manifest)


@contextlib.contextmanager
def readable(path: str | Path) -> Iterator[tuple[Path, Path | None]]:
    """``(dir to read runs from, default output dir)`` for a run dir, a sweep dir or a bundle:
    a bundle is checked and unpacked into a temporary dir (removed afterwards) and its default
    output dir is ``<bundle without .tar.gz>_tables`` beside it; a dir is itself (None)."""
    p = Path(path)
    if not is_bundle(p):
        yield p, None
        return
    tmp = Path(tempfile.mkdtemp(prefix="kgreason-bundle-"))
    try:
        opened = open_bundle(p, tmp)
        stem = next(p.name[:-len(s)] for s in SUFFIXES if p.name.endswith(s))
        yield opened.root / "runs", p.parent / f"{stem}_tables"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def cache_records(opened: Opened) -> dict[str, dict[str, Any]]:
    """The bundle's cache entries by key; a line that does not check out names itself."""
    out: dict[str, dict[str, Any]] = {}
    p = opened.root / CALLS
    for i, line in enumerate(p.read_bytes().splitlines(keepends=True), 1):
        rec = decode_line(line)
        if rec is None:
            raise BundleError(f"{opened.path}: entry {CALLS} line {i}: a cache entry that fails its checksum; refused")
        out[rec["key"]] = rec
    return out


__all__ = ["BundleError", "export", "open_bundle", "readable", "cache_records", "is_bundle", "run_dirs", "Opened", "FORMAT"]
