"""Collecting runs: the Hydra job dirs of a run or sweep, their group choices and overrides,
``metrics.json`` as a tidy frame, each run's state (complete, partial, failed with the reason of its
``failed.json``), and its per-question values (:mod:`kgreason.tables.rows`, read once).

Nothing here raises on a damaged job dir: a file that cannot be read (invalid YAML or JSON, a wrong
type, a non-finite number) becomes one line naming it, in ``missing`` or in the warnings."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from kgreason.metrics.funnel import STAGES_KEY
from kgreason.record import NOT_FINGERPRINTED
from kgreason.tables.rows import RunRows, read_rows

GROUPS = ("dataset", "reasoner", "ablation", "llm", "kg", "retriever")
TIDY_COLUMNS = ["job", *GROUPS, "variant", "seed", "metric", "value"]


#: metrics.json key prefixes whose values must be numbers (``None``: not applicable); ``run/*`` may hold text,
#: and ``funnel/_stages`` is the funnel's stage list
MEASURES = ("metric/", "retrieval/", "judge/", "llm/", "funnel/")


class Malformed(ValueError):
    """A job dir file that cannot be read; the message names it."""


def _is_job(d: Path) -> bool:
    """A run dir: Hydra's record (``.hydra/hydra.yaml``), kgreason's (``run.json``: a bundle's runs
    have no ``.hydra/``), or a ``failed.json`` marker (a job that stopped before Hydra wrote its config)."""
    return (d / ".hydra" / "hydra.yaml").is_file() or (d / "run.json").is_file() or (d / "failed.json").is_file()


def _subdirs(d: Path) -> list[Path]:
    try:
        return [p for p in d.iterdir() if p.is_dir() and not p.name.startswith(".")]
    except OSError:
        return []


def job_dirs(root: str | Path) -> list[Path]:
    """The run dirs of ``root``, at fixed depths, never searched for: ``root`` itself when it is
    a run dir (:func:`_is_job`); else its subfolders that are run dirs (a sweep's jobs are
    ``<sweep dir>/<job number>``: conf/hydra/default.yaml; a day folder's runs; a bundle's
    ``runs/<name>``), and the run dirs one level below a subfolder that is not one (a day folder
    of sweeps, a bundle of several sweeps: ``runs/<sweep>/<job>``). Nothing inside a run dir is
    looked at: a folder there (a copy left inside a job, a W&B run dir) is not another job.
    Sorted by job number within each folder."""
    root = Path(root)
    if _is_job(root):
        return [root]
    found: list[Path] = []
    for d in sorted(_subdirs(root), key=_job_sort_key):
        if _is_job(d):
            found.append(d)
        else:
            found += sorted((j for j in _subdirs(d) if _is_job(j)), key=_job_sort_key)
    return sorted(found, key=lambda p: (len(p.parts), [_job_sort_key(Path(x)) for x in p.relative_to(root).parts]))


def _job_sort_key(p: Path):
    head = p.name.split("_", 1)[0]
    return (int(head), p.name) if head.isdigit() else (10**9, p.name)


def _load_yaml(path: Path) -> Any:
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def _yaml(path: Path, job: Path, kind: type) -> Any:
    """``path`` parsed, of type ``kind`` (empty → ``kind()``); :class:`Malformed` naming it if not."""
    where = f"{job.name}/{path.relative_to(job)}" if path.is_relative_to(job) else str(path)
    try:
        doc = _load_yaml(path)
    except yaml.YAMLError as e:
        raise Malformed(f"{where}: invalid YAML ({str(e).splitlines()[0]})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise Malformed(f"{where}: unreadable ({e})") from None
    if doc is None:
        return kind()
    if not isinstance(doc, kind):
        raise Malformed(f"{where}: expected a YAML {'mapping' if kind is dict else 'list'}, "
                        f"got {type(doc).__name__}")
    return doc


def launch(job: Path) -> tuple[dict[str, Any], list[str]]:
    """The group choices and command-line overrides of the launch whose rows ``job`` holds.

    They come from ``run.json``, which kgreason writes once a launch is accepted on the dir.
    Hydra writes ``.hydra/`` before any kgreason code runs, so a later launch refused on the dir
    (its lock held by a running job, or another config: kgreason/record.py) leaves its own
    choices there, beside rows it never wrote. ``.hydra/`` is read only where ``run.json`` has no
    record (a job that failed at startup, a dir from before run.json kept overrides)."""
    rec_path = job / "run.json"
    rec: dict[str, Any] = {}
    if rec_path.exists():
        try:
            rec = json.loads(rec_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise Malformed(f"{job.name}/run.json: unreadable ({str(e).splitlines()[0]})") from None
        if not isinstance(rec, dict):
            raise Malformed(f"{job.name}/run.json: expected a JSON object, got {type(rec).__name__}")
    choices = rec.get("choices") or None
    if choices is not None and not isinstance(choices, dict):
        raise Malformed(f"{job.name}/run.json: choices is not a mapping")
    if choices is None:
        hy = job / ".hydra" / "hydra.yaml"
        choices = _get(_yaml(hy, job, dict), "hydra", "runtime", "choices") if hy.exists() else None
        choices = {} if choices is None else choices
        if not isinstance(choices, dict):
            raise Malformed(f"{job.name}/.hydra/hydra.yaml: hydra.runtime.choices is not a mapping")
    overrides = rec.get("overrides") if rec.get("choices") else None
    if overrides is not None and not isinstance(overrides, list):
        raise Malformed(f"{job.name}/run.json: overrides is not a list")
    if overrides is None:
        ov_path = job / ".hydra" / "overrides.yaml"
        overrides = _yaml(ov_path, job, list) if ov_path.exists() else []
    return choices, [str(o) for o in overrides]


def job_info(job: Path, root: Path | None = None) -> dict[str, Any]:
    """Group choices, variant, seed of one job dir (the launch that wrote its rows: :func:`launch`)."""
    choices, overrides = launch(job)
    seed = None
    for name in ("config.yaml", ".hydra/config.yaml"):
        if (job / name).exists():
            seed = _yaml(job / name, job, dict).get("seed")
            if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
                raise Malformed(f"{job.name}/{name}: seed is {seed!r}, expected an integer")
            break
    variant = []
    for o in overrides:
        key = o.split("=", 1)[0].lstrip("+~")
        if key in GROUPS or key in ("seed", "tracking", "experiment") or key.startswith("hydra."):
            continue
        if any(key == k or key.startswith(k + ".") for k in NOT_FINGERPRINTED):
            continue  # how the run went (resume=false, example_workers=2), not what it computed
        variant.append(o)
    try:
        rel = str(job.relative_to(root)) if root is not None else job.name
    except ValueError:
        rel = job.name
    info = {"job": rel if rel != "." else job.name, "variant": ",".join(sorted(variant)), "seed": seed}
    for g in GROUPS:
        info[g] = None if choices.get(g) is None else str(choices.get(g))
    # the other config groups a job chose (judge, graphdb, ...): a sweep over them must not be
    # averaged either; hydra's own groups and the run's bookkeeping are not table axes
    info["_choices"] = {str(k): str(v) for k, v in choices.items()
                        if k not in GROUPS and v is not None and not str(k).startswith("hydra")
                        and k not in ("tracking", "experiment", "local", "pairing")}  # pairing: set by dataset+kg
    info["_params"] = dict(o.split("=", 1) if "=" in o else (o, "") for o in variant)
    return info


def _rel(job: Path, root: Path) -> str:
    try:
        rel = str(job.relative_to(root))
    except ValueError:
        rel = job.name
    return rel if rel != "." else job.name


def _infos(root: Path, bad: list[dict[str, str]] | None = None) -> list[tuple[Path, dict[str, Any]]]:
    """``job_info`` of every job, with overrides shared by *all* jobs removed from ``variant``
    (e.g. ``dataset.limit=8`` given once for the whole sweep). A job dir whose files cannot be
    read is left out, and listed in ``bad`` as ``{"job", "reason"}`` (the reason names the file)."""
    infos = []
    for job in job_dirs(root):
        try:
            infos.append((job, job_info(job, root)))
        except Malformed as e:
            if bad is not None:
                bad.append({"job": _rel(job, root), "reason": str(e)})
    if len(infos) > 1:
        sets = [set(filter(None, i["variant"].split(","))) for _, i in infos]
        common = set.intersection(*sets)
        for (_, info), items in zip(infos, sets):
            info["variant"] = ",".join(sorted(items - common))
    # one column per override key or extra group that differs across jobs (e.g. reasoner.width),
    # so that --rows/--cols can name it and no two settings are ever averaged together
    for kind in ("_params", "_choices"):
        keys = sorted({k for _, i in infos for k in i[kind]})
        for k in keys:
            values = {i[kind].get(k) for _, i in infos}
            if len(values) > 1:
                for _, i in infos:
                    i[k] = i[kind].get(k)
        for _, i in infos:
            del i[kind]
    return infos


def _get(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


@dataclass
class Job:
    """One job dir as the tables see it."""
    path: Path
    name: str
    info: dict[str, Any]
    metrics: dict[str, float] = field(default_factory=dict)   # the finite numbers of metrics.json
    partial: bool = False
    n_examples: float | None = None
    n_expected: float | None = None
    errors: int | None = None          # run/errors, else counted from predictions.jsonl
    sampled_calls: float | None = None  # llm/sampled_calls (None: not recorded)
    rows: RunRows | None = None
    failed: str | None = None          # the reason of a failed.json beside the metrics.json
    fingerprint: str | None = None     # run.json's config fingerprint: repeats of one configuration share it
    finished: float = 0.0              # when its metrics.json was last written (mtime): the newest repeat wins
    funnel_stages: list[str] | None = None  # metrics.json funnel/_stages: the reasoner's stage order (kgreason/metrics/funnel.py)

    def partial_text(self) -> str:
        if self.n_examples is not None and self.n_expected is not None:
            s = f"{self.name} ({int(self.n_examples)}/{int(self.n_expected)} examples"
        else:
            s = f"{self.name} (run/partial"
        return s + (f"; {self.failed})" if self.failed else ")")

    def failed_text(self) -> str:
        return f"{self.name} ({self.failed})"


@dataclass
class Collected:
    """What :func:`gather` found: the tidy frame, the jobs without metrics (``{"job", "reason"}``),
    every job with metrics by name, and one line per problem found in their files."""
    df: pd.DataFrame
    missing: list[dict[str, str]]
    jobs: dict[str, Job]
    warnings: list[str]
    fingerprints: dict[str, str] = field(default_factory=dict)  # job name -> run.json fingerprint (missing jobs too)


def _failure_reason(job: Path, rows: RunRows | None = None) -> str:
    """Why a job dir has no ``metrics.json``: its ``failed.json`` reason, else its errored
    examples, else the last error line of its log."""
    marker = job / "failed.json"
    if marker.exists():
        try:
            doc = json.loads(marker.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as e:
            return f"{job.name}/failed.json: unreadable failure marker ({e})"
        if isinstance(doc, dict) and doc.get("reason"):
            return f"failed ({doc.get('stage') or '?'}): {str(doc['reason'])[:300]}"
        return f"{job.name}/failed.json: a failure marker without a reason"
    stopped = job / "prepare_stopped.json"  # Ctrl-C / SIGTERM in the run's set-up (kgreason/runner/run.py)
    if stopped.is_file():
        try:
            doc = json.loads(stopped.read_text(encoding="utf-8"))
            where = doc.get("progress") or {}
            got = f" ({where['what']}: {where['done']} of {where['total']} {where['unit']})" if where else ""
            return (f"stopped by {doc.get('interrupted_by', '?')} while preparing{got}, before its "
                    "examples; the same command resumes it")
        except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError, AttributeError) as e:
            return f"{job.name}/prepare_stopped.json: unreadable ({e})"
    pred = job / "predictions.jsonl"
    if rows is None and pred.is_file():
        try:
            rows = read_rows(pred)
        except OSError as e:
            return f"{job.name}/predictions.jsonl: unreadable ({e}); no metrics.json"
    if rows is not None and rows.errors:
        return f"{rows.errors}/{len(rows.ids)} examples errored, e.g. {rows.error_example}"
    for log in sorted(job.glob("*.log")):
        lines = [ln for ln in log.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
        bad = [ln for ln in lines if "Error" in ln or "Exception" in ln or "RunFailed" in ln]
        if bad:
            return bad[-1].strip()[:300]
    if pred.exists():
        return "no metrics.json (run interrupted?)"
    return "no metrics.json and no predictions (not started?)"


def run_fingerprint(job: Path) -> str | None:
    """The config fingerprint of ``job``'s ``run.json`` (kgreason/record.py), or None (no record,
    an older run dir, unreadable: such a dir is never taken for a repeat of another)."""
    try:
        fp = json.loads((job / "run.json").read_text(encoding="utf-8")).get("fingerprint")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return None
    return fp if isinstance(fp, str) and fp else None


def _read_metrics(mpath: Path, name: str) -> tuple[dict[str, Any] | None, str | None]:
    where = f"{name}/metrics.json"
    try:
        doc = json.loads(mpath.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        return None, f"{where}: unreadable ({e})"
    except json.JSONDecodeError as e:
        return None, f"{where}: invalid JSON ({e.msg}, line {e.lineno})"
    if not isinstance(doc, dict):
        return None, f"{where}: expected a JSON object of metric: value, got {type(doc).__name__}"
    return doc, None


def _dataset_metrics(job: Path) -> list[str]:
    """The run's ``dataset.metrics`` (its ``config.yaml``), headline first; [] where unreadable."""
    for name in ("config.yaml", ".hydra/config.yaml"):
        p = job / name
        if p.is_file():
            try:
                names = _get(_load_yaml(p), "dataset", "metrics")
            except (OSError, UnicodeDecodeError, yaml.YAMLError):
                return []
            return [str(m) for m in names] if isinstance(names, list) else []
    return []


