"""The record of a run: ``run.json`` and the config fingerprint that guards resume (issue 18).

``run.json`` says exactly what produced a run dir's numbers: the resolved config (interpolations
resolved, secrets removed), the option chosen in every config group, the git commit and whether
the tree was dirty, the versions of kgreason and the packages that shape results, and a content
hash of every data file the run read. The same dict goes to the W&B run's config.

The **fingerprint** is a hash of the resolved config without the keys that cannot change a
result (:data:`NOT_FINGERPRINTED`: resume switches, worker counts, where caches and trackers
write). A run dir keeps it in ``fingerprint.json``; resuming that dir with a config whose
fingerprint differs stops and names every key that differs, unless ``resume_allow_changes=true``
says the change is intended (it is then recorded in ``fingerprint.json``'s history).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import uuid
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping

from omegaconf import DictConfig, OmegaConf

PACKAGES = ("kgreason", "torch", "numpy", "scipy", "numba", "transformers", "sentence-transformers",
            "hydra-core", "omegaconf", "kuzu", "wandb", "openai", "networkx", "igraph", "vllm")

# keys that change how a run goes, never what it computes
NOT_FINGERPRINTED = ("resume", "resume_allow_changes", "retry_errors", "max_consecutive_failures",
                     "example_workers", "retrieval_batch", "tracking",
                     "llm_cache", "llm.backoff_base_s", "llm.backoff_max_s", "llm.delay_s", "fail_on_error_rate", "max_error_rate", "progress", "paths",
                     "hydra", "llm.max_concurrency", "llm.timeout_s", "llm.max_retries", "reports.batch",
                     "reports.engine", "optimized_metric", "preflight")


class ResumeConfigMismatch(RuntimeError):
    """The run dir was made with another config; the message names the keys that differ."""


def _container(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(cfg, DictConfig):
        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    return json.loads(json.dumps(dict(cfg), default=str))


def flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` → ``{"a.b": 1}`` (lists kept whole)."""
    out: dict[str, Any] = {}
    if isinstance(d, Mapping):
        for k, v in d.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, Mapping) and v:
                out.update(flatten(v, key))
            else:
                out[key] = v
    return out


def _excluded(key: str) -> bool:
    return any(key == k or key.startswith(k + ".") for k in NOT_FINGERPRINTED)


