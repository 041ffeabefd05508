"""Composition rules: an ablation means what it says, and a sweep that cannot start stops before
its first job (docs/architecture.md, "Composition rules").

* An ablation (``conf/ablation/<name>.yaml``) declares the settings it changes: the leaves of its
  file. It comes after ``experiment`` in ``conf/config.yaml``'s defaults list, so a preset never
  overrides it. What can still override it is a command-line override or a sweep axis (Hydra
  applies those last): a run where the composed value of a declared key differs from the
  ablation's value is refused, naming the key; so is a run whose reasoner does not take a key the
  ablation sets (an ablation of another method).
* ``SweepCheck`` (a Hydra callback, conf/hydra/default.yaml) composes every job of a multirun
  before the sweeper creates anything, runs the single run's start-up checks on each (these
  rules, the settings, the API key, the input files under ``paths.data``), and stops the sweep
  with one or two lines and exit status 2 when any job cannot start. A job that still fails at
  start-up (a check that needs the built components) writes ``failed.json`` in its dir; the sweep
  then ends with exit status 2 naming it.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from kgreason.runner.callbacks import REFUSED  # <sweep dir>/refused_jobs.jsonl, read by KeepHydraRecord too

_MISSING = object()


def ablation_settings(name: str, conf: Path | None = None) -> dict[str, Any]:
    """The settings ablation ``name`` declares: dotted key → value, the leaves of its file."""
    return dict(_settings(name, conf))


@functools.lru_cache(maxsize=256)
def _settings(name: str, conf: Path | None) -> tuple[tuple[str, Any], ...]:
    import yaml

    from kgreason.paths import config_dir

    path = (conf or config_dir()) / "ablation" / f"{name}.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    out: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict) and node:
            for k, v in node.items():
                if prefix or k != "defaults":
                    walk(v, f"{prefix}.{k}" if prefix else str(k))
        elif prefix:
            out[prefix] = node

    walk(data, "")
    return tuple(out.items())


@functools.lru_cache(maxsize=64)
def _accepted(target: str) -> frozenset[str] | None:
    """The keyword arguments the class ``target`` takes (``None``: any, or not importable)."""
    try:
        from hydra.utils import get_class

        params = inspect.signature(get_class(target)).parameters.values()
    except Exception:  # noqa: BLE001 - an unknown target fails at build with its own message
        return None
    if any(p.kind == p.VAR_KEYWORD for p in params):
        return None
    return frozenset(p.name for p in params)


def _plain(v: Any) -> Any:
    return OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v


def _override_key(o: str) -> str:
    return o.lstrip("+~").split("=", 1)[0]


def ablation_problems(cfg: DictConfig | Mapping[str, Any], ablation: str | None, reasoner: str | None = None,
                      overrides: Sequence[str] = (), source: Mapping[str, str] | None = None) -> list[str]:
    """Why the composed ``cfg`` does not run ablation ``ablation`` as its file says (empty when it
    does). ``reasoner`` names the reasoner option for messages; ``overrides`` are the job's
    overrides (command line and sweep axes); ``source`` optionally says where an override key
    came from (``{"reasoner.rounds": "the sweep axis reasoner.rounds: 1,2 of experiment=..."}``)."""
    if not ablation or ablation == "none":
        return []
    try:
        declared = ablation_settings(ablation)
    except FileNotFoundError:
        return []  # Hydra itself refuses an unknown option
    problems: list[str] = []
    if not isinstance(cfg, DictConfig):
        cfg = OmegaConf.create(dict(cfg))
    node = cfg.get("reasoner")
    target = str((node or {}).get("_target_", "") or "")
    accepted = _accepted(target) if target else None
    given = {_override_key(o): o for o in overrides}
    for key, want in declared.items():
        group, _, field = key.partition(".")
        if group == "reasoner" and accepted is not None and field.split(".")[0] not in accepted:
            problems.append(f"ablation={ablation} sets {key}, which reasoner={reasoner or target} does not take "
                            f"(it is an ablation of another method): pick that method's reasoner or another ablation")
            continue
        got = _plain(OmegaConf.select(cfg, key, default=_MISSING))
        if got is _MISSING or got != want:
            swept = (source or {}).get(key)
            by = swept or (f"the override {given[key]}" if key in given else "another setting")
            shown = "unset" if got is _MISSING else f"{key}={got!r}"
            fix = (f"give {key}={want} on the command line to sweep that value only, or drop the ablation" if swept
                   else "drop one of the two")
            problems.append(f"ablation={ablation} sets {key}={want!r}, but {by} makes it {shown}, so the ablation "
                            f"would not act: {fix}")
    return problems


def check_run(cfg: DictConfig) -> None:
    """Inside a Hydra run: refuse (PreflightError, one line) a run whose ablation does not act."""
    from hydra.core.hydra_config import HydraConfig

    from kgreason.preflight import PreflightError

    try:
        hc = HydraConfig.get()
    except ValueError:
        return
    ch = hc.runtime.choices
    problems = ablation_problems(cfg, ch.get("ablation"), ch.get("reasoner"), list(hc.overrides.task))
    if problems:
        raise PreflightError(problems[0])


# --------------------------------------------------------------------------- sweeps


def sweep_jobs(config: DictConfig, config_loader: Any) -> list[list[str]]:
    """The override lists of a basic-sweeper multirun's jobs, in launch order (as
    :class:`hydra._internal.core_plugins.basic_sweeper.BasicSweeper` expands them)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = [f"{k}={v}" for k, v in (config.hydra.sweeper.get("params") or {}).items()]
    params += list(config.hydra.overrides.task)
    parsed = OverridesParser.create(config_loader=config_loader).parse_overrides(params)
    return [list(job) for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]


