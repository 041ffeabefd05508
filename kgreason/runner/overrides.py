"""Typos on the command line get one line with the closest name, before Hydra starts.

Hydra's own messages for a mistyped option (``reasoner=rgg``: 20 lines listing the search path)
or key (``dataset.limt=5``: "to append to your config use +dataset.limt=5", which would add the
typo as a new key) are replaced by one line naming the closest existing option or key:

    kgreason: error: reasoner=rgg: no such option; did you mean reasoner=rag? (options: cot, io, ...)
    kgreason: error: dataset.limt=5: no key 'limt' in dataset; did you mean dataset.limit?

What is checked: every ``group=option`` override whose group is a config group (each value of a
sweep ``a,b``), and every ``key.path=value`` override (no ``+``/``++``/``~`` prefix, not under
``hydra.``) against the config composed from the command line's group choices. Sweep functions
(``range(...)``, ``glob(...)``, ...) and interpolations are left to Hydra.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Sequence

from kgreason.paths import config_dir

_FUNC = re.compile(r"^\s*(range|choice|glob|interval|tag|sort|shuffle)\s*\(")


def _split_sweep(value: str) -> list[str]:
    """The values of ``a,b,c`` (a plain comma sweep; brackets, quotes or functions: as one value)."""
    if _FUNC.match(value) or any(c in value for c in "[]{}'\"$("):
        return [value]
    return [v.strip() for v in value.split(",")]


def _options(group_dir: Path) -> list[str]:
    return sorted(p.stem for p in group_dir.glob("*.yaml"))


def _closest(word: str, choices: Sequence[str]) -> str | None:
    hit = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.5)
    return hit[0] if hit else None


def check_group_choices(args: Sequence[str], conf: Path | None = None) -> str | None:
    """One line for the first ``group=option`` naming an option the group does not have."""
    conf = conf or config_dir()
    for a in args:
        if a.startswith(("-", "~")) or "=" not in a:
            continue
        key, value = a.lstrip("+").split("=", 1)
        if key.startswith("hydra") or key.startswith("/"):
            key = key.lstrip("/")
            if key.startswith("hydra"):
                continue
        group = conf / key.replace(".", "/")
        if not group.is_dir() or not value or value == "null":
            continue
        opts = _options(group)
        if not opts:
            continue
        for v in _split_sweep(value):
            if _FUNC.match(v) or v in opts or v == "null" or v.startswith("${"):
                continue
            near = _closest(v, opts)
            hint = f"did you mean {key}={near}? " if near else ""
            return f"{key}={v}: no such option; {hint}(options: {', '.join(opts)})"
    return None


def _first_value(value: str) -> str:
    vals = _split_sweep(value)
    return vals[0] if vals else value


def check_keys(args: Sequence[str], conf: Path | None = None) -> str | None:
    """One line for the first ``key.path=value`` whose key is not in the composed config."""
    conf = conf or config_dir()
    keyed, choices, fixed, swept = [], [], [], []
    for a in args:
        if a.startswith(("-", "~", "+")) or "=" not in a:
            continue
        key, value = a.split("=", 1)
        if key.startswith("hydra") or "@" in key:
            continue
        if (conf / key.replace(".", "/")).is_dir():
            choices.append(f"{key}={_first_value(value)}")
            if len(_split_sweep(value)) > 1:
                swept.append(key)
            else:
                fixed.append(f"{key}={value}")
        else:
            keyed.append(key)
    if not keyed:
        return None
    cfg = _compose(conf, choices)
    if cfg is None:
        return None  # composition failed for another reason: Hydra reports it as usual
    from omegaconf import DictConfig

    for key in keyed:
        node, parts = cfg, key.split(".")
        for i, part in enumerate(parts):
            if not isinstance(node, DictConfig):
                break  # a value below a leaf or a list index: Hydra's own check applies
            if part in node.keys():
                node = node._get_node(part)
                continue
            parent = ".".join(parts[:i]) or "the config"
            near = _closest(part, [str(k) for k in node.keys()])
            full = ".".join([*parts[:i], near]) if near else None
            hint = f"; did you mean {full}?" if full else ""
            return (f"{key}={_value_of(args, key)}: no key {part!r} in {parent}{hint} "
                    f"(to add a new key on purpose: +{key}=...)")
    if any(a in ("--multirun", "-m") for a in args) and swept:
        return _sweep_base_problem(conf, fixed, swept, keyed, args)
    return None


def _sweep_base_problem(conf: Path, fixed: list[str], swept: list[str], keyed: list[str],
                        args: Sequence[str]) -> str | None:
    """Hydra composes a multirun's base config with each swept group at its *default* option and
    sets every plain ``key=value`` there first: a key that only the swept options have stops it
    ("Key ... is not in struct", exit 1). One line instead, naming the default and the fix."""
    from omegaconf import DictConfig

    mine = [k for k in keyed if any(k.startswith(g + ".") for g in swept)]
    if not mine:
        return None
    base = _compose(conf, fixed, hydra=True)
    if base is None:
        return None
    for key in mine:
        node = base
        for part in key.split("."):
            if not isinstance(node, DictConfig):
                break
            if part not in node.keys():
                group = next(g for g in swept if key.startswith(g + "."))
                default = base.hydra.runtime.choices.get(group)
                value = _value_of(args, key)
                return (f"{key}={value}: a sweep's base config has the default {group}={default}, which has no "
                        f"{key}, and Hydra sets the key there first; write ++{key}={value} to set it in every "
                        f"job of the sweep")
            node = node._get_node(part)
    return None


def _value_of(args: Sequence[str], key: str) -> str:
    for a in args:
        if a.startswith(f"{key}="):
            return a.split("=", 1)[1]
    return ""


def _compose(conf: Path, overrides: list[str], hydra: bool = False):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        return None
    try:
        with initialize_config_dir(version_base="1.3", config_dir=str(conf)):
            return compose("config", overrides=overrides, return_hydra_config=hydra)
    except Exception:  # noqa: BLE001 - any other composition problem is Hydra's to report
        return None
    finally:
        GlobalHydra.instance().clear()


def check(args: Sequence[str], conf: Path | None = None) -> str | None:
    """The first typo on the command line, as one line; None when there is none."""
    return check_group_choices(args, conf) or check_keys(args, conf)
