"""Where kgreason looks for its configs, data, caches and models (the ``paths`` config group).

Ground floor: imports nothing from kgreason. Two layouts are told apart by where this file is:

* a **clone** (``<root>/kgreason/paths.py`` next to ``<root>/conf/config.yaml``): configs are the
  clone's ``conf/``; data defaults to ``<root>/../shared/data`` where that folder exists, else
  ``<root>/data`` (git-ignored; where ``kgreason data fetch`` puts what it gets); caches to ``<root>/.cache/kgreason``;
* an **installed** package (``site-packages/kgreason``): configs are the copy of ``conf/`` shipped
  in the wheel as ``kgreason/conf``; data defaults to ``$XDG_DATA_HOME/kgreason/data``
  (``~/.local/share/kgreason/data``); caches to ``$XDG_CACHE_HOME/kgreason`` (``~/.cache/kgreason``).

Environment variables win over both defaults: ``KGREASON_DATA``, ``KGREASON_CACHE_DIR``,
``KGREASON_MODEL_DIR``, ``KGREASON_OUTPUT``. Nothing here depends on the working directory except
the output root, which follows Hydra's convention (runs are written where you start them).

``conf/paths/default.yaml`` reads these through the ``${kgreason.path:NAME}`` resolver, which
importing :mod:`kgreason` registers.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

PACKAGE_DIR = Path(__file__).resolve().parent

#: environment variable → (paths.<key>, what it points at)
ENV = {
    "data": "KGREASON_DATA",
    "cache": "KGREASON_CACHE_DIR",
    "models": "KGREASON_MODEL_DIR",
    "output": "KGREASON_OUTPUT",
}


def repo_root() -> Path | None:
    """The clone's root when running from a checkout (or an editable install), else ``None``."""
    root = PACKAGE_DIR.parent
    if (root / "conf" / "config.yaml").is_file() and (root / "pyproject.toml").is_file():
        return root
    return None


def config_dir() -> Path:
    """The primary Hydra config directory: the clone's ``conf/``, else the packaged copy."""
    root = repo_root()
    if root is not None:
        return root / "conf"
    packaged = PACKAGE_DIR / "conf"
    if (packaged / "config.yaml").is_file():
        return packaged
    raise FileNotFoundError(
        f"no kgreason configs found: neither {PACKAGE_DIR.parent / 'conf'} (a clone) nor {packaged} "
        "(an installed wheel) holds config.yaml; reinstall the package (pip install kgreason)")


def _xdg(var: str, fallback: str) -> Path:
    return Path(os.environ.get(var) or Path.home() / fallback)


def default(name: str) -> str:
    """The default for ``paths.<name>`` when its environment variable is unset."""
    root = repo_root()
    if name == "root":
        return str(root) if root is not None else str(PACKAGE_DIR)
    if name == "data":
        if root is None:  # an installed package
            return str(_xdg("XDG_DATA_HOME", ".local/share") / "kgreason" / "data")
        shared = root.parent / "shared" / "data"  # a clone beside the project's shared samples
        return str(shared if shared.is_dir() else root / "data")  # else the clone's own (git-ignored) data/
    if name == "cache":
        return str(root / ".cache" / "kgreason") if root else str(_xdg("XDG_CACHE_HOME", ".cache") / "kgreason")
    if name == "models":
        return str(_xdg("XDG_CACHE_HOME", ".cache") / "kgreason" / "models")
    if name == "output":
        return "outputs"
    raise KeyError(f"${{kgreason.path:{name}}}: expected one of root, data, cache, models, output")


def resolve(name: str) -> str:
    """``paths.<name>``: its environment variable if set, else :func:`default`."""
    var = ENV.get(name)
    return (os.environ.get(var) if var else None) or default(name)