def _sources(config: DictConfig) -> dict[str, str]:
    """Where each swept or overridden key comes from, for messages."""
    preset = (config.hydra.runtime.choices or {}).get("experiment")
    cli = {_override_key(o) for o in config.hydra.overrides.task}
    out: dict[str, str] = {}
    for k, v in (config.hydra.sweeper.get("params") or {}).items():
        if k not in cli:
            out[str(k)] = f"the sweep axis {k}: {v}" + (f" of experiment={preset}" if preset else "")
    for o in config.hydra.overrides.task:
        k = _override_key(o)
        if "," in o.split("=", 1)[-1]:
            out[k] = f"the sweep axis {o}"
    return out


def missing_inputs(cfg: DictConfig) -> list[str]:
    """Input files of the dataset and KG (settings under ``paths.data``) that are not there."""
    try:
        root = str(OmegaConf.select(cfg, "paths.data") or "")
    except Exception:  # noqa: BLE001 - an unresolvable path fails in the job with its own message
        return []
    if not root:
        return []
    var = "KGREASON_DATA"
    how = f"{var}={os.environ[var]}" if os.environ.get(var) else f"{var} unset: default {root}"
    out: list[str] = []
    if not Path(root).is_dir():
        needed = any(isinstance(v, str) and v.startswith(root.rstrip("/") + "/")
                     for g in ("dataset", "kg") for _, v in _leaves(_resolved(cfg, g), g))
        return [f"paths.data={root} is not a directory ({how}): point {var} at the data (docs/data.md)"] if needed else []
    for group in ("dataset", "kg"):
        for key, value in _leaves(_resolved(cfg, group), group):
            if isinstance(value, str) and value.startswith(root.rstrip("/") + "/") and not Path(value).exists():
                out.append(f"{key}: {value} does not exist (paths.data, {how}; docs/data.md)")
    return out


def fetch_hint(cfg: DictConfig, choices: Mapping[str, Any], message: str) -> str | None:
    """For an error naming a missing input file of the dataset or the KG: the catalog's line that
    gets it (``kgreason data fetch cwq``, ``kgreason data prepare umls --from FILE``), from the
    group whose setting holds that path and the option chosen for it; None when none applies."""
    from kgreason.data.catalog import CONFIGS, SOURCES
    from kgreason.data.command import how_to_get

    for group in ("dataset", "kg"):
        paths = [v for _, v in _leaves(_resolved(cfg, group), group) if isinstance(v, str) and "/" in v]
        if not any(p in message for p in paths):
            continue
        src = SOURCES.get(CONFIGS.get(f"{group}/{choices.get(group)}", ""))
        if src is None or src.access == "generated":
            return None
        return f"get it with: {how_to_get(src)}   (kgreason data list shows every entry; docs/data.md)"
    return None


