"""``kgreason tables --funnel``: where each run's questions were lost, one row per run and one
column per funnel stage in the reasoner's stage order (issue 72, item 3).

Each run's ``metrics.json`` holds ``funnel/<stage>`` (the share of its questions that reached the
stage, errored ones counted as reaching nothing), ``funnel/<stage>/<value>`` for a categorical
stage and ``funnel/_stages`` (the order): :mod:`kgreason.metrics.funnel`. A cell reads
``share (count)``: ``0.000 (0)`` under ``cypher_validated`` is "§3.4 validated nothing" in one
line. Runs whose reasoners have different stages get one table each (the stage list in its
title); a run without a funnel is named below the tables. Superseded repeats are left out as in
the results table (:mod:`kgreason.tables.repeats`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from kgreason.metrics.funnel import funnel_columns
from kgreason.tables.collect import GROUPS, Collected, Job, gather
from kgreason.tables.repeats import supersede

#: the run-describing columns a row may show (only those that differ between the table's runs)
LABELS = (*GROUPS, "variant", "seed")


@dataclass
class FunnelTable:
    """One table: the runs sharing one stage list, in job order."""
    stages: list[str]          # the funnel's stage names (the reasoner's order)
    frame: pd.DataFrame        # label columns, ``n``, then one column per stage (or stage=value)
    shares: pd.DataFrame       # the same shape: the raw shares (NaN where a run lacks the column)


@dataclass
class Funnels:
    tables: list[FunnelTable]
    without: list[str] = field(default_factory=list)   # runs with metrics but no funnel/* key
    missing: list[dict[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _label_columns(jobs: list[Job]) -> list[str]:
    keys = [k for k in LABELS if len({str(j.info.get(k)) for j in jobs}) > 1]
    # a swept override (reasoner.width=...) is a column of its own in job info, and then says
    # everything ``variant`` (the differing overrides joined) would
    params = sorted({k for j in jobs for k in j.info if k not in (*LABELS, "job")
                     and len({str(x.info.get(k)) for x in jobs}) > 1})
    if params:
        keys = [k for k in keys if k != "variant"] + params
    return keys or ["reasoner"]


def _cell(share: float | None, n: float | None, digits: int) -> str:
    if share is None or pd.isna(share):
        return "–"
    count = f" ({round(share * n)})" if n else ""
    return f"{share:.{digits}f}{count}"


def _n_text(j: Job) -> str:
    n = "?" if j.n_examples is None else str(int(j.n_examples))
    if j.partial and j.n_expected is not None:
        n += f"/{int(j.n_expected)} (partial)"
    if j.errors:
        n += f", {j.errors} errored"
    return n


def build_funnels(root: str | Path, digits: int = 3) -> Funnels:
    """Every run under ``root`` with ``funnel/*`` keys, grouped by stage list (module docstring)."""
    c: Collected = gather(root)
    warnings = supersede(c)
    groups: dict[tuple[str, ...], list[tuple[Job, list[tuple[str, str]]]]] = {}
    without: list[str] = []
    for j in c.jobs.values():
        cols = funnel_columns({**j.metrics, **({"funnel/_stages": j.funnel_stages} if j.funnel_stages else {})})
        if not cols:
            without.append(j.name)
            continue
        stages = tuple(j.funnel_stages or dict.fromkeys(label.split("=", 1)[0] for label, _ in cols))
        groups.setdefault(stages, []).append((j, cols))
    tables = []
    for stages, members in groups.items():
        jobs = [j for j, _ in members]
        labels = _label_columns(jobs)
        order: list[tuple[str, str]] = []  # every run's columns, stage order first (a value one run lacks joins)
        for _, cols in members:
            for col in cols:
                if col not in order:
                    order.append(col)
        rank = {s: i for i, s in enumerate(stages)}
        order.sort(key=lambda lk: rank.get(lk[0].split("=", 1)[0], len(rank)))  # stable: values stay sorted
        shown, raw = [], []
        for j, _ in members:
            row = {k: ("" if j.info.get(k) is None else str(j.info.get(k))) for k in labels}
            row["n"] = _n_text(j)
            r = dict(row)
            for label, key in order:
                row[label] = _cell(j.metrics.get(key), j.n_examples, digits)
                r[label] = j.metrics.get(key)
            shown.append(row)
            raw.append(r)
        cols = [*labels, "n", *(label for label, _ in order)]
        tables.append(FunnelTable(list(stages), pd.DataFrame(shown, columns=cols), pd.DataFrame(raw, columns=cols)))
    return Funnels(tables, without, list(c.missing), [f"Warning: {w}" for w in c.warnings] + warnings)


def _md_table(df: pd.DataFrame) -> str:
    head = "| " + " | ".join(map(str, df.columns)) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    body = ["| " + " | ".join(str(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([head, rule, *body])


CAPTION = ("Each stage cell is the share of the run's questions that reached the stage (count in brackets); "
           "the denominator is every question of the run, an errored one counted as reaching no stage. "
           "A categorical stage has one column per value (stage=value). Stages are in the reasoner's order "
           "(docs/reasoners.md, docs/subqrag.md, docs/sgr.md name each one); a stage can be reached without "
           "the one before it where the method goes on past a failure (e.g. ReKnoS's uniform scores).")


def render_funnels(f: Funnels) -> str:
    parts = []
    for t in f.tables:
        parts.append(f"Funnel: {' → '.join(t.stages)}\n\n{_md_table(t.frame)}\n")
    if not parts:
        parts.append("No run under this dir recorded a funnel (funnel/* keys of metrics.json).\n")
    else:
        parts.append(CAPTION + "\n")
    if f.without:
        parts.append("Runs without a funnel (their reasoner declares no stage): " + ", ".join(f.without) + "\n")
    if f.warnings:
        parts.append("\n".join(f.warnings) + "\n")
    if f.missing:
        parts.append("Runs without metrics: " + "; ".join(f"{m['job']}: {m['reason']}" for m in f.missing) + "\n")
    return "\n".join(parts)


def write_funnels(root: str | Path, out_dir: str | Path | None = None, name: str = "results",
                  digits: int = 3) -> dict[str, Path]:
    """``<name>_funnel.md`` (the tables above) and ``<name>_funnel.csv`` (the raw shares, one row per
    run, with a ``funnel`` column naming its stage list) in ``out_dir`` (default: ``root``)."""
    from kgreason.paths import safe_component

    name = safe_component(name, "--name")
    root = Path(root)
    f = build_funnels(root, digits)
    if not f.tables and not f.without:
        raise ValueError(f"no run with metrics under {root}: nothing to draw a funnel from"
                         + (f" (e.g. {f.missing[0]['job']}: {f.missing[0]['reason']})" if f.missing else ""))
    out = Path(out_dir) if out_dir else root
    out.mkdir(parents=True, exist_ok=True)
    paths = {"md": out / f"{name}_funnel.md", "csv": out / f"{name}_funnel.csv"}
    paths["md"].write_text(render_funnels(f), encoding="utf-8")
    frames = [t.shares.assign(funnel=" → ".join(t.stages)) for t in f.tables]
    csv = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["funnel"])
    paths["csv"].write_text(csv.to_csv(index=False), encoding="utf-8")
    return paths
