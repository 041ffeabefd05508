"""The paper's values beside ours (``--paper``): ``experiments/<preset>/paper.yaml`` and the matching runs."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from kgreason import stats
from kgreason.tables.cells import CIOptions, _metric_key, cell_questions
from kgreason.tables.collect import Malformed, _load_yaml, job_dirs, launch


def _experiment_of(root: Path) -> str | None:
    names = set()
    for job in job_dirs(root):
        try:
            exp = launch(job)[0].get("experiment")
        except Malformed:
            continue  # listed by collect with its reason
        if exp:
            names.add(str(exp))
    return names.pop() if len(names) == 1 else None


def paper_file(preset: str) -> Path:
    """``experiments/<preset>/paper.yaml`` of the clone (or the working directory)."""
    from kgreason.paths import repo_root

    for base in filter(None, [repo_root(), Path.cwd()]):
        p = base / "experiments" / preset / "paper.yaml"
        if p.is_file():
            return p
    raise FileNotFoundError(f"--paper: no experiments/{preset}/paper.yaml (presets with the paper's values: "
                            f"{', '.join(paper_presets()) or 'none'})")


def paper_presets() -> list[str]:
    from kgreason.paths import repo_root

    root = repo_root() or Path.cwd()
    return sorted(p.parent.name for p in (root / "experiments").glob("*/paper.yaml"))


PAPER_FIELDS = ("table", "row", "column", "index", "value", "model", "cite", "metric", "overrides")


def load_paper(path: str | Path) -> dict[str, Any]:
    """A ``paper.yaml``: ``paper``, ``source`` (file under shared/papers), ``scale`` (paper unit →
    kgreason's 0–1), ``decimals``, ``entries`` (each with :data:`PAPER_FIELDS`), and ``note``
    (printed under the table; required when ``entries`` is empty, e.g. a figure-only preset)."""
    path = Path(path)
    doc = _load_yaml(path) or {}
    for k in ("paper", "source", "scale", "decimals", "entries"):
        if k not in doc:
            raise ValueError(f"{path}: missing top-level field {k!r}")
    if not doc["entries"] and not str(doc.get("note") or "").strip():
        raise ValueError(f"{path}: 'entries' is empty: give a 'note' saying why (e.g. values shown only as a figure)")
    for i, e in enumerate(doc["entries"]):
        miss = [f for f in PAPER_FIELDS if f not in e]
        if miss:
            raise ValueError(f"{path}: entry {i} ({e.get('row')!r} / {e.get('column')!r}) lacks {', '.join(miss)}")
    return doc


def _job_model(root: Path, job: str) -> str | None:
    cfg = _load_yaml(root / job / "config.yaml") if (root / job / "config.yaml").exists() else None
    return (((cfg or {}).get("llm") or {}).get("model")) if isinstance(cfg, dict) else None


def _job_value(root: Path, job: str, key: str):
    p = root / job / "config.yaml"
    cur: Any = _load_yaml(p) if p.exists() else None
    for part in key.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def _setting_str(v: Any) -> str:
    """A setting as the command line spells it: YAML's False (config, paper.yaml) and the override
    ``false`` (a swept column) compare equal."""
    s = str(v)
    return s.lower() if s in ("True", "False") else s


def _job_setting(root: Path, job: str, key: str):
    """A config group's option as the job chose it (``judge`` → ``pdsqi``, from the record of the
    launch: :func:`~kgreason.tables.collect.launch`), else the value at ``key`` in its config
    (``reasoner.hops`` → 5)."""
    if "." not in key:
        try:
            choices = launch(root / job)[0]
        except Malformed:
            choices = {}
        if choices.get(key) is not None:
            return choices[key]
    return _job_value(root, job, key)


def paper_comparison(root: str | Path, df: pd.DataFrame, examples: pd.DataFrame | None, preset: str | None = None,
                     ci: CIOptions | None = None) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Per paper cell of the preset's ``paper.yaml``: the paper's value, ours (mean over the
    matching runs, with the bootstrap interval over questions), the difference, and both models."""
    root = Path(root)
    ci = ci or CIOptions()
    preset = preset or _experiment_of(root)
    if not preset:
        raise ValueError("--paper: the sweep was not run with one experiment=<preset>; name it: --paper PRESET "
                         f"(one of {', '.join(paper_presets())})")
    doc = load_paper(paper_file(preset))
    scale = float(doc["scale"])
    out = []
    for e in doc["entries"]:
        sub = df[df["metric"] == _metric_key(e["metric"])]
        for k, v in (e.get("overrides") or {}).items():
            if k in sub.columns:
                sub = sub[sub[k].fillna("").map(_setting_str) == _setting_str(v)]
            else:  # a setting every job shares has no column: the job's Hydra choice, else its config
                keep = [_setting_str(_job_setting(root, j, k)) == _setting_str(v) for j in sub["job"]]
                sub = sub.loc[pd.Series(keep, index=sub.index, dtype=bool)]
        row = {"table": e["table"], "row": e["row"], "column": e["column"], "paper": float(e["value"]) * scale,
               "paper_model": e["model"], "cite": e["cite"], "metric": e["metric"], "ours": math.nan,
               "lo": math.nan, "hi": math.nan, "runs": len(sub), "questions": math.nan, "our_model": None}
        if len(sub):
            row["ours"] = float(sub["value"].mean())
            models = sorted({str(m) for m in (_job_model(root, j) for j in sub["job"]) if m is not None})
            row["our_model"] = ", ".join(models) or None
            if examples is not None and ci.kind == "bootstrap":
                q = cell_questions(sub.assign(_cell="all"), examples, ["_cell"]).get(("all",))
                q = None if q is None else q.dropna()
                if q is not None and len(q):
                    iv = stats.bootstrap_ci(q.to_numpy(), ci.B, ci.level, ci.seed)
                    row.update(lo=iv.lo, hi=iv.hi, questions=iv.n)
        out.append(row)
    return pd.DataFrame(out), {**doc, "preset": preset}