def _resolved(cfg: DictConfig, group: str) -> Any:
    """The plain, resolved node of ``group`` (``{}`` for a hub dataset, whose files are not read)."""
    node = cfg.get(group)
    if node is None or (group == "dataset" and str(node.get("source", "local")) == "hub"):
        return {}
    try:
        return OmegaConf.to_container(node, resolve=True)
    except Exception:  # noqa: BLE001 - an unresolvable setting fails in the job with its own message
        return {}


def _leaves(node: Any, prefix: str) -> Iterable[tuple[str, Any]]:
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, f"{prefix}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _leaves(v, f"{prefix}[{i}]")
    else:
        yield prefix, node


def job_problems(cfg: DictConfig, job: Sequence[str], sources: Mapping[str, str] | None = None) -> list[str]:
    """Why one composed job of a sweep cannot start: the ablation rule, the single run's settings
    checks (kgreason.runner.run._start_checks), and missing input files."""
    from kgreason.storage.callstore import StoreCorrupt
    from kgreason.preflight import PreflightError

    ch = cfg.hydra.runtime.choices
    problems = ablation_problems(cfg, ch.get("ablation"), ch.get("reasoner"), job, sources)
    problems += missing_inputs(cfg)  # before the settings: a clone without its data says that first
    from kgreason.runner.run import _start_checks

    try:
        _start_checks(cfg)
    except PreflightError as e:
        msg = str(e)
        head = "the run cannot start:\n  - "
        problems += msg[len(head):].split("\n  - ") if msg.startswith(head) else [msg]
    except StoreCorrupt as e:  # a damaged call cache: every job would stop on it
        problems.append(str(e).splitlines()[0])
    return problems


def _ranges(nums: Sequence[int]) -> str:
    return ", ".join(f"#{n}" for n in nums[:6]) + (f", … ({len(nums)} jobs)" if len(nums) > 6 else "")


def check_sweep(config: DictConfig, config_loader: Any) -> list[str]:
    """Every job of the sweep composed and checked; the one- or two-line refusal (empty: all can start)."""
    jobs = sweep_jobs(config, config_loader)
    sources = _sources(config)
    found: dict[str, list[int]] = {}
    composed = [config_loader.load_sweep_config(config, job) for job in jobs]
    for i, (job, job_cfg) in enumerate(zip(jobs, composed)):
        for p in job_problems(job_cfg, job, sources):
            found.setdefault(p, []).append(i)
    if not found:
        for problem, where in _probe_endpoints(composed).items():
            found[problem] = where
    if not found:
        return []
    (first, where), *rest = sorted(found.items(), key=lambda kv: -len(kv[1]))  # the widest first
    lines = [f"the sweep cannot start ({len(jobs)} jobs; none was launched, nothing was written): {first} "
             f"[job {_ranges(where)}]"]
    if rest:
        lines.append(f"and {len(rest)} more problem(s), e.g. {rest[0][0]} [job {_ranges(rest[0][1])}]")
    return lines