def fingerprint(cfg: DictConfig | Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """``(sha256, the flat settings it covers)`` of a config (see the module docstring)."""
    from kgreason.runs import scrub_secrets

    flat = {k: v for k, v in flatten(scrub_secrets(_container(cfg))).items() if not _excluded(k)}
    digest = hashlib.sha256(json.dumps(flat, sort_keys=True, default=str).encode()).hexdigest()
    return digest, flat


def _same_file(a: Any, b: Any) -> bool:
    """Two spellings of one existing file or dir (``../shared/data/x`` and ``$KGREASON_DATA/x`` spelled as an absolute path):
    the data a run reads, not how its path was written, is what a resume must keep."""
    if not (isinstance(a, str) and isinstance(b, str)) or not a or not b or ("/" not in a and "/" not in b):
        return False
    try:
        pa, pb = Path(a).expanduser(), Path(b).expanduser()
        return pa.exists() and pb.exists() and pa.resolve() == pb.resolve()
    except (OSError, ValueError):
        return False


def check_resume(out_dir: str | Path, cfg: DictConfig | Mapping[str, Any], *, allow_changes: bool = False) -> str:
    """Write ``fingerprint.json`` on a new run dir; on a resumed one, refuse a different config.

    Returns the run dir's id (``run_id``: made once, with the dir's first ``fingerprint.json``).
    The call cache records it with each entry the run pays for, so a resumed run counts the
    calls its killed attempts paid for as its own (docs/llm.md), and another run dir with the
    same config replaying the cache does not.

    Raises:
        ResumeConfigMismatch: naming each differing key with its old and new value.
    """
    from kgreason.runs import write_json

    path = Path(out_dir) / "fingerprint.json"
    digest, flat = fingerprint(cfg)
    if not path.exists():
        run_id = uuid.uuid4().hex
        write_json(path, {"sha256": digest, "settings": flat, "history": [], "run_id": run_id})
        return run_id
    old = json.loads(path.read_text(encoding="utf-8"))
    run_id = str(old.get("run_id") or "")
    if not run_id:  # a dir made before run ids: give it one now
        run_id = uuid.uuid4().hex
        write_json(path, {**old, "run_id": run_id})
    if old.get("sha256") == digest:
        return run_id
    before = old.get("settings", {})
    keys = sorted(set(before) | set(flat))
    diff = {k: (before.get(k, "<absent>"), flat.get(k, "<absent>")) for k in keys
            if before.get(k) != flat.get(k) and not _same_file(before.get(k), flat.get(k))}
    if not diff:  # only paths spelled otherwise: the dir takes this spelling, and says so in its history
        history = list(old.get("history", [])) + [{"from": old.get("sha256"), "changed": [], "respelled_paths": True}]
        write_json(path, {"sha256": digest, "settings": flat, "history": history, "run_id": run_id})
        return run_id
    if not allow_changes:
        lines = [f"{k}: {a!r} -> {b!r}" for k, (a, b) in list(diff.items())[:20]]
        more = f" (and {len(diff) - 20} more)" if len(diff) > 20 else ""
        raise ResumeConfigMismatch(
            f"{out_dir} was made with another config; resuming would mix answers of two setups in one "
            f"predictions.jsonl. Keys that differ{more}:\n  " + "\n  ".join(lines) +
            "\nUse a new run dir, or resume_allow_changes=true if the change is intended.")
    history = list(old.get("history", [])) + [{"from": old.get("sha256"), "changed": sorted(diff)}]
    write_json(path, {"sha256": digest, "settings": flat, "history": history, "run_id": run_id})
    return run_id


def _git(repo: Path, *args: str) -> str | None:
    try:
        p = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout.strip() if p.returncode == 0 else None


def git_state(repo: Path | None = None) -> dict[str, Any]:
    """``{commit, dirty}`` of the checkout kgreason runs from (both null for an installed wheel)."""
    repo = repo or Path(__file__).resolve().parents[1]
    commit = _git(repo, "rev-parse", "HEAD") if (repo / ".git").exists() else None
    if commit is None:
        return {"commit": None, "dirty": None}
    status = _git(repo, "status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status)}


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def choices() -> dict[str, str]:
    """The option chosen in every config group (Hydra's runtime choices; empty outside Hydra)."""
    try:
        from hydra.core.hydra_config import HydraConfig

        return {str(k): str(v) for k, v in HydraConfig.get().runtime.choices.items() if v is not None}
    except Exception:  # noqa: BLE001 - run() called without a Hydra app (tests, notebooks)
        return {}


def overrides() -> list[str]:
    """The launch's command-line overrides (Hydra's ``overrides.task``; empty outside Hydra)."""
    try:
        from hydra.core.hydra_config import HydraConfig

        return [str(o) for o in HydraConfig.get().overrides.task]
    except Exception:  # noqa: BLE001 - run() called without a Hydra app (tests, notebooks)
        return []


def run_record(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    """The content of ``run.json`` (call it after the components are built, so the data files
    the KG and dataset loaders read are listed)."""
    from kgreason.runs import scrub_secrets
    from kgreason.textio import files_read

    digest, _ = fingerprint(cfg)
    # choices and overrides: this launch's, the one whose rows the dir holds. Hydra rewrites
    # .hydra/ before kgreason runs, so a launch refused on this dir later (its lock held, another
    # config) leaves its own there; kgreason tables labels the run from these two
    return {"config": scrub_secrets(_container(cfg)), "choices": choices(), "overrides": overrides(),
            "git": git_state(), "versions": versions(), "data_files": files_read(), "fingerprint": digest}


__all__ = ["ResumeConfigMismatch", "fingerprint", "check_resume", "overrides", "run_record", "git_state", "versions",
           "choices", "flatten", "NOT_FINGERPRINTED"]
