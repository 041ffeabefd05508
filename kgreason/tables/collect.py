"""Collecting runs: the Hydra job dirs of a run or sweep, their group choices and overrides,
``metrics.json`` as a tidy frame, and the per-example rows of ``predictions.jsonl``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

GROUPS = ("dataset", "reasoner", "ablation", "llm", "kg", "retriever")
TIDY_COLUMNS = ["job", *GROUPS, "variant", "seed", "metric", "value"]


def job_dirs(root: str | Path) -> list[Path]:
    """Every Hydra job dir under ``root`` (``root`` itself for a single run), sorted."""
    root = Path(root)
    found = {p.parent.parent for p in root.rglob(".hydra/hydra.yaml")}
    return sorted(found, key=lambda p: (len(p.parts), _job_sort_key(p)))


def _job_sort_key(p: Path):
    head = p.name.split("_", 1)[0]
    return (int(head), p.name) if head.isdigit() else (10**9, p.name)


def _load_yaml(path: Path) -> Any:
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def job_info(job: Path, root: Path | None = None) -> dict[str, Any]:
    """Group choices, variant, seed of one job dir."""
    hydra_cfg = (_load_yaml(job / ".hydra" / "hydra.yaml") or {}).get("hydra", {})
    choices = (hydra_cfg.get("runtime") or {}).get("choices") or {}
    ov_path = job / ".hydra" / "overrides.yaml"
    overrides = [str(o) for o in (_load_yaml(ov_path) or [])] if ov_path.exists() else []
    seed = None
    for name in ("config.yaml", ".hydra/config.yaml"):
        if (job / name).exists():
            seed = (_load_yaml(job / name) or {}).get("seed")
            break
    variant = []
    for o in overrides:
        key = o.split("=", 1)[0].lstrip("+~")
        if key in GROUPS or key in ("seed", "tracking", "experiment") or key.startswith("hydra."):
            continue
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
                        and k not in ("tracking", "experiment", "local")}
    info["_params"] = dict(o.split("=", 1) if "=" in o else (o, "") for o in variant)
    return info


def _infos(root: Path) -> list[tuple[Path, dict[str, Any]]]:
    """``job_info`` of every job, with overrides shared by *all* jobs removed from ``variant``
    (e.g. ``dataset.limit=8`` given once for the whole sweep)."""
    infos = [(job, job_info(job, root)) for job in job_dirs(root)]
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


def _pred_rows(pred: Path, errors: str = "strict") -> list[dict[str, Any]]:
    """A ``predictions.jsonl``'s rows, the last per id winning (kgreason/runs.py)."""
    from kgreason.runs import last_rows

    rows = []
    for line in pred.read_text(encoding="utf-8", errors=errors).splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return last_rows(rows)


def _failure_reason(job: Path) -> str:
    pred = job / "predictions.jsonl"
    if pred.exists():
        n, errors = 0, []
        for row in _pred_rows(pred, errors="replace"):  # the last row per id (retried errors)
            n += 1
            if row.get("error"):
                errors.append(str(row["error"]))
        if errors:
            return f"{len(errors)}/{n} examples errored, e.g. {errors[0][:200]}"
    for log in sorted(job.glob("*.log")):
        lines = [ln for ln in log.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
        bad = [ln for ln in lines if "Error" in ln or "Exception" in ln or "RunFailed" in ln]
        if bad:
            return bad[-1].strip()[:300]
    if pred.exists():
        return "no metrics.json (run interrupted?)"
    return "no metrics.json and no predictions (not started?)"


def collect(root: str | Path) -> tuple[pd.DataFrame, list[dict[str, str]]]:
    """Tidy metrics of every job under ``root``, and the jobs that have no metrics.

    Returns:
        ``(df, missing)``: ``df`` has columns :data:`TIDY_COLUMNS` (one row per job × metric
        key of ``metrics.json``, e.g. ``metric/hits_at_1``, ``llm/calls``); ``missing`` is a
        list of ``{"job", "reason"}``.
    """
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"{root}: no such run/multirun dir")
    rows: list[dict[str, Any]] = []
    missing: list[dict[str, str]] = []
    for job, info in _infos(root):
        mpath = job / "metrics.json"
        if not mpath.exists():
            missing.append({"job": info["job"], "reason": _failure_reason(job)})
            continue
        try:
            metrics = json.loads(mpath.read_text())
        except json.JSONDecodeError as e:
            missing.append({"job": info["job"], "reason": f"{mpath}: invalid JSON ({e.msg})"})
            continue
        for k, v in metrics.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                rows.append({**info, "metric": k, "value": float(v)})
    extra = sorted({k for r in rows for k in r} - set(TIDY_COLUMNS))
    return pd.DataFrame(rows, columns=TIDY_COLUMNS[:-3] + extra + TIDY_COLUMNS[-3:]), missing


def collect_examples(root: str | Path) -> pd.DataFrame:
    """Per-example tidy frame: job info + ``id, gold_hops, kg_hops, metric, value``.

    ``gold_hops`` is the dataset's stated hop count; ``kg_hops`` the shortest query→gold distance
    from the job's ``hops.json`` (None if unreachable/unlinked or not computed).
    """
    root = Path(root)
    out: list[dict[str, Any]] = []
    for job, info in _infos(root):
        pred = job / "predictions.jsonl"
        if not pred.exists():
            continue
        kg_hops = {}
        if (job / "hops.json").exists():
            kg_hops = json.loads((job / "hops.json").read_text()).get("per_example", {})
        for r in _pred_rows(pred):
            for m, v in (r.get("metrics") or {}).items():
                out.append({**info, "id": r["id"], "gold_hops": r.get("hops"), "kg_hops": kg_hops.get(r["id"]),
                            "metric": m, "value": None if v is None else float(v)})
    cols = ["job", *GROUPS, "variant", "seed", "id", "gold_hops", "kg_hops", "metric", "value"]
    return pd.DataFrame(out, columns=cols)