def _in_dataset_order(doc: dict[str, Any], job: Path) -> list[tuple[str, Any]]:
    """``metrics.json``'s items with the ``metric/*`` keys in the run's ``dataset.metrics`` order
    (the file itself is written with sorted keys), the other keys after them as written."""
    order = {f"metric/{m}": i for i, m in enumerate(_dataset_metrics(job))}
    return sorted(doc.items(), key=lambda kv: (0, order[kv[0]]) if kv[0] in order else (1, 0))


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def gather(root: str | Path, keep_hops: bool = False) -> Collected:
    """Every job under ``root``: metrics, state and per-question values, each file read once."""
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"{root}: no such run/multirun dir")
    missing: list[dict[str, str]] = []
    infos = _infos(root, missing)
    rows: list[dict[str, Any]] = []
    jobs: dict[str, Job] = {}
    warnings: list[str] = []
    fingerprints: dict[str, str] = {}
    for path, info in infos:
        name = info["job"]
        fp = run_fingerprint(path)
        if fp is not None:
            fingerprints[name] = fp
        pred = path / "predictions.jsonl"
        run_rows = None
        if pred.exists():
            try:
                run_rows = read_rows(pred, keep_hops)
            except OSError as e:
                warnings.append(f"{name}/predictions.jsonl: unreadable ({e})")
            else:
                warnings += run_rows.messages(f"{name}/predictions.jsonl")
        mpath = path / "metrics.json"
        if not mpath.exists():
            missing.append({"job": name, "reason": _failure_reason(path, run_rows)})
            continue
        doc, why = _read_metrics(mpath, name)
        if doc is None:
            missing.append({"job": name, "reason": why})
            continue
        job = Job(path, name, info, rows=run_rows, fingerprint=fp, finished=mpath.stat().st_mtime)
        for k, v in _in_dataset_order(doc, path):
            if k.startswith(MEASURES) and k != STAGES_KEY and v is not None and not isinstance(v, (int, float)):
                warnings.append(f"{name}/metrics.json: {k} is {str(v)[:40]!r} (not a number): left out of the table")
                continue
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                if not math.isfinite(v):
                    warnings.append(f"{name}/metrics.json: {k} is {v} (not a finite number): left out of the table")
                    continue
                job.metrics[k] = float(v)
                rows.append({**info, "metric": k, "value": float(v)})
        stages = doc.get("funnel/_stages")
        if isinstance(stages, list):
            job.funnel_stages = [str(x) for x in stages]
        m = job.metrics
        job.n_examples, job.n_expected = m.get("run/n_examples"), m.get("run/n_expected")
        if (path / "failed.json").exists():  # failed after writing metrics.json (e.g. the error-rate check)
            job.failed = _failure_reason(path, run_rows)
        job.partial = (doc.get("run/partial") in (True, "true") or doc.get("run/status") == "partial"
                       or (job.n_examples is not None and job.n_expected is not None
                           and job.n_examples < job.n_expected))
        if "run/errors" in m:
            job.errors = int(m["run/errors"])
        elif run_rows is not None:
            job.errors = run_rows.errors
        job.sampled_calls = m.get("llm/sampled_calls")
        jobs[name] = job
    extra = sorted({k for r in rows for k in r} - set(TIDY_COLUMNS))
    df = pd.DataFrame(rows, columns=TIDY_COLUMNS[:-3] + extra + TIDY_COLUMNS[-3:])
    return Collected(df, missing, jobs, warnings, fingerprints)


