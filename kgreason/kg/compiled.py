"""Compiled KG cache: parse a source file once, memory-map the arrays afterwards.

``load_cached(loader, path, cache_dir, **kw)`` keys the cache directory by the SHA-256 of the
source file bytes (every file argument, including e.g. a name map passed in ``kw``) plus the
loader's qualified name and its other arguments. A hit loads with ``KG.load(mmap=True)``; a miss
calls the loader, writes ``KG.save`` into a temporary directory and renames it into place (so a
crashed compile never leaves a half-written cache). Editing the source file changes the key,
which invalidates the cache. A compile runs under a lock per key (``<key>.lock``): a second run
waits for it and loads what it wrote; a compile stopped by ``kill -9`` leaves
``<key>.tmp.<pid>/``, removed by the next compile; a full disk is a one-line
:class:`~kgreason.storage.embedstore.StoreNoSpace` naming the cache dir and the bytes needed.

Hydra use (``conf/kg/metaqa.yaml``)::

    _target_: kgreason.kg.compiled.load_cached
    loader: kgreason.kg.loaders.load_metaqa_kb
    path: ${oc.env:KGREASON_DATA,../shared/data}/metaqa/kb.txt
    cache_dir: ${oc.env:KGREASON_CACHE_DIR,.cache/kgreason}/kg
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable

from kgreason import progress
from kgreason.storage.embedstore import clean_stale_tmp, no_space_error, out_of_space, store_lock
from kgreason.kg.loaders import MAX_NAME_CHARS, name_limit
from kgreason.kg.store import KG
from kgreason.textio import note_file

CACHE_VERSION = 1


def _resolve(loader: Callable[..., KG] | str) -> Callable[..., KG]:
    if callable(loader):
        return loader
    mod, _, attr = str(loader).rpartition(".")
    if not mod:
        raise ValueError(f"loader must be a callable or a dotted path 'pkg.module.func', got {loader!r}")
    return getattr(importlib.import_module(mod), attr)


def _plain(v: Any) -> Any:
    """OmegaConf ListConfig/DictConfig (Hydra without ``_convert_``) → list/dict."""
    if isinstance(v, (str, Path, bytes)) or v is None:
        return v
    if hasattr(v, "items") and hasattr(v, "keys"):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, tuple) or hasattr(v, "__iter__"):
        return [_plain(x) for x in v]
    return v


def _hash_file(h: "hashlib._Hash", p: Path) -> None:
    size = p.stat().st_size
    h.update(str(size).encode())
    own = hashlib.sha256()  # the file's own hash, for the run record (kgreason.textio.files_read)
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
            own.update(chunk)
    note_file(p, own.hexdigest(), size)


def _hash_value(h: "hashlib._Hash", v: Any) -> Any:
    """Hash file contents for path-like values; return a JSON-able description of ``v``."""
    if isinstance(v, (list, tuple)):
        return [_hash_value(h, x) for x in v]
    if isinstance(v, Path) or (isinstance(v, str) and os.path.isfile(v)):
        p = Path(v)
        if p.is_file():
            _hash_file(h, p)
            return {"file": p.name}
    return v if isinstance(v, (str, int, float, bool, type(None))) else repr(v)


def cache_key(loader: Callable[..., KG] | str, path: Any, max_name_chars: int | None = None, **kw: Any) -> str:
    """SHA-256 over source bytes + loader name + arguments (paths contribute their bytes, not
    their location, so moving the data does not invalidate the cache) + the name limit."""
    fn = _resolve(loader)
    h = hashlib.sha256()
    desc = {"v": CACHE_VERSION, "loader": f"{fn.__module__}.{fn.__qualname__}",
            "path": _hash_value(h, path), "kw": {k: _hash_value(h, kw[k]) for k in sorted(kw)}}
    if max_name_chars is not None and int(max_name_chars) != MAX_NAME_CHARS:  # the default keeps old keys
        desc["max_name_chars"] = int(max_name_chars)
    h.update(json.dumps(desc, sort_keys=True, default=str).encode())
    return h.hexdigest()


def load_cached(loader: Callable[..., KG] | str, path: Any, cache_dir: str | Path,
                max_name_chars: int | None = None, **kw: Any) -> KG:
    """Load ``loader(path, **kw)`` through the compiled cache (see module docstring).

    Args:
        loader: a loader function or its dotted path (``kgreason.kg.loaders.load_metaqa_kb``).
        path: the loader's first argument (file or list of files); missing files raise the
            loader's own error.
        cache_dir: parent directory of the compiled copies (one subdirectory per key).
        max_name_chars: the longest name the loader accepts (``kg.max_name_chars``; ``None``:
            :data:`kgreason.kg.loaders.MAX_NAME_CHARS`); part of the key.
        **kw: the loader's other arguments (part of the key).

    Returns:
        The KG; arrays are read-only memory maps when loaded from the cache.
    """
    fn = _resolve(loader)
    path = _plain(path)
    kw = {k: _plain(v) for k, v in kw.items()}
    with name_limit(max_name_chars):
        return _load_cached(fn, path, cache_dir, max_name_chars, kw)


def _load_cached(fn: Callable[..., KG], path: Any, cache_dir: str | Path, max_name_chars: int | None,
                 kw: dict[str, Any]) -> KG:
    for p in (path if isinstance(path, list) else [path]):
        if not Path(p).is_file():
            return fn(path, **kw)  # let the loader raise its KGFormatError
    key = cache_key(fn, path, max_name_chars, **kw)
    root = Path(cache_dir)
    target = root / f"{fn.__name__}-{key[:24]}"
    if (target / "vocab.json").exists():
        return KG.load(target, mmap=True)
    root.mkdir(parents=True, exist_ok=True)
    with store_lock(root / f"{target.name}.lock", f"compiled KG {target}"):  # one compile per machine
        if (target / "vocab.json").exists():  # compiled by the run this one waited for
            return KG.load(target, mmap=True)
        clean_stale_tmp(root, held=target.name)  # compiles stopped by kill -9 or a signal
        with progress.stage(f"compiling KG ({fn.__name__}) into {target}"):
            kg = fn(path, **kw)
        tmp = root / f"{target.name}.tmp.{os.getpid()}"
        try:
            kg.save(tmp)
            if target.exists():
                shutil.rmtree(target)  # an incomplete copy (no vocab.json)
            tmp.rename(target)
        except OSError as e:
            if out_of_space(e):
                arrays = sum(int(getattr(kg, k).nbytes) for k in ("heads", "rels", "tails", "entity_types"))
                raise no_space_error(root, arrays, f"compiled KG {target.name}", e, at_least=True) from None
            raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return KG.load(target, mmap=True)


__all__ = ["load_cached", "cache_key"]
