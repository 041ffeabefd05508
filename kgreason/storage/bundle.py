"""Run bundles: one self-checking archive of what a table needs (issue #58).

A bundle is a gzip-compressed tar (``.tar.gz``; never pickles) holding::

    manifest.json                   the first entry: format, kgreason version and git commit,
                                    creation time, the SHA-256 and size of every other entry, the
                                    replies redacted, and per run: its dir, its data files'
                                    fingerprints (from run.json) and the stores a replay builds or
                                    finds (``stores``: KG embedding stores with their keys, the
                                    graph database; from timing.json, :func:`run_stores`)
    runs/<run>/run.json             the resolved config record (secrets scrubbed)
    runs/<run>/config.yaml          the run's config (secrets scrubbed)
    runs/<run>/predictions.jsonl    every answer with its trace
    runs/<run>/metrics.json
    runs/<run>/prepare_usage.json   when the run had a set-up stage
    runs/<run>/calls.jsonl          the call-cache keys the run served or stored
    calls/llm_calls.jsonl           every one of those cache entries (request key → reply), in the
                                    call store's shard format (kgreason/storage/callstore.py)

``<run>`` is the run dir's path relative to the dir given to ``export`` (a sweep's ``0``, ``1``,
...; the dir's own name for a single run). The data itself is not in a bundle: ``kgreason data``
fetches it, and the manifest says which files and digests a replay needs.

:func:`export` writes one, scrubbed of every secret its runs know (:func:`run_secrets`,
:func:`clean`: secret keys' values, the variables ``*_env`` keys name, URL credentials; a reply
quoting one is published redacted and counted). :func:`open_bundle` unpacks one into a new
directory as it checks it (issue 73: a bundle from a stranger is data, never a path): the
manifest first (:func:`check_manifest`: its shape, every entry name and run dir a relative path
inside the bundle), then only the entries it lists, each within its listed size and the ceilings
(:func:`ceilings`), streamed through SHA-256 by our own tar reader (:class:`_TarStream`: no
header is read whole before its size is checked, and only plain files are taken).
:class:`BundleError` names the first entry that is edited, missing, extra, too big or misplaced,
and what was unpacked is removed. Re-scoring and replaying are in :mod:`kgreason.runner.replay`.

Ground floor: imports nothing from kgreason above :mod:`kgreason.storage.callstore`,
:mod:`kgreason.secrets` and :mod:`kgreason.record`.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

import yaml

from kgreason.secrets import REDACTED, SECRET_KEY, config_secrets, scrub, scrub_with
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


#: directories a run's resolved config may hold because the environment named them; a bundle spells
#: them as the variable (a replay recomposes its config from the run's overrides, so this is a record)
DIR_VARIABLES = ("KGREASON_EMBED_STORE_DIR", "KGREASON_CACHE_DIR", "KGREASON_MODEL_DIR", "KGREASON_OUTPUT")


def _roots() -> list[tuple[str, str]]:
    """(absolute prefix, portable spelling), longest first: the data root, the directories the
    ``KGREASON_*_DIR`` variables name, the clone, the home dir."""
    from kgreason.paths import ENV, default, repo_root

    found: list[tuple[str, str]] = []
    data = os.environ.get(ENV["data"]) or default("data")
    for form in {os.path.abspath(os.path.expanduser(data)), os.path.realpath(os.path.expanduser(data))}:
        found.append((form.rstrip("/"), DATA_ROOT))
    for var in DIR_VARIABLES:
        value = os.environ.get(var)
        if value and value.strip("/"):
            for form in {os.path.abspath(os.path.expanduser(value)), os.path.realpath(os.path.expanduser(value))}:
                found.append((form.rstrip("/"), "$" + var))
    root = repo_root()
    if root is not None:
        for form in {str(root), os.path.realpath(root)}:
            found.append((form.rstrip("/"), "."))
    home = os.path.expanduser("~")
    if home not in ("", "/"):
        found.append((home.rstrip("/"), "~"))
    return sorted(found, key=lambda x: -len(x[0]))


_ENV_REF = re.compile(r"^\$\{oc\.env:(%s)(?:,([^}]*))?\}(.*)$" % "|".join(DIR_VARIABLES))


def run_roots(run: Path) -> list[tuple[str, str]]:
    """:func:`_roots` plus the directories ``run`` read from a ``KGREASON_*_DIR`` variable, found by
    setting its unresolved config (``config.yaml``: ``${oc.env:KGREASON_EMBED_STORE_DIR,null}``)
    beside its resolved one (run.json's ``config``): so a bundle exported from a shell where the
    variable is unset (or set elsewhere) still spells it, not the path of the machine that ran."""
    found = list(_roots())
    try:
        raw = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8"))
        resolved = json.loads((run / "run.json").read_text(encoding="utf-8")).get("config")
    except (OSError, ValueError, yaml.YAMLError):
        return found

    def walk(a: Any, b: Any) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            for k, v in a.items():
                if k in b:
                    walk(v, b[k])
        elif isinstance(a, list) and isinstance(b, list):
            for x, y in zip(a, b):
                walk(x, y)
        elif isinstance(a, str) and isinstance(b, str) and b.startswith("/"):
            m = _ENV_REF.match(a.strip())
            if not m or "${" in m.group(3) or not b.endswith(m.group(3)):
                return
            prefix = b[: len(b) - len(m.group(3))].rstrip("/")
            default = (m.group(2) or "").strip()
            if prefix.strip("/") and prefix != default.rstrip("/"):  # equal to a literal default: not from the variable
                found.append((prefix, "$" + m.group(1)))

    walk(raw, resolved)
    return sorted(set(found), key=lambda x: -len(x[0]))


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


def run_secrets(run: Path) -> set[str]:
    """The secret values a run knows, read from its run.json and config.yaml
    (:func:`kgreason.secrets.config_secrets`: secret keys' values, the environment variables its
    ``*_env`` keys name when they are set here, the passwords of URLs with credentials)."""
    found: set[str] = set()
    for name, load in (("run.json", json.loads), ("config.yaml", yaml.safe_load)):
        try:
            found |= config_secrets(load((run / name).read_text(encoding="utf-8")))
        except (OSError, ValueError, yaml.YAMLError):
            continue
    return found


def clean(obj: Any, values: Iterable[str]) -> Any:
    """``obj`` (JSON-like) with every string, keys included, scrubbed of ``values``, of what this
    process registered as secret, and of URL credentials."""
    if isinstance(obj, dict):
        return {clean(k, values): clean(v, values) for k, v in obj.items()}
    if isinstance(obj, list):
        return [clean(v, values) for v in obj]
    if isinstance(obj, str):
        return scrub_with(scrub(obj), values)[0]
    return obj


def _clean_lines(data: bytes, values: Iterable[str]) -> bytes:
    """A JSONL file with every line that held a secret re-written scrubbed (the others as they were)."""
    out = []
    for line in data.splitlines(keepends=True):
        try:
            obj = json.loads(line)
        except ValueError:
            text, changed = scrub_with(scrub(line.decode("utf-8", "replace")), values)
            out.append(text.encode("utf-8", "replace") if changed else line)
            continue
        new = clean(obj, values)
        out.append(line if new == obj else (json.dumps(new) + "\n").encode("ascii"))
    return b"".join(out)


def _run_entry(run: Path, rel: str, values: Iterable[str] = ()) -> tuple[dict[str, bytes], dict[str, Any], list[str]]:
    files: dict[str, bytes] = {}
    roots = run_roots(run)
    for name in RUN_FILES:
        p = run / name
        if not p.is_file():
            if name in REQUIRED:
                raise BundleError(f"{p}: missing; a run dir to bundle needs {', '.join(REQUIRED)} "
                                  "(is the run finished?)")
            continue
        data = p.read_bytes()
        if name == "run.json":
            data = (json.dumps(portable(clean(_redact(json.loads(data)), values), roots), indent=2,
                               sort_keys=True) + "\n").encode("utf-8")
        elif name == "config.yaml":
            data = yaml.safe_dump(portable(clean(_redact(yaml.safe_load(data)), values), roots), sort_keys=False,
                                  allow_unicode=True).encode("utf-8")
        elif name.endswith(".jsonl"):
            data = _clean_lines(data, values)
        else:
            obj = json.loads(data)
            new = clean(obj, values)
            data = data if new == obj else (json.dumps(new, indent=2) + "\n").encode("utf-8")
        files[f"runs/{rel}/{name}"] = data
    record = json.loads(files[f"runs/{rel}/run.json"])
    info = {"dir": rel, "data_files": record.get("data_files") or {}, "overrides": record.get("overrides") or [],
            "fingerprint": record.get("fingerprint"), "git": record.get("git"), "stores": run_stores(run)}
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


def run_stores(run: Path) -> list[dict[str, Any]]:
    """The stores a replay of ``run`` builds or finds, from its timing.json (issue 71): each KG
    embedding store it read (its form, rows, dtype, build arithmetic and key: the fingerprint of
    the KG's texts, the model and the dtype; and how long its build took where the run built it)
    and the graph database it opened (the engine and the KG exported)."""
    try:
        timing = json.loads((run / "timing.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    out: list[dict[str, Any]] = []
    builds = {b.get("key"): b.get("build_s") for b in (timing.get("embedding") or {}).get("prepare_builds") or []
              if isinstance(b, dict)}
    for st in (timing.get("embedding") or {}).get("stores") or []:
        if isinstance(st, dict):
            rec = {"what": "embedding store", **{k: st.get(k) for k in ("form", "rows", "dim", "dtype",
                                                                        "build_precision", "key")}}
            if builds.get(st.get("key")):
                rec["build_s"] = builds[st.get("key")]
            out.append(rec)
    g = timing.get("graphdb")
    if isinstance(g, dict) and g.get("engine"):
        out.append({"what": "graph database", "engine": g.get("engine"), "kg": g.get("kg")})
    return out


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
    redacted = 0
    dirs = [Path(d) for d in dirs]
    found_runs: list[tuple[Path, Path]] = []
    for d in dirs:
        if not d.is_dir():
            raise BundleError(f"{d}: not a directory (give run dirs or sweep dirs)")
        found = run_dirs(d)
        if not found:
            raise BundleError(f"{d}: no run dir under it (no run.json)")
        found_runs += [(d, run) for run in found]
    # every secret any run of the bundle knows is scrubbed from every member (one publication)
    values = sorted(set().union(*(run_secrets(run) for _d, run in found_runs)), key=len, reverse=True)
    for d, run in found_runs:
        rel = run.relative_to(d).as_posix()
        rel = clean(d.name if rel == "." else (f"{d.name}/{rel}" if len(dirs) > 1 else rel), values)
        if any(r["dir"] == rel for r in runs):
            raise BundleError(f"{run}: a second run named {rel} in the bundle; give dirs with distinct names")
        files, info, keys = _run_entry(run, rel, values)
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
                value = clean(rec["value"], values)  # a reply that quotes a secret is published redacted
                redacted += value != rec["value"]
                records[k] = encode_record(k, value, backend=clean(str(rec.get("backend", "")), values),
                                           model=clean(str(rec.get("model", "")), values),
                                           method=rec.get("method", ""), t=float(rec.get("t") or 0.0))
            if store is not None:
                store.close()
        info["calls"] = len(keys)
        runs.append(info)
    entries[CALLS] = b"".join(records[k] for k in sorted(records))
    manifest = {"format": FORMAT, "kgreason_version": _version(), "git": _git(), "created": time.strftime(
        "%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "runs": runs, "entries": {n: sha256(b) for n, b in sorted(entries.items())},
        "sizes": {n: len(b) for n, b in sorted(entries.items())}, "needs": _needs(runs), "stores": _stores(runs),
        "redacted_replies": redacted}
    manifest = clean(manifest, values)
    entries[MANIFEST] = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode("utf-8")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        with tarfile.open(tmp, "w:gz", compresslevel=9) as tar:
            for name in [MANIFEST, *sorted(n for n in entries if n != MANIFEST)]:
                ti = tarfile.TarInfo(name)
                ti.size, ti.mtime, ti.mode = len(entries[name]), 0, 0o644
                tar.addfile(ti, io.BytesIO(entries[name]))
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return manifest


def _git() -> dict[str, Any]:
    from kgreason.record import git_state

    try:
        return dict(git_state())
    except Exception:  # noqa: BLE001
        return {}


def _needs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Every data file the runs read, with its fingerprint (what a replay needs to be given)."""
    out: dict[str, Any] = {}
    for r in runs:
        for path, fp in (r.get("data_files") or {}).items():
            out.setdefault(path, fp)
    return out


def _stores(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every store the runs read, once (what a replay builds or finds: :func:`run_stores`)."""
    seen: dict[str, dict[str, Any]] = {}
    for r in runs:
        for st in r.get("stores") or []:
            seen.setdefault(json.dumps({k: v for k, v in st.items() if k != "build_s"}, sort_keys=True), st)
    return list(seen.values())


@dataclass
class Opened:
    """An unpacked, checked bundle: ``root`` holds ``runs/`` and ``calls/``."""

    path: Path
    root: Path
    manifest: dict[str, Any]

    def run_dir(self, rel: str) -> Path:
        d = self.root / "runs" / rel
        # rel was checked when the bundle was opened (check_manifest); a second look costs nothing
        if self.root.resolve() not in d.resolve().parents:
            raise BundleError(f"{self.path}: run dir {rel!r} is not a path inside the bundle; refused")
        return d

    @property
    def runs(self) -> list[str]:
        return [r["dir"] for r in self.manifest["runs"]]


# ----------------------------------------------------------------------------- reading a bundle
#: what one bundle may unpack to, whatever its manifest says: per entry and in all (bytes);
#: ``KGREASON_BUNDLE_MAX_MB`` sets the per-entry ceiling (the total is four times it)
MAX_ENTRY_BYTES = 1 << 30
ENV_MAX_MB = "KGREASON_BUNDLE_MAX_MB"
MAX_MANIFEST_BYTES = 64 << 20
MAX_HEADER_BYTES = 1 << 16  # the data of a pax or GNU long-name header (a path, a size)
MAX_NAME_BYTES = 1024
NAME_MAX = 255  # one path component (the file systems' NAME_MAX)
_CHUNK = 1 << 20


def ceilings() -> tuple[int, int]:
    """(the most bytes one entry may hold, the most all entries may hold together)."""
    v = os.environ.get(ENV_MAX_MB)
    try:
        per = int(float(v) * 1_000_000) if v else MAX_ENTRY_BYTES
    except ValueError:
        raise BundleError(f"{ENV_MAX_MB}={v!r}: expected a number of megabytes") from None
    return per, 4 * per


def name_problem(name: Any) -> str | None:
    """Why ``name`` is not a relative path inside a bundle (``a/b/c``: no absolute path, no ``..``,
    ``.`` or empty part, no control character, every part a file name the file system takes), or None."""
    if not isinstance(name, str) or not name:
        return "not a non-empty string"
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        return "an absolute path"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        return "it holds a control character"
    try:
        total = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return "it is not valid text"
    if total > MAX_NAME_BYTES:
        return f"it is {total:,} bytes long, too long for a path (at most {MAX_NAME_BYTES:,})"
    for part in name.split("/"):
        if part in ("", ".", ".."):
            return "it holds a '..', '.' or empty part"
        if len(part.encode("utf-8")) > NAME_MAX:
            return (f"its part {part[:24]}… is {len(part.encode('utf-8')):,} bytes long, too long for a file name "
                    f"(at most {NAME_MAX})")
    return None


def check_manifest(manifest: Any, path: Path) -> tuple[dict[str, str], dict[str, int]]:
    """(entry name → SHA-256, entry name → size when the manifest gives it) of a manifest whose
    shape, entry names and run dirs are checked; :class:`BundleError` names the first problem."""
    def bad(what: str) -> BundleError:
        return BundleError(f"{path}: {MANIFEST}: {what}; refused")

    if not isinstance(manifest, dict):
        raise bad(f"a JSON {type(manifest).__name__}, expected an object")
    if manifest.get("format") != FORMAT:
        raise bad(f"format {manifest.get('format')!r}, expected {FORMAT!r}")
    entries, sizes = manifest.get("entries"), manifest.get("sizes", {})
    if not isinstance(entries, dict) or not all(isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v)
                                                for v in entries.values()):
        raise bad("'entries' is not an object of entry name → SHA-256")
    if not isinstance(sizes, dict) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                              for v in sizes.values()):
        raise bad("'sizes' is not an object of entry name → byte count")
    for name in entries:
        if (why := name_problem(name)) is not None or name == MANIFEST:
            raise bad(f"entry {str(name)[:80]!r} is not a path inside the bundle ({why or 'the manifest itself'})")
    folders = {"/".join(n.split("/")[:i]) for n in entries for i in range(1, n.count("/") + 1)}
    for name in sorted(folders & set(entries)):
        raise bad(f"entry {name} is both a file and a folder of other entries")
    if CALLS not in entries:
        raise bad(f"no entry {CALLS} (the cache entries of the runs)")
    runs = manifest.get("runs")
    if not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
        raise bad("'runs' is not a list of objects")
    seen: set[str] = set()
    for i, r in enumerate(runs):
        d = r.get("dir")
        if (why := name_problem(d)) is not None:
            raise bad(f"run dir {d!r} (runs[{i}]) is not a path inside the bundle ({why})")
        if d in seen:
            raise bad(f"run dir {d!r} is listed twice")
        seen.add(d)
        for f in ("run.json", "metrics.json"):
            if f"runs/{d}/{f}" not in entries:
                raise bad(f"run dir {d!r} (runs[{i}]) has no entry runs/{d}/{f}")
        files = r.get("data_files") or {}
        if not isinstance(files, dict) or not all(isinstance(k, str) and ".." not in k.split("/") and
                                                  (v is None or isinstance(v, dict)) for k, v in files.items()):
            raise bad(f"runs[{i}].data_files is not an object of data file → fingerprint")
    return entries, {k: v for k, v in sizes.items() if k in entries}


class _TarStream:
    """The members of a gzip-compressed tar, read as a stream with a ceiling on everything it
    holds in memory: ustar, pax and GNU long-name headers; any member that is not a plain file
    (a link, a folder, a device) is refused. Our own reader, so that no header is read whole
    before its size is checked (a pax header can claim gigabytes)."""

    def __init__(self, raw, path: Path) -> None:
        import gzip

        self.path = path
        self.gz = gzip.GzipFile(fileobj=raw, mode="rb")

    def _fail(self, e: BaseException) -> BundleError:
        return BundleError(f"{self.path}: the archive is truncated or damaged ({e}); refused")

    def read(self, n: int, eof_ok: bool = False) -> bytes | None:
        import zlib

        out = bytearray()
        try:
            while len(out) < n:
                b = self.gz.read(min(n - len(out), _CHUNK))
                if not b:
                    if eof_ok and not out:
                        return None
                    raise EOFError(f"it ends {n - len(out):,} bytes early")
                out += b
        except (OSError, EOFError, zlib.error) as e:
            raise self._fail(e) from None
        return bytes(out)

    def stream(self, size: int) -> Iterator[bytes]:
        """A member's ``size`` bytes in chunks, then its padding to the next 512-byte block."""
        left = size
        while left:
            b = self.read(min(left, _CHUNK))
            assert b is not None
            left -= len(b)
            yield b
        if size % 512:
            self.read(512 - size % 512)

    def _number(self, field: bytes) -> int:
        if field[:1] and field[0] & 0x80:  # GNU base-256 (sizes over 8 GB)
            if field[0] == 0xFF:
                raise BundleError(f"{self.path}: a tar header holds a negative number; refused")
            return int.from_bytes(bytes([field[0] & 0x7F]) + field[1:], "big")
        digits = field.split(b"\0", 1)[0].strip(b" ")
        try:
            return int(digits or b"0", 8)
        except ValueError:
            raise BundleError(f"{self.path}: a tar header is damaged (not a number: {digits[:20]!r}); refused") from None

    def next(self) -> tuple[str, int] | None:
        """(name, size) of the next plain-file member (its data comes next), or None at the end."""
        long_name: bytes | None = None
        pax: dict[bytes, bytes] = {}
        while True:
            block = self.read(512, eof_ok=True)
            if block is None or block == bytes(512):
                return None
            stored = self._number(block[148:156])
            if stored not in (sum(block[:148]) + 256 + sum(block[156:]),
                              sum(b - 256 if b > 127 else b for b in block[:148] + block[156:]) + 256):
                raise BundleError(f"{self.path}: a tar header fails its checksum (damaged, or not a tar archive); "
                                  "refused")
            name = block[:100].split(b"\0", 1)[0]
            if block[257:263] == b"ustar\0" and block[345:500].strip(b"\0"):
                name = block[345:500].split(b"\0", 1)[0] + b"/" + name
            size, kind = self._number(block[124:136]), block[156:157]
            if kind in (b"x", b"g", b"L"):
                if size > MAX_HEADER_BYTES:
                    raise BundleError(f"{self.path}: a tar extension header of {size:,} bytes (at most "
                                      f"{MAX_HEADER_BYTES:,}); refused")
                data = b"".join(self.stream(size))
                if kind == b"L":
                    long_name = data.split(b"\0", 1)[0]
                elif kind == b"x":
                    pax.update(self._pax(data))
                continue
            shown = (pax.get(b"path") or long_name or name).decode("utf-8", "replace")[:120]
            if kind not in (b"0", b"\0", b"7"):
                raise BundleError(f"{self.path}: entry {shown}: not a plain file (tar type {kind!r}); refused")
            raw = pax.get(b"path") or long_name or name
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise BundleError(f"{self.path}: entry {shown}: its name is not UTF-8 text; refused") from None
            if b"size" in pax:
                try:
                    size = int(pax[b"size"])
                except ValueError:
                    raise BundleError(f"{self.path}: entry {shown}: a damaged size in its pax header; refused") from None
            return text, size

    def _pax(self, data: bytes) -> dict[bytes, bytes]:
        out, pos = {}, 0
        while pos < len(data):
            sp = data.find(b" ", pos)
            try:
                n = int(data[pos:sp])
            except ValueError:
                raise BundleError(f"{self.path}: a damaged pax header; refused") from None
            if sp < 0 or n <= 0 or pos + n > len(data) or data[pos + n - 1:pos + n] != b"\n":
                raise BundleError(f"{self.path}: a damaged pax header; refused")
            key, _eq, value = data[sp + 1:pos + n - 1].partition(b"=")
            out[key] = value
            pos += n
        return out


def _unpack(path: Path, root: Path) -> dict[str, Any]:
    """Check ``path`` entry by entry while writing it under ``root`` (the manifest first, then
    only the entries it lists, each within its size and the ceilings, streamed through SHA-256);
    the manifest."""
    per_entry, all_entries = ceilings()
    with open(path, "rb") as raw:
        tar = _TarStream(raw, path)
        first = tar.next()
        if first is None or first[0] != MANIFEST:
            raise BundleError(f"{path}: its first entry is {first[0][:80] if first else 'nothing'!r}, not {MANIFEST}; "
                              "not a bundle written by kgreason bundle export")
        if first[1] > MAX_MANIFEST_BYTES:
            raise BundleError(f"{path}: entry {MANIFEST} holds {first[1]:,} bytes (at most {MAX_MANIFEST_BYTES:,}); refused")
        try:
            manifest = json.loads(b"".join(tar.stream(first[1])))
        except ValueError as e:
            raise BundleError(f"{path}: entry {MANIFEST} is not valid JSON ({e})") from None
        entries, sizes = check_manifest(manifest, path)
        seen: set[str] = set()
        total = 0
        while (member := tar.next()) is not None:
            name, size = member
            if name in seen or name == MANIFEST:
                raise BundleError(f"{path}: entry {name[:120]} appears twice; refused")
            if name not in entries:
                raise BundleError(f"{path}: entry {name[:120]} is not in the manifest (added after export); refused")
            if name in sizes and size != sizes[name]:
                raise BundleError(f"{path}: entry {name} does not match its SHA-256 in the manifest (it holds {size:,} "
                                  f"bytes, the manifest lists {sizes[name]:,}: edited after export); refused")
            total += size
            if size > per_entry or total > all_entries:
                raise BundleError(f"{path}: entry {name} holds {size:,} bytes, past the ceiling of "
                                  f"{per_entry:,} per entry and {all_entries:,} per bundle (set {ENV_MAX_MB} "
                                  "to raise it); refused")
            dest = root / name
            h = hashlib.sha256()
            try:
                dest.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
                with os.fdopen(fd, "wb") as f:
                    for chunk in tar.stream(size):
                        h.update(chunk)
                        f.write(chunk)
            except OSError as e:
                raise BundleError(f"{path}: entry {name} cannot be written to {dest}: "
                                  f"{e.strerror or e}; refused") from None
            if h.hexdigest() != entries[name]:
                raise BundleError(f"{path}: entry {name} does not match its SHA-256 in the manifest "
                                  "(edited after export); refused")
            seen.add(name)
    for name in sorted(set(entries) - seen):
        raise BundleError(f"{path}: entry {name} is listed in the manifest but missing; refused")
    (root / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return manifest


def open_bundle(path: str | Path, into: str | Path | None = None) -> Opened:
    """Unpack ``path`` into ``into`` (a new or empty dir; default: a new temporary dir) after
    checking it as it streams: the manifest (its shape, every entry name and run dir a relative
    path inside the bundle), then each entry the manifest lists (its size against the manifest
    and the ceilings, its SHA-256); anything else is refused. :class:`BundleError` names the first
    entry that is edited, missing, extra, too big or misplaced, and nothing is left unpacked."""
    path = Path(path)
    if not path.is_file():
        raise BundleError(f"{path}: no such bundle file")
    if into is None:
        root, made = Path(tempfile.mkdtemp(prefix="kgreason-bundle-")), True
    else:
        root, made = Path(into), not Path(into).exists()
        if not made and (not root.is_dir() or any(root.iterdir())):
            raise BundleError(f"{root}: not an empty folder; a bundle is opened into a new or empty one")
        root.mkdir(parents=True, exist_ok=True)
    try:
        manifest = _unpack(path, root)
    except BaseException:
        if made:
            shutil.rmtree(root, ignore_errors=True)
        else:
            for p in list(root.iterdir()):
                shutil.rmtree(p, ignore_errors=True) if p.is_dir() and not p.is_symlink() else p.unlink()
        raise
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
    """The bundle's cache entries by key (read line by line); a line that does not check out names itself."""
    out: dict[str, dict[str, Any]] = {}
    with open(opened.root / CALLS, "rb") as f:
        for i, line in enumerate(f, 1):
            rec = decode_line(line)
            if rec is None:
                raise BundleError(f"{opened.path}: entry {CALLS} line {i}: a cache entry that fails its checksum; refused")
            out[rec["key"]] = rec
    return out


__all__ = ["BundleError", "export", "open_bundle", "readable", "cache_records", "is_bundle", "run_dirs", "Opened", "FORMAT"]