def collect(root: str | Path) -> tuple[pd.DataFrame, list[dict[str, str]]]:
    """Tidy metrics of every job under ``root``, and the jobs that have no metrics.

    Returns:
        ``(df, missing)``: ``df`` has columns :data:`TIDY_COLUMNS` (one row per job × metric
        key of ``metrics.json``, e.g. ``metric/hits_at_1``, ``llm/calls``; non-finite values left
        out); ``missing`` is a list of ``{"job", "reason"}`` (a failed run's ``failed.json``
        reason, or the file that could not be read).
    """
    c = gather(root)
    return c.df, c.missing


def collect_examples(root: str | Path) -> pd.DataFrame:
    """Per-example tidy frame: job info + ``id, gold_hops, kg_hops, metric, value``.

    ``gold_hops`` is the dataset's stated hop count; ``kg_hops`` the shortest query→gold distance
    from the job's ``hops.json`` (None if unreachable/unlinked or not computed). For notebooks: the
    tables themselves keep the compact per-question arrays (:func:`gather`)."""
    root = Path(root)
    out: list[dict[str, Any]] = []
    for job, info in _infos(root):
        pred = job / "predictions.jsonl"
        if not pred.exists():
            continue
        kg_hops = {}
        if (job / "hops.json").exists():
            try:
                kg_hops = _get(json.loads((job / "hops.json").read_text()), "per_example") or {}
            except ValueError:
                kg_hops = {}
        r = read_rows(pred, keep_hops=True)
        for k, qid in enumerate(r.ids):
            for m, vals in r.values.items():
                v = vals[k]
                out.append({**info, "id": qid, "gold_hops": r.gold_hops[k], "kg_hops": kg_hops.get(qid),
                            "metric": m, "value": None if math.isnan(v) else float(v)})
    cols = ["job", *GROUPS, "variant", "seed", "id", "gold_hops", "kg_hops", "metric", "value"]
    return pd.DataFrame(out, columns=cols)
