"""Paper tables from run / multirun dirs, and the hop-distribution plot.

``python -m kgreason.tables RUN_OR_MULTIRUN_DIR [--rows reasoner,ablation] [--cols dataset,metric]
[--metrics hits_at_1,f1] [--out DIR]``

* :func:`collect` walks the dir for Hydra job dirs (those with ``.hydra/hydra.yaml``) and returns
  a tidy DataFrame, one row per (job, metric): ``job, dataset, reasoner, ablation, llm, kg,
  retriever, variant, seed, metric, value``. Group choices come from ``hydra.runtime.choices``;
  ``variant`` is the job's remaining overrides (``.hydra/overrides.yaml`` minus group choices,
  ``seed`` and ``hydra.*``), so ``reasoner.hops=1,2`` sweeps stay apart; ``seed`` from the job's
  config. Job dirs without ``metrics.json`` are returned as *missing* with the reason found in
  ``predictions.jsonl`` / the job log.
* :func:`pivot` averages over seeds only: ``mean``, ``std`` (sample std, 0 for one seed) and
  ``n`` per cell. Every group choice or override that differs across the sweep is a table axis
  (:func:`table_axes` adds the ones ``--rows``/``--cols`` do not name to the rows), and numeric
  values sort as numbers; :func:`caption` says what the ``±`` is over.
* :func:`render_markdown` / :func:`render_latex` / :func:`render_csv` format ``mean ± std``
  and bold the best cell per column (per metric) using ``METRICS[m].higher_is_better``.
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
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd
import yaml

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


def pivot(df: pd.DataFrame, rows: Sequence[str] = ("reasoner", "ablation", "variant"),
          cols: Sequence[str] = ("dataset", "metric"), metrics: Sequence[str] | None = None) -> pd.DataFrame:
    """Mean ± std over seeds (and any column not in rows/cols).

    Returns:
        DataFrame indexed by ``rows``, with a column MultiIndex ``(stat, *cols)`` where stat is
        ``mean`` | ``std`` | ``n``.
    """
    rows, cols = table_axes(df, rows, cols)
    d = _metric_filter(df, metrics).copy()
    if d.empty:
        raise ValueError("no metric values to tabulate (check --metrics and that the runs finished)")
    params = _param_columns(d)
    if "variant" in rows + cols:  # what no other axis names: the remaining swept overrides
        rest = [p for p in params if p not in rows + cols]
        d["variant"] = [",".join(f"{p}={r[p]}" for p in rest if isinstance(r[p], str) and r[p] != "")
                        for _, r in d[rest].iterrows()] if rest else ""
    for c in rows + cols:
        d[c] = _ordered(d[c].fillna("").astype(str))
    g = d.groupby(rows + cols, sort=True, observed=True)["value"]
    stats = pd.DataFrame({"mean": g.mean(), "std": g.std(ddof=1).fillna(0.0), "n": g.count()})
    wide = stats.unstack(cols) if cols else stats
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


def caption(df: pd.DataFrame, wide: pd.DataFrame) -> str:
    """What a cell is: the mean over seeds, and what its ``±`` is."""
    seeds = sorted({int(s) for s in df["seed"].dropna()}) if "seed" in df else []
    n = wide["n"].max().max() if not wide.empty else 0
    if n is None or pd.isna(n) or int(n) <= 1:
        return "Each cell is one run (no ± shown)."
    return (f"Each cell is the mean over the seeds of one setting ({len(seeds)} seed(s) in the sweep: "
            f"{', '.join(map(str, seeds))}); ± is the sample standard deviation over those seeds (ddof=1).")


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


def _fmt(mean: float, std: float, n: int, digits: int) -> str:
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "–"
    s = f"{mean:.{digits}f}"
    if n and n > 1:
        s += f" ± {std:.{digits}f}"
    return s


def _header(col, cols) -> str:
    parts = col if isinstance(col, tuple) else (col,)
    return " / ".join(str(p).removeprefix("metric/") for p in parts if str(p) != "")


def _cells(wide: pd.DataFrame, rows, cols, digits: int, bold: tuple[str, str]):
    mask = _best_mask(wide, rows, cols)
    means, stds, ns = wide["mean"], wide["std"], wide["n"]
    header = [*rows, *(_header(c, cols) for c in means.columns)]
    body = []
    for idx in means.index:
        keys = list(idx) if isinstance(idx, tuple) else [idx]
        line = [str(k) for k in keys]
        for c in means.columns:
            n = ns.loc[idx, c]
            cell = _fmt(means.loc[idx, c], stds.loc[idx, c], 0 if pd.isna(n) else int(n), digits)
            if mask.loc[idx, c] and cell != "–":
                cell = f"{bold[0]}{cell}{bold[1]}"
            line.append(cell)
        body.append(line)
    return header, body


def render_markdown(wide: pd.DataFrame, rows, cols, digits: int = 3) -> str:
    header, body = _cells(wide, rows, cols, digits, ("**", "**"))
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join(lines) + "\n"


def _tex_escape(s: str) -> str:
    for a, b in (("\\", r"\textbackslash{}"), ("_", r"\_"), ("%", r"\%"), ("&", r"\&"), ("#", r"\#"),
                 ("$", r"\$"), ("{", r"\{"), ("}", r"\}")):
        s = s.replace(a, b)
    return s


def render_latex(wide: pd.DataFrame, rows, cols, digits: int = 3) -> str:
    header, body = _cells(wide, rows, cols, digits, ("\x00B", "\x00E"))

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


def write_tables(root: str | Path, rows=("reasoner", "ablation", "variant"), cols=("dataset", "metric"),
                 metrics: Sequence[str] | None = None, out_dir: str | Path | None = None,
                 name: str = "results", digits: int = 3) -> dict[str, Path]:
    """collect → pivot → write ``<name>.md/.tex/.csv`` (+ ``missing.txt``) into ``out_dir``
    (default: the multirun dir itself). Returns the written paths."""
    from kgreason.paths import safe_component

    name = safe_component(name, "--name")  # <name>.md/.tex/.csv are written into out_dir, never beside it
    root = Path(root)
    df, missing = collect(root)
    out = Path(out_dir) if out_dir else root
    out.mkdir(parents=True, exist_ok=True)
    rows, cols = table_axes(df, _drop_constant_empty(df, list(rows)), list(cols))
    wide = pivot(df, rows, cols, metrics)
    paths = {"md": out / f"{name}.md", "tex": out / f"{name}.tex", "csv": out / f"{name}.csv"}
    md = render_markdown(wide, rows, cols, digits) + "\n" + caption(df, wide) + "\n"
    paths["md"].write_text(md + ("\n" + render_missing(missing) if missing else ""))
    paths["tex"].write_text(render_latex(wide, rows, cols, digits))
    paths["csv"].write_text(render_csv(wide))
    mpath = out / "missing.txt"
    if missing:
        mpath.write_text(render_missing(missing))
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
    args = ap.parse_args(argv)
    split = lambda s: [x.strip() for x in s.split(",") if x.strip()]  # noqa: E731
    try:
        paths = write_tables(args.dir, split(args.rows), split(args.cols),
                             split(args.metrics) if args.metrics else None, args.out, args.name, args.digits)
    except (FileNotFoundError, KeyError, ValueError) as e:
        print(f"error: {e.args[0] if e.args else e}", file=sys.stderr)
        return 2
    sys.stdout.write(paths["md"].read_text())
    print("\nwrote " + ", ".join(str(p) for p in paths.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