def render_paper(comp: pd.DataFrame, doc: Mapping[str, Any], ci: CIOptions | None = None, digits: int = 3) -> str:
    ci = ci or CIOptions()
    title = f"{doc['paper']} (experiment={doc['preset']}): the paper's values beside ours"
    if not len(comp):  # a figure-only preset: its paper.yaml says why there is nothing to compare
        return f"{title}\n\nNo paper values: {doc.get('note') or 'the paper.yaml enters none'}\n"
    lines = [title, "",
             f"| table | row | column | paper | ours [{ci.level:.0%} CI] | ours − paper | model |",
             "|---|---|---|---|---|---|---|"]
    for _, r in comp.iterrows():
        if pd.isna(r["ours"]):
            ours, diff = "not run", "–"
        else:
            ours = f"{r['ours']:.{digits}f}"
            if not pd.isna(r["lo"]):
                ours += f" [{r['lo']:.{digits}f}, {r['hi']:.{digits}f}]"
            diff = f"{r['ours'] - r['paper']:+.{digits}f}"
            if not pd.isna(r["lo"]) and r["lo"] <= r["paper"] <= r["hi"]:
                diff += " (paper inside CI)"
        if r["our_model"] is None:
            model = f"paper: {r['paper_model']}"
        elif str(r["our_model"]) == str(r["paper_model"]):
            model = f"{r['paper_model']} (same)"
        else:
            model = f"**differs**: ours {r['our_model']}, paper {r['paper_model']}"
        lines.append(f"| {r['table']} | {r['row']} | {r['column']} ({r['metric']}) | {r['paper']:.{digits}f} | "
                     f"{ours} | {diff} | {model} |")
    lines += ["", f"Paper values from {doc['source']} ({doc['paper']}), as printed × {doc['scale']} "
                  "(to kgreason's scale: rates 0–1; PDSQI-9 scores stay 1–5); cited per row in the preset's "
                  "paper.yaml. Ours: the mean over the "
                  f"matching runs (seeds), [lo, hi] the {ci.level:.0%} bootstrap interval over questions. A model "
                  "that differs from the paper's is marked: the difference then mixes model and method."]
    if doc.get("note"):
        lines += ["", f"Note ({doc['preset']}/paper.yaml): {doc['note']}"]
    return "\n".join(lines) + "\n"
