"""Paper tables from run / multirun dirs, and the hop-distribution plot.

``kgreason tables RUN_OR_MULTIRUN_DIR [--rows reasoner,ablation] [--cols dataset,metric]
[--metrics hits_at_1,f1] [--ci bootstrap|none] [--boot 2000] [--ci-level 0.95]
[--baseline reasoner=io] [--paper [PRESET]] [--out DIR]``

* :func:`collect` walks the dir for Hydra job dirs (those with ``.hydra/hydra.yaml``) and returns
  a tidy DataFrame, one row per (job, metric): ``job, dataset, reasoner, ablation, llm, kg,
  retriever, variant, seed, metric, value``. Group choices come from ``hydra.runtime.choices``;
  ``variant`` is the job's remaining overrides (``.hydra/overrides.yaml`` minus group choices,
  ``seed`` and ``hydra.*``), so ``reasoner.hops=1,2`` sweeps stay apart; ``seed`` from the job's
  config. Job dirs without ``metrics.json`` are returned as *missing* with the reason found in
  ``predictions.jsonl`` / the job log.
* :func:`pivot` averages over seeds only: ``mean``, ``std`` (sample std, 0 for one seed) and
  ``n`` per cell; given the per-example frame (:func:`collect_examples`, from each run's
  ``predictions.jsonl``, the last row per id winning) it adds ``lo``/``hi``/``q``: the
  percentile bootstrap interval of the cell's mean over its ``q`` questions
  (:mod:`kgreason.stats`; with several seeds each question's value is its mean over the seeds,
  so questions, not seeds, are resampled, and the seed spread stays in ``std``). Every group
  choice or override that differs across the sweep is a table axis (:func:`table_axes` adds the
  ones ``--rows``/``--cols`` do not name to the rows); numeric values sort as numbers, metrics in
  the ``--metrics`` order (else ``metrics.json``'s); :func:`caption` says what ``±`` and
  ``[lo, hi]`` are over.
* :func:`render_markdown` / :func:`render_latex` / :func:`render_csv` format
  ``mean ± std [lo, hi]`` and bold the best cell per column (per metric) using
  ``METRICS[m].higher_is_better``; :func:`write_tables` drops columns constant in every row into
  the caption and warns when the seeds changed nothing.
* :func:`paired_comparisons` (``--baseline AXIS=VALUE``): each row minus its baseline row on the
  same questions, paired-bootstrap interval and p-value, McNemar's exact p for 0/1 metrics;
  rows that answered different questions are refused, naming the mismatch.
* :func:`paper_comparison` (``--paper``): the paper's values (``experiments/<preset>/paper.yaml``)
  beside ours with our interval and the difference, the models labelled.
* :func:`collect_examples` gives the per-example tidy frame (with the KG hop distance from
  ``hops.json``) used by notebooks/analysis.ipynb.
* :func:`plot_hops` draws ``hops.json`` counts as a bar chart (:func:`hops_figure`: a bare matplotlib Figure, no backend forced).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd
import yaml

from kgreason import stats
from kgreason.metrics import higher_is_better

GROUPS = ("dataset", "reasoner", "ablation", "llm", "kg", "retriever")
TIDY_COLUMNS = ["job", *GROUPS, "variant", "seed", "metric", "value"]


# ----------------------------------------------------------------------------- collect
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


# ----------------------------------------------------------------------------- pivot
def _metric_filter(df: pd.DataFrame, metrics: Sequence[str] | None) -> pd.DataFrame:
    if metrics:
        want = {m if "/" in m else f"metric/{m}" for m in metrics}
        df = df[df["metric"].isin(want)]
    else:
        df = df[df["metric"].str.startswith("metric/")]
    return df


@dataclass(frozen=True)
class CIOptions:
    """How cells get their interval: ``kind`` ``bootstrap`` (percentile, over questions) or
    ``none``; ``B`` resamples, ``level``, ``seed`` of the resampling."""
    kind: str = "bootstrap"
    B: int = stats.DEFAULT_B
    level: float = stats.DEFAULT_LEVEL
    seed: int = stats.DEFAULT_SEED

    def __post_init__(self):
        if self.kind not in ("bootstrap", "none"):
            raise ValueError(f"--ci must be 'bootstrap' or 'none', got {self.kind!r}")
        if self.kind == "bootstrap":
            stats._check(self.level, self.B)


def _metric_key(m: str) -> str:
    return m if "/" in m else f"metric/{m}"


def prepare(df: pd.DataFrame, rows: Sequence[str], cols: Sequence[str],
            metrics: Sequence[str] | None = None) -> pd.DataFrame:
    """The tidy frame restricted to ``metrics`` with every axis of ``rows + cols`` as an ordered
    categorical of strings (``variant`` rebuilt from the overrides no other axis names). The
    ``metric`` axis keeps the order ``metrics`` gives (``--metrics f1,em``: f1 first)."""
    d = _metric_filter(df, metrics).copy()
    if d.empty:
        raise ValueError("no metric values to tabulate (check --metrics and that the runs finished)")
    params = _param_columns(d)
    if "variant" in list(rows) + list(cols):  # what no other axis names: the remaining swept overrides
        rest = [p for p in params if p not in list(rows) + list(cols)]
        d["variant"] = [",".join(f"{p}={r[p]}" for p in rest if isinstance(r[p], str) and r[p] != "")
                        for _, r in d[rest].iterrows()] if rest else ""
    for c in list(rows) + list(cols):
        if c == "metric":  # the order asked for, else metrics.json's (the preset's dataset.metrics)
            order = list(dict.fromkeys(_metric_key(m) for m in metrics or []))
            order += [m for m in dict.fromkeys(d[c].astype(str)) if m not in order]
            d[c] = pd.Categorical(d[c].astype(str), categories=[m for m in order if m in set(d[c])], ordered=True)
        else:
            d[c] = _ordered(d[c].fillna("").astype(str))
    return d


def cell_questions(d: pd.DataFrame, examples: pd.DataFrame | None, keys: Sequence[str]) -> dict[tuple, pd.Series]:
    """Per-question values of every cell (a group of ``d`` by ``keys``): ``{cell key: Series
    indexed by example id}``, each question's value being its mean over the cell's runs (seeds)
    that scored it; NaN for a question the cell answered but the metric did not apply to
    (``None`` in every run). Cells whose runs wrote no per-example values are absent."""
    out: dict[tuple, pd.Series] = {}
    if examples is None or examples.empty:
        return out
    ex = examples
    by_job = {j: g for j, g in ex.groupby("job", sort=False)}
    for key, sub in d.groupby(list(keys), observed=True, sort=True):
        key = tuple(map(str, key if isinstance(key, tuple) else (key,)))
        names = set(sub["metric"])
        if len(names) != 1:
            continue
        m = next(iter(names))
        if not str(m).startswith("metric/"):
            continue
        m = str(m).removeprefix("metric/")
        parts = [g[g["metric"] == m] for j in dict.fromkeys(sub["job"]) if (g := by_job.get(j)) is not None]
        parts = [p for p in parts if not p.empty]
        if not parts:
            continue
        e = pd.concat(parts)
        out[key] = e.groupby("id", sort=False)["value"].mean()  # dataset order: the draw is reproducible
    return out


def pivot(df: pd.DataFrame, rows: Sequence[str] = ("reasoner", "ablation", "variant"),
          cols: Sequence[str] = ("dataset", "metric"), metrics: Sequence[str] | None = None,
          examples: pd.DataFrame | None = None, ci: CIOptions | None = None) -> pd.DataFrame:
    """Mean ± std over seeds (and any column not in rows/cols); with ``examples``
    (:func:`collect_examples`) and ``ci`` (default: bootstrap, B = 2,000, 95 %), each cell also
    gets the percentile bootstrap interval of its mean over questions.

    Returns:
        DataFrame indexed by ``rows``, with a column MultiIndex ``(stat, *cols)`` where stat is
        ``mean`` | ``std`` | ``n`` (runs, i.e. seeds), and with an interval ``lo`` | ``hi`` |
        ``q`` (questions) wherever per-example values exist.
    """
    rows, cols = table_axes(df, rows, cols)
    d = prepare(df, rows, cols, metrics)
    g = d.groupby(rows + cols, sort=True, observed=True)["value"]
    st = pd.DataFrame({"mean": g.mean(), "std": g.std(ddof=1).fillna(0.0), "n": g.count()})
    ci = ci or CIOptions()
    if examples is not None and ci.kind == "bootstrap":
        qs = cell_questions(d, examples, rows + cols)
        if qs:
            res = {k: stats.bootstrap_ci(v.dropna().to_numpy(), ci.B, ci.level, ci.seed)
                   for k, v in qs.items() if v.notna().any()}
            keys = [k if isinstance(k, tuple) else (k,) for k in st.index]
            st["lo"] = [res[k].lo if k in res else math.nan for k in keys]
            st["hi"] = [res[k].hi if k in res else math.nan for k in keys]
            st["q"] = [res[k].n if k in res else math.nan for k in keys]
    wide = st.unstack(cols) if cols else st
    return wide


def _param_columns(df: pd.DataFrame) -> list[str]:
    """Columns :func:`collect` added for swept overrides and extra groups."""
    return [c for c in df.columns if c not in TIDY_COLUMNS]


def table_axes(df: pd.DataFrame, rows: Sequence[str], cols: Sequence[str]) -> tuple[list[str], list[str]]:
    """The row and column axes of the table: the ones asked for, plus every axis whose value
    differs across jobs (a group choice such as ``kg``, or a swept override such as
    ``reasoner.width``) that neither names, appended to the rows. Cells then average over seeds
    only, never over two settings (a sweep over two KGs is two rows, not ``mean ± std``)."""
    rows, cols = list(rows), list(cols)
    known = [c for c in df.columns if c not in ("value", "job", "seed")]
    bad = [c for c in rows + cols if c not in known]
    if bad:
        raise KeyError(f"unknown table axes {bad}; choose from {known}")
    placed = set(rows + cols)
    params = _param_columns(df)
    covered = set(params) if "variant" in placed else set()
    for c in [*GROUPS, *params]:
        if c in placed or c in covered:
            continue
        if df[c].fillna("").astype(str).nunique() > 1:
            rows.append(c)
    return rows, cols


def _ordered(values: pd.Series) -> pd.Series:
    """A categorical whose order sorts numbers as numbers (``2 < 10``), then text."""
    def key(v: str):
        try:
            return (0, float(v), v)
        except ValueError:
            return (1, 0.0, v)

    cats = sorted(set(values), key=key)
    return pd.Categorical(values, categories=cats, ordered=True)


def caption(df: pd.DataFrame, wide: pd.DataFrame, ci: CIOptions | None = None,
            seed_spread: bool = True) -> str:
    """What a cell is: the mean over seeds, what its ``±`` is, and what its ``[lo, hi]`` is over."""
    seeds = sorted({int(s) for s in df["seed"].dropna()}) if "seed" in df else []
    n = wide["n"].max().max() if not wide.empty else 0
    has_ci = "lo" in wide.columns.get_level_values(0)
    parts = []
    if n is None or pd.isna(n) or int(n) <= 1 or not seed_spread:
        parts.append("Each cell is one run (no ± shown)." if seed_spread or not n or int(n) <= 1 else
                     f"Each cell is the mean over the seeds of one setting ({len(seeds)} seed(s): "
                     f"{', '.join(map(str, seeds))}, identical results: no ± shown).")
    else:
        parts.append(f"Each cell is the mean over the seeds of one setting ({len(seeds)} seed(s) in the sweep: "
                     f"{', '.join(map(str, seeds))}); ± is the sample standard deviation over those seeds "
                     "(ddof=1), the seed spread.")
    if has_ci:
        ci = ci or CIOptions()
        q = wide["q"].stack(list(range(wide["q"].columns.nlevels)), future_stack=True) \
            if isinstance(wide["q"], pd.DataFrame) else wide["q"]
        q = q.dropna()
        nq = (f"{int(q.min())}" if q.min() == q.max() else f"{int(q.min())}–{int(q.max())}") if len(q) else "?"
        over = ("each question's value averaged over the seeds first, the same question resampled for every seed"
                if n and not pd.isna(n) and int(n) > 1 else "one run's per-question values")
        parts.append(f"[lo, hi] is the {ci.level:.0%} percentile bootstrap interval of the mean over the "
                     f"cell's {nq} questions (B = {ci.B:,} resamples of the questions, seed {ci.seed}; "
                     f"{over}); it is over questions, not seeds.")
        if wide["lo"].isna().any().any():
            parts.append("Cells without [lo, hi] have no per-example values in predictions.jsonl.")
    return " ".join(parts)


def _best_mask(wide: pd.DataFrame, rows: Sequence[str], cols: Sequence[str]) -> pd.DataFrame:
    """Boolean frame shaped like ``wide['mean']``: True at the best cell per column and metric."""
    means = wide["mean"]
    mask = pd.DataFrame(False, index=means.index, columns=means.columns)
    for col in means.columns:
        col_key = dict(zip(cols, col if isinstance(col, tuple) else (col,)))
        series = means[col]
        if "metric" in col_key:
            groups = {col_key["metric"]: series.index}
        elif "metric" in rows:
            lvl = list(rows).index("metric")
            groups = {}
            for idx in series.index:
                m = idx[lvl] if isinstance(idx, tuple) else idx
                groups.setdefault(m, []).append(idx)
        else:
            groups = {"": series.index}
        for metric, idxs in groups.items():
            vals = series.loc[list(idxs)].dropna()
            if vals.empty:
                continue
            best = vals.max() if higher_is_better(metric) else vals.min()
            for idx in vals.index[vals == best]:
                mask.loc[idx, col] = True
    return mask


def _fmt(mean: float, std: float, n: int, digits: int, lo: float = math.nan, hi: float = math.nan,
         seed_spread: bool = True) -> str:
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "–"
    s = f"{mean:.{digits}f}"
    if n and n > 1 and seed_spread:
        s += f" ± {std:.{digits}f}"
    if lo is not None and not pd.isna(lo):
        s += f" [{lo:.{digits}f}, {hi:.{digits}f}]"
    return s


def _header(col, cols) -> str:
    parts = col if isinstance(col, tuple) else (col,)
    return " / ".join(str(p).removeprefix("metric/") for p in parts if str(p) != "")


def _cells(wide: pd.DataFrame, rows, cols, digits: int, bold: tuple[str, str], seed_spread: bool = True):
    mask = _best_mask(wide, rows, cols)
    means, stds, ns = wide["mean"], wide["std"], wide["n"]
    has_ci = "lo" in wide.columns.get_level_values(0)
    header = [*rows, *(_header(c, cols) for c in means.columns)]
    body = []
    for idx in means.index:
        keys = list(idx) if isinstance(idx, tuple) else [idx]
        line = [str(k) for k in keys]
        for c in means.columns:
            n = ns.loc[idx, c]
            lo, hi = (wide["lo"].loc[idx, c], wide["hi"].loc[idx, c]) if has_ci else (math.nan, math.nan)
            cell = _fmt(means.loc[idx, c], stds.loc[idx, c], 0 if pd.isna(n) else int(n), digits, lo, hi,
                        seed_spread)
            if mask.loc[idx, c] and cell != "–":
                cell = f"{bold[0]}{cell}{bold[1]}"
            line.append(cell)
        body.append(line)
    return header, body


def render_markdown(wide: pd.DataFrame, rows, cols, digits: int = 3, seed_spread: bool = True) -> str:
    header, body = _cells(wide, rows, cols, digits, ("**", "**"), seed_spread)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join(lines) + "\n"


def _tex_escape(s: str) -> str:
    for a, b in (("\\", r"\textbackslash{}"), ("_", r"\_"), ("%", r"\%"), ("&", r"\&"), ("#", r"\#"),
                 ("$", r"\$"), ("{", r"\{"), ("}", r"\}")):
        s = s.replace(a, b)
    return s


def render_latex(wide: pd.DataFrame, rows, cols, digits: int = 3, seed_spread: bool = True) -> str:
    header, body = _cells(wide, rows, cols, digits, ("\x00B", "\x00E"), seed_spread)

    def cell(s: str) -> str:
        s = _tex_escape(s).replace("±", r"$\pm$")
        return s.replace("\x00B", r"\textbf{").replace("\x00E", "}")

    spec = "l" * len(rows) + "r" * (len(header) - len(rows))
    out = [rf"\begin{{tabular}}{{{spec}}}", r"\toprule", " & ".join(cell(h) for h in header) + r" \\", r"\midrule"]
    out += [" & ".join(cell(c) for c in r) + r" \\" for r in body]
    out += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(out) + "\n"


def render_csv(wide: pd.DataFrame) -> str:
    """Numbers, not formatted strings: one row per table row × column with mean/std/n."""
    flat = wide.stack(list(range(1, wide.columns.nlevels)), future_stack=True) if wide.columns.nlevels > 1 else wide
    return flat.reset_index().to_csv(index=False)


def render_missing(missing: Sequence[Mapping[str, str]]) -> str:
    if not missing:
        return ""
    return "\n".join(["Missing/failed runs:"] + [f"- {m['job']}: {m['reason']}" for m in missing]) + "\n"


# ----------------------------------------------------------------------------- table hygiene
def drop_constant_columns(wide: pd.DataFrame, digits: int = 3) -> tuple[pd.DataFrame, list[str]]:
    """Drop the table columns whose (rounded) mean, and interval where there is one, is the same
    in every row; return the smaller table and one caption note per
    dropped column (``run/n_examples = 20 in every row``). A one-row table keeps everything."""
    means = wide["mean"]
    if len(means.index) < 2 or not isinstance(means, pd.DataFrame):
        return wide, []
    drop, notes = [], []
    has_ci = "lo" in wide.columns.get_level_values(0)
    for c in means.columns:
        col = means[c]
        if col.isna().any():
            continue
        vals = {f"{v:.{digits}f}" for v in col}
        if has_ci and len({(f"{a:.{digits}f}", f"{b:.{digits}f}") for a, b in zip(wide["lo"][c], wide["hi"][c])}) > 1:
            continue  # same mean, different questions: the intervals tell the rows apart
        if len(vals) == 1:
            drop.append(c)
            notes.append(f"{_header(c, None)} = {vals.pop()} in every row")
    if not drop or len(drop) == len(means.columns):
        return wide, []
    keep = [c for c in wide.columns if c[1:] not in [d if isinstance(d, tuple) else (d,) for d in drop]]
    return wide[keep], notes


def seeds_change_nothing(df: pd.DataFrame, wide: pd.DataFrame, examples: pd.DataFrame | None) -> bool:
    """True when the sweep has several seeds per cell and every seed gave the same result: every
    cell's spread is 0 and (where per-example values exist) every question's value is the same
    for every seed. Typical of temperature 0 with no sampling: the seeds repeat one run."""
    n = wide["n"]
    if not (n > 1).any().any():
        return False
    if (wide["std"].where(n > 1) > 0).any().any():
        return False
    if examples is not None and not examples.empty:
        ex = examples[examples["job"].isin(set(df["job"]))].dropna(subset=["value"])
        key = [c for c in ex.columns if c not in ("job", "seed", "value", "gold_hops", "kg_hops")]
        if not ex.empty and (ex.groupby(key, dropna=False)["value"].nunique() > 1).any():
            return False
    return True


# ----------------------------------------------------------------------------- paired comparisons
def _row_label(rows: Sequence[str], key: tuple) -> str:
    return ", ".join(f"{r}={k}" for r, k in zip(rows, key) if str(k) != "")


def _matches(rows: Sequence[str], key: tuple, axis: str, value: str) -> bool:
    vals = dict(zip(rows, map(str, key)))
    if axis in vals and vals[axis] == value:
        return True
    return "variant" in vals and f"{axis}={value}" in vals["variant"].split(",")


def paired_comparisons(d: pd.DataFrame, examples: pd.DataFrame | None, rows: Sequence[str],
                       cols: Sequence[str], baseline: str, ci: CIOptions | None = None) -> pd.DataFrame:
    """Each row against the baseline row (``axis=value``, e.g. ``reasoner=io``) on the same
    questions: the paired difference of per-question values (seed means), its paired-bootstrap
    interval and p-value, and McNemar's exact p-value for 0/1 metrics.

    The baseline row of a row is the row with ``axis=value`` that agrees with it on the other row
    axes (or the only row with ``axis=value``). Raises ``ValueError`` when a row and its baseline
    did not answer the same questions (naming the rows, how many ids differ and a few of them), and
    when the baseline or per-example values are missing.
    """
    ci = ci or CIOptions()
    if "=" not in baseline:
        raise ValueError(f"--baseline {baseline!r}: expected AXIS=VALUE, e.g. reasoner=io or ablation=none")
    axis, value = (x.strip() for x in baseline.split("=", 1))
    rows, cols = list(rows), list(cols)
    if axis not in rows and not ("variant" in rows and axis in d.columns):
        raise ValueError(f"--baseline {baseline}: {axis!r} is not a row axis of this table (rows: {', '.join(rows)})")
    qs = cell_questions(d, examples, rows + cols)
    if not qs:
        raise ValueError(f"--baseline {baseline}: no per-example values (predictions.jsonl) to pair questions on")
    row_keys = list(dict.fromkeys(tuple(map(str, k if isinstance(k, tuple) else (k,)))
                                  for k in d.groupby(rows, observed=True, sort=True).groups))
    cands = [k for k in row_keys if _matches(rows, k, axis, value)]
    if not cands:
        raise ValueError(f"--baseline {baseline}: no row has {axis}={value} "
                         f"(rows: {'; '.join(_row_label(rows, k) for k in row_keys)})")
    others = [i for i, r in enumerate(rows) if r not in (axis, "variant")]
    col_keys = list(dict.fromkeys(k[len(rows):] for k in qs))  # the table's column order
    # label rows by the axes that tell them apart
    shown = [i for i in range(len(rows)) if len({k[i] for k in row_keys}) > 1] or list(range(len(rows)))
    label = lambda k: _row_label([rows[i] for i in shown], tuple(k[i] for i in shown))  # noqa: E731
    out = []
    for r in row_keys:
        if r in cands:
            continue
        base = cands if len(cands) == 1 else [c for c in cands if all(c[i] == r[i] for i in others)]
        if len(base) != 1:
            raise ValueError(f"--baseline {baseline}: row {label(r)} has "
                             f"{'no' if not base else 'more than one'} baseline row with {axis}={value}")
        b = base[0]
        for c in col_keys:
            x, y = qs.get(r + c), qs.get(b + c)
            if x is None or y is None:
                continue
            if set(x.index) != set(y.index):
                only_r = sorted(set(x.index) - set(y.index), key=str)
                only_b = sorted(set(y.index) - set(x.index), key=str)
                raise ValueError(
                    f"--baseline {baseline}: row {label(r)} and baseline row {label(b)} "
                    f"did not answer the same questions for {_header(c, cols)}: {len(only_r) + len(only_b)} ids "
                    f"differ ({len(x)} vs {len(y)} questions; only in the row: {', '.join(map(str, only_r[:3])) or '-'}; "
                    f"only in the baseline: {', '.join(map(str, only_b[:3])) or '-'}); not compared")
            y = y.loc[x.index]
            both = x.notna() & y.notna()  # questions the metric applies to in both rows
            if not both.any():
                continue
            pr = stats.paired_bootstrap(x[both].to_numpy(), y[both].to_numpy(), ci.B, ci.level, ci.seed)
            out.append({"row": label(r), "baseline": label(b), "column": _header(c, cols),
                        "diff": pr.diff, "lo": pr.lo, "hi": pr.hi, "p": pr.p, "mcnemar_p": pr.mcnemar_p,
                        "questions": pr.n, "excludes_zero": pr.excludes_zero})
    return pd.DataFrame(out, columns=["row", "baseline", "column", "diff", "lo", "hi", "p", "mcnemar_p",
                                      "questions", "excludes_zero"])


def _p(p) -> str:
    if p is None or pd.isna(p):
        return "–"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def render_paired(paired: pd.DataFrame, baseline: str, ci: CIOptions | None = None, digits: int = 3) -> str:
    ci = ci or CIOptions()
    lines = [f"Paired comparisons against {baseline} (same questions):", "",
             f"| row | column | Δ vs {baseline} | {ci.level:.0%} CI | p (paired bootstrap) | p (McNemar exact) | questions |",
             "|---|---|---|---|---|---|---|"]
    for _, r in paired.iterrows():
        mark = " *" if r["excludes_zero"] else ""
        lines.append(f"| {r['row']} | {r['column']} | {r['diff']:+.{digits}f}{mark} | "
                     f"[{r['lo']:+.{digits}f}, {r['hi']:+.{digits}f}] | {_p(r['p'])} | {_p(r['mcnemar_p'])} | "
                     f"{int(r['questions'])} |")
    lines += ["", f"Δ = row − baseline, the mean over the questions both answered of the per-question difference "
                  f"(each question's value averaged over seeds). * the {ci.level:.0%} paired percentile bootstrap "
                  f"interval (B = {ci.B:,}, questions resampled jointly for both rows) excludes 0. p (paired bootstrap): "
                  "two-sided, from the centred resampled differences; p (McNemar exact): the exact binomial test of "
                  "the discordant questions, for 0/1 metrics only."]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- paper values
def _experiment_of(root: Path) -> str | None:
    names = set()
    for job in job_dirs(root):
        hy = (_load_yaml(job / ".hydra" / "hydra.yaml") or {}).get("hydra", {})
        exp = ((hy.get("runtime") or {}).get("choices") or {}).get("experiment")
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
    """A config group's option as the job chose it (``judge`` → ``pdsqi``, from
    ``.hydra/hydra.yaml``), else the value at ``key`` in its config (``reasoner.hops`` → 5)."""
    hy = root / job / ".hydra" / "hydra.yaml"
    if "." not in key and hy.exists():
        choices = (((_load_yaml(hy) or {}).get("hydra") or {}).get("runtime") or {}).get("choices") or {}
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


# ----------------------------------------------------------------------------- write
@dataclass
class Tables:
    """Everything :func:`build_tables` computed: the frames and the rendered Markdown sections."""
    root: Path
    df: pd.DataFrame
    examples: pd.DataFrame | None
    rows: list[str]
    cols: list[str]
    wide: pd.DataFrame          # every column (the CSV)
    wide_shown: pd.DataFrame    # constant columns dropped (the Markdown / LaTeX)
    caption: str
    warnings: list[str]
    seed_spread: bool
    missing: list[dict[str, str]]
    paired: pd.DataFrame | None = None
    paired_md: str = ""
    paper: pd.DataFrame | None = None
    paper_md: str = ""
    digits: int = 3

    def table_md(self) -> str:
        md = render_markdown(self.wide_shown, self.rows, self.cols, self.digits, self.seed_spread)
        md += "\n" + self.caption + "\n"
        if self.warnings:
            md += "\n" + "\n".join(self.warnings) + "\n"
        return md

    def markdown(self) -> str:
        md = self.table_md()
        for part in (self.paired_md, self.paper_md):
            if part:
                md += "\n" + part
        return md + ("\n" + render_missing(self.missing) if self.missing else "")


def build_tables(root: str | Path, rows=("reasoner", "ablation", "variant"), cols=("dataset", "metric"),
                 metrics: Sequence[str] | None = None, digits: int = 3, ci: CIOptions | None = None,
                 baseline: str | None = None, paper: str | bool | None = None) -> Tables:
    """collect → pivot (+ intervals) → paired comparisons / paper values, nothing written."""
    root = Path(root)
    ci = ci or CIOptions()
    df, missing = collect(root)
    rows, cols = table_axes(df, _drop_constant_empty(df, list(rows)), list(cols))
    need_ex = ci.kind == "bootstrap" or baseline or paper
    examples = collect_examples(root) if need_ex else None
    wide = pivot(df, rows, cols, metrics, examples if ci.kind == "bootstrap" else None, ci)
    warnings = []
    spread = True
    if seeds_change_nothing(df, wide, examples):
        spread = False
        seeds = sorted({int(s) for s in df["seed"].dropna()})
        warnings.append(f"Warning: the seeds ({', '.join(map(str, seeds))}) changed nothing: every cell and every "
                        "question has the same value for every seed (temperature 0, no sampling?). The seed sweep "
                        "repeats one run; it adds no evidence and is shown once, without ± 0.")
    wide_shown, constant = drop_constant_columns(wide, digits)
    cap = caption(df, wide, ci, spread)
    if constant:
        cap += " Constant columns (not shown): " + "; ".join(constant) + "."
    t = Tables(root, df, examples, rows, cols, wide, wide_shown, cap, warnings, spread, missing, digits=digits)
    if baseline:
        d = prepare(df, rows, cols, metrics)
        t.paired = paired_comparisons(d, examples, rows, cols, baseline, ci)
        t.paired_md = render_paired(t.paired, baseline, ci, digits)
    if paper:
        t.paper, doc = paper_comparison(root, df, examples, None if paper is True else str(paper), ci)
        t.paper_md = render_paper(t.paper, doc, ci, digits)
    return t


def write_tables(root: str | Path, rows=("reasoner", "ablation", "variant"), cols=("dataset", "metric"),
                 metrics: Sequence[str] | None = None, out_dir: str | Path | None = None,
                 name: str = "results", digits: int = 3, ci: CIOptions | None = None,
                 baseline: str | None = None, paper: str | bool | None = None) -> dict[str, Path]:
    """collect → pivot → write ``<name>.md/.tex/.csv`` (+ ``missing.txt``) into ``out_dir``
    (default: the multirun dir itself). With ``baseline`` (``reasoner=io``) also the paired
    comparisons (``<name>_paired.csv``, and a section of ``<name>.md``); with ``paper`` (a preset
    name, or True for the sweep's own ``experiment=``) the paper's values beside ours
    (``<name>_paper.csv`` and a section). Returns the written paths."""
    from kgreason.paths import safe_component

    name = safe_component(name, "--name")  # <name>.md/.tex/.csv are written into out_dir, never beside it
    root = Path(root)
    t = build_tables(root, rows, cols, metrics, digits, ci, baseline, paper)
    for w in t.warnings:
        print(w, file=sys.stderr)
    out = Path(out_dir) if out_dir else root
    out.mkdir(parents=True, exist_ok=True)
    paths = {"md": out / f"{name}.md", "tex": out / f"{name}.tex", "csv": out / f"{name}.csv"}
    if t.paired is not None:
        paths["paired"] = out / f"{name}_paired.csv"
        paths["paired"].write_text(t.paired.to_csv(index=False))
    if t.paper is not None:
        paths["paper"] = out / f"{name}_paper.csv"
        paths["paper"].write_text(t.paper.to_csv(index=False))
    paths["md"].write_text(t.markdown())
    paths["tex"].write_text(render_latex(t.wide_shown, t.rows, t.cols, digits, t.seed_spread))
    paths["csv"].write_text(render_csv(t.wide))
    mpath = out / "missing.txt"
    if t.missing:
        mpath.write_text(render_missing(t.missing))
        paths["missing"] = mpath
    elif mpath.exists():
        mpath.unlink()
    return paths


def _drop_constant_empty(df: pd.DataFrame, rows: list[str]) -> list[str]:
    """Drop row axes that are empty everywhere (e.g. ``variant`` with no extra overrides)."""
    keep = [r for r in rows if not (r in df.columns and df[r].fillna("").astype(str).eq("").all())]
    return keep or rows[:1]


# ----------------------------------------------------------------------------- plots
def hops_figure(counts: Mapping[str, int], title: str = "hop distribution"):
    """The hop-distribution bar chart as a matplotlib ``Figure`` (not saved, not shown).

    A bare ``Figure`` (no pyplot state, no GUI backend needed): safe in a run, a worker thread or
    a notebook, and nothing forces a backend on the caller. Counts get integer y ticks."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    keys = [str(k) for k in counts]
    vals = [int(counts[k]) for k in counts]
    short = {"unreachable": "unreach.", "unlinked": "unlinked"}
    fig = Figure(figsize=(max(4.5, 0.9 * len(keys) + 1.5), 3.0))
    ax = fig.subplots()
    colors = ["#4c72b0" if k.isdigit() else "#999999" for k in keys]
    ax.bar(range(len(keys)), vals, color=colors)
    ax.set_xticks(range(len(keys)), [short.get(k, k) for k in keys], fontsize=8)
    ax.set_xlabel("shortest query→answer hops")
    ax.set_ylabel("examples")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # counts: no fractional ticks
    ax.set_title(title)
    for i, v in enumerate(vals):
        ax.annotate(str(v), (i, v), ha="center", va="bottom", fontsize=8)
    fig.tight_layout()
    return fig


def plot_hops(counts: Mapping[str, int], path: str | Path, title: str = "hop distribution") -> Path:
    """Bar chart of a hop distribution (``hops.json`` ``counts``) saved to ``path`` (PNG); the
    run titles it with its dataset and KG (``hop distribution: <dataset> on KG <kg>``)."""
    fig = hops_figure(counts, title)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path


# ----------------------------------------------------------------------------- CLI
def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kgreason.tables", description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", help="a run dir or a multirun (sweep) dir")
    ap.add_argument("--rows", default="reasoner,ablation,variant", help="comma-separated row axes")
    ap.add_argument("--cols", default="dataset,metric",
                    help="comma-separated column axes; a swept override works too, e.g. "
                         "--rows reasoner.depth --cols reasoner.width,metric for ReKnoS Table 4")
    ap.add_argument("--metrics", default=None, help="metric names (default: every metric/* key)")
    ap.add_argument("--out", default=None, help="output dir (default: the given dir)")
    ap.add_argument("--name", default="results", help="file stem of the written tables")
    ap.add_argument("--digits", type=int, default=3)
    ap.add_argument("--ci", choices=("bootstrap", "none"), default="bootstrap",
                    help="interval per cell: percentile bootstrap over the questions (default) or none")
    ap.add_argument("--boot", type=int, default=stats.DEFAULT_B, help="bootstrap resamples B (default 2000)")
    ap.add_argument("--ci-level", type=float, default=stats.DEFAULT_LEVEL, help="interval level (default 0.95)")
    ap.add_argument("--ci-seed", type=int, default=stats.DEFAULT_SEED, help="seed of the resampling (default 0)")
    ap.add_argument("--baseline", default=None,
                    help="AXIS=VALUE (reasoner=io, ablation=none): paired differences of every row to that row "
                         "on the same questions, with interval, p-value and McNemar's exact test for 0/1 metrics")
    ap.add_argument("--paper", nargs="?", const=True, default=None, metavar="PRESET",
                    help="print the paper's values beside ours from experiments/PRESET/paper.yaml (default "
                         "PRESET: the sweep's experiment=)")
    args = ap.parse_args(argv)
    split = lambda s: [x.strip() for x in s.split(",") if x.strip()]  # noqa: E731
    try:
        ci = CIOptions(args.ci, args.boot, args.ci_level, args.ci_seed)
        paths = write_tables(args.dir, split(args.rows), split(args.cols),
                             split(args.metrics) if args.metrics else None, args.out, args.name, args.digits,
                             ci, args.baseline, args.paper)
    except (FileNotFoundError, KeyError, ValueError) as e:
        print(f"error: {e.args[0] if e.args else e}", file=sys.stderr)
        return 2
    sys.stdout.write(paths["md"].read_text())
    print("\nwrote " + ", ".join(str(p) for p in paths.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