def register_resolvers() -> None:
    """Register ``${kgreason.path:NAME}`` with OmegaConf (idempotent)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("kgreason.path"):
        OmegaConf.register_new_resolver("kgreason.path", resolve)


#: the longest name accepted as one path component (names are joined with a hash or suffix)
MAX_COMPONENT_CHARS = 128
#: ... and its longest UTF-8 encoding: file systems count bytes (255 on ext4, xfs, btrfs, APFS), and
#: a name is joined with a hash, a suffix or an extension (up to ~50 bytes) before it is written
MAX_COMPONENT_BYTES = 200
#: the file systems' own limit on one component (NAME_MAX), for names used as they are
NAME_MAX_BYTES = 255


def component_problem(name: Any, max_chars: int = MAX_COMPONENT_CHARS, max_bytes: int = MAX_COMPONENT_BYTES) -> str | None:
    """Why ``name`` is not usable as exactly one path component, or None (see :func:`safe_component`)."""
    s = str(name) if isinstance(name, (str, int)) and not isinstance(name, bool) else None
    if s is None:
        return f"expected a string, got {type(name).__name__}"
    if not s:
        return "it is empty"
    if s in (".", "..") or s.startswith("."):
        return "it starts with '.'"
    if "/" in s or "\\" in s:
        return "it contains a path separator"
    if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in s):
        return "it contains a control character"
    if len(s) > max_chars:
        return f"it is {len(s)} characters long (at most {max_chars})"
    try:
        n = len(s.encode("utf-8"))
    except UnicodeEncodeError:
        return "it is not valid text (undecodable bytes)"
    if n > max_bytes:
        return f"it is {n} bytes long in UTF-8 (at most {max_bytes})"
    return None


def safe_component(name: Any, field: str, max_chars: int = MAX_COMPONENT_CHARS,
                   max_bytes: int = MAX_COMPONENT_BYTES) -> str:
    """``name`` when it is usable as exactly one path component, else a ValueError naming
    ``field`` (the setting it came from). Refused: empty, ``.``/``..``, a leading dot (hidden and
    temporary entries are ours), a path separator (``/`` or ``\\``), a control character, text
    that cannot be written as UTF-8 (a lone surrogate from undecodable bytes), and names over
    ``max_chars`` characters or ``max_bytes`` bytes of UTF-8 (128 two-byte characters are 256
    bytes: "File name too long"). Every config value or option that becomes a file or folder name
    (a KG's name in a cache path, a prompts folder, an output name, a sweep job's folder) passes
    through here before anything is written."""
    why = component_problem(name, max_chars, max_bytes)
    if why:
        raise ValueError(f"{field}={name!r} cannot be used in a file name: {why}; "
                         "use letters, digits and -_.+@ (one path component)")
    return str(name)


def safe_relative(path: Any, field: str) -> str:
    """``path`` when it is a relative path whose every component passes :func:`safe_component`
    (at the file systems' own :data:`NAME_MAX_BYTES` per component, since such a path is used as
    it is, e.g. Hydra's ``hydra.sweep.subdir``); empty components (``a//b``) are ignored and a
    backslash is an ordinary character (POSIX). Else a ValueError naming ``field``."""
    s = str(path)
    if s.startswith(("/", "\\", "~")) or re.match(r"^[A-Za-z]:", s):
        raise ValueError(f"{field}={path!r} cannot be used: it is an absolute path (a folder inside its root "
                         "is expected)")
    parts = [p for p in s.split("/") if p]
    if not parts:
        raise ValueError(f"{field}={path!r} cannot be used: it is empty")
    for p in parts:
        # "\\" is an ordinary character on POSIX (Hydra writes "http\\://..." into override_dirname)
        why = component_problem(p.replace("\\", "_"), NAME_MAX_BYTES, NAME_MAX_BYTES)
        if why:
            shown = p if len(p) <= 60 else p[:57] + "..."
            raise ValueError(f"{field}={path!r} cannot be used: its part {shown!r} is not one safe folder name "
                             f"({why})")
    return s


def inside(root: str | Path, path: str | Path, field: str) -> Path:
    """``path`` resolved (symlinks followed); a ValueError naming ``field`` when it is not
    inside ``root`` (also resolved). Call it before anything is written or deleted at ``path``."""
    r, p = Path(root).expanduser().resolve(), Path(path).expanduser().resolve()
    if p != r and r not in p.parents:
        raise ValueError(f"{field}: the path {path} resolves to {p}, outside its root {r}; "
                         "nothing is written or deleted there")
    return p


def shown(path: str | Path) -> str:
    """``path`` as a message shows it: relative to the working directory when it lies inside it
    (``outputs/runs/…``, as the README writes run dirs), else absolute; never a mix of the two
    (Hydra hands a sweep dir over as typed and a job's dir absolute)."""
    p = Path(path).expanduser()
    try:
        a, here = p.resolve(), Path.cwd().resolve()
    except OSError:
        return str(p)
    if a == here:
        return "."
    return str(a.relative_to(here)) if a.is_relative_to(here) else str(a)


def hydra_quote(value: str) -> str:
    """``value`` written so that Hydra's override parser gives it back as it is (``key=<this>``):
    as it is when it holds only letters, digits and ``_./@+-``; else single-quoted, with a quote,
    the backslashes before a quote or at the end, and ``${`` escaped (a path with spaces, commas,
    ``=``, quotes or brackets would otherwise be split, swept or refused by Hydra)."""
    if re.fullmatch(r"[A-Za-z0-9_./@+-]+", value):
        return value
    s = re.sub(r"(\\+)(?='|$)", lambda m: m.group(1) * 2, value).replace("'", "\\'").replace("${", "\\${")
    return f"'{s}'"


def _string_leaves(node: Any, prefix: str = ""):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _string_leaves(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(node, (list, tuple)):
        for i, v in enumerate(node):
            yield from _string_leaves(v, f"{prefix}[{i}]")
    elif isinstance(node, str):
        yield prefix, node


def explain_missing(cfg: Any, message: str) -> str | None:
    """For an error about a missing file, say which setting holds that path and which
    ``paths.*`` entry and environment variable it is built from. ``None`` when the message
    names no configured path."""
    from omegaconf import OmegaConf

    try:
        plain = OmegaConf.to_container(cfg, resolve=True)
    except Exception:  # noqa: BLE001 - best effort: the original error is still raised
        return None
    roots = plain.get("paths") or {}
    leaves = _string_leaves({k: v for k, v in plain.items() if k not in ("paths", "hydra")})
    # path-like settings named in the message, the most specific (longest) first
    hits = sorted(((k, v) for k, v in leaves if "/" in v and v in message), key=lambda kv: -len(kv[1]))
    try:
        raw = dict(_string_leaves(OmegaConf.to_container(cfg, resolve=False)))
    except Exception:  # noqa: BLE001 - best effort
        raw = {}
    for key, value in hits:
        env = re.match(r"\$\{oc\.env:([A-Za-z_][A-Za-z0-9_]*)", raw.get(key, ""))
        if env:  # the setting reads an environment variable of its own (PROBSUM_CSV, ...)
            var = env.group(1)
            how = f"{var}={os.environ[var]}" if os.environ.get(var) else f"{var} is unset, so the default {value}"
            return (f"`{key}` reads the environment variable {var} ({how}): export {var}=/path/to/the/file "
                    f"or override {key}=... on the command line; see docs/data.md.")
        parent = Path(value).parent
        if parent.is_dir():  # the folder is there, the file is not: a setting that names it is off
            have = sorted(q.name for q in parent.iterdir() if not q.name.startswith("."))
            shown = ", ".join(have[:8]) + (f", … ({len(have)} files)" if len(have) > 8 else "")
            return (f"{value} (setting `{key}`) does not exist, but its folder does and holds: {shown or '(nothing)'}. "
                    f"A setting that builds the file name is probably off (check the overrides that shape `{key}`).")
        for name in ("data", "cache", "models"):
            base = str(roots.get(name) or "")
            if base and value.startswith(base):
                var = ENV[name]
                how = f"{var}={os.environ[var]}" if os.environ.get(var) else f"{var} is unset, so the default {default(name)}"
                return (f"{value} (setting `{key}`) is under paths.{name} = {base} ({how}). "
                        f"Point {var} at the directory that holds it (export {var}=/path/to/{name}) "
                        f"or override paths.{name}=... / {key}=... on the command line; see docs/data.md.")
        return f"{value} comes from the setting `{key}`; override it on the command line ({key}=...)."
    return None