def _probe_endpoints(composed: Sequence[DictConfig]) -> dict[str, list[int]]:
    """One one-token probe per distinct HTTP LLM endpoint of the sweep (the probe every job's
    start-up makes, ``preflight.probe_llm``), so a dead endpoint stops the sweep before its first job."""
    from kgreason.llm.lazy import LazyLLM
    from kgreason.preflight import PreflightError, probe_llm
    from kgreason.runner.run import _reasoner_class

    seen: dict[str, list[int]] = {}
    cfgs: dict[str, DictConfig] = {}
    for i, cfg in enumerate(composed):
        pf = cfg.get("preflight") or {}
        if (not pf.get("probe_llm", True) or str((cfg.get("llm_cache") or {}).get("mode", "")) == "readonly"
                or not (cfg.get("llm") or {}).get("base_url")
                or not getattr(_reasoner_class(cfg), "uses_llm", True)):
            continue
        key = json.dumps(OmegaConf.to_container(cfg.llm, resolve=True), sort_keys=True, default=str)
        seen.setdefault(key, []).append(i)
        cfgs.setdefault(key, cfg)
    found: dict[str, list[int]] = {}
    for key, where in seen.items():
        cfg = cfgs[key]
        llm = LazyLLM(cfg.llm, None)
        try:
            probe_llm(llm, f"llm={cfg.hydra.runtime.choices.get('llm') or cfg.llm.get('model')}",
                      float((cfg.get("preflight") or {}).get("probe_wait_s", 120.0)))
        except PreflightError as e:
            found[str(e)] = where
        finally:
            close = getattr(llm, "close", None)
            if callable(close):
                close()
    return found


def failed_marker(out_dir: Path, reason: str, stage: str) -> Path:
    """Write ``failed.json`` (docs/notes: the job-dir failure marker) in a job dir that stopped."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "failed.json"
    path.write_text(json.dumps({"status": "failed", "reason": reason, "stage": stage}) + "\n", encoding="utf-8")
    return path



def refused_marker(sweep_dir: Path, out_dir: Path, reason: str) -> None:
    """Note in ``<sweep dir>/refused_jobs.jsonl`` that the job of ``out_dir`` was refused its dir."""
    import time

    try:
        rel = str(Path(out_dir).resolve().relative_to(Path(sweep_dir).resolve()))
    except ValueError:
        rel = None
    line = json.dumps({"job": out_dir.name, "dir": rel, "reason": reason, "time": time.time()}) + "\n"
    with open(Path(sweep_dir) / REFUSED, "a", encoding="utf-8") as f:  # one short append per job
        f.write(line)


class SweepCheck(Callback):
    """Hydra callback: a multirun is checked whole before its first job (``preflight.sweep``,
    default true), and ends with exit status 2 when any job marked itself failed."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        import time

        self._t0 = time.time() - 1.0  # failed.json of this sweep only (a rerun into one dir)
        if not bool(OmegaConf.select(config, "preflight.sweep", default=True)):
            return
        target = str(OmegaConf.select(config, "hydra.sweeper._target_", default="") or "")
        if not target.endswith("BasicSweeper"):
            return  # a search sweeper (optuna, ...) picks its own values: each job checks itself
        from hydra.core.global_hydra import GlobalHydra

        lines = check_sweep(config, GlobalHydra.instance().config_loader())
        if lines:
            print("kgreason: error: " + "\n".join(lines), file=sys.stderr)
            sys.exit(2)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        root = Path(str(config.hydra.sweep.dir))
        t0 = getattr(self, "_t0", 0.0)
        failed = sorted(p for p in root.rglob("failed.json") if p.stat().st_mtime >= t0) if root.is_dir() else []
        refused = []
        if (root / REFUSED).is_file():
            for line in (root / REFUSED).read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if isinstance(r, dict) and float(r.get("time") or 0) >= t0:
                    refused.append(r)
        if not failed and not refused:
            return
        if failed:
            try:
                reason = json.loads(failed[0].read_text(encoding="utf-8")).get("reason", "?")
            except (OSError, ValueError):
                reason = "?"
            print(f"kgreason: error: {len(failed)} job(s) of the sweep failed (failed.json in each; kgreason tables "
                  f"shows them), first {failed[0].parent.relative_to(root)}: {reason}", file=sys.stderr)
        if refused:
            print(f"kgreason: error: {len(refused)} job(s) of the sweep were refused their dir and did not run; "
                  f"each dir is as it was (listed in {root / REFUSED}), first {refused[0].get('job')}: "
                  f"{refused[0].get('reason')}", file=sys.stderr)
        sys.exit(2)


__all__ = ["SweepCheck", "ablation_problems", "ablation_settings", "check_run", "check_sweep", "failed_marker",
           "job_problems", "missing_inputs", "fetch_hint", "refused_marker", "sweep_jobs"]
