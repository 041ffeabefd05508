"""The hop-distribution bar chart of ``hops.json``."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping


#: axis labels per unit of ``hops.json`` (kgreason/metrics/hops.py): its ``counts`` are per
#: (query entity, gold entity) pair (LogosKG Fig. 2), ``counts_per_example`` per example
UNITS = {"pair": ("hops, query entity → gold entity", "(query, gold) pairs"),
         "example": ("shortest query→answer hops", "examples")}


def hops_figure(counts: Mapping[str, int], title: str = "hop distribution", unit: str = "pair"):
    """The hop-distribution bar chart as a matplotlib ``Figure`` (not saved, not shown); ``unit``
    (``pair`` | ``example``) names what was counted.

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
    xlabel, ylabel = UNITS[unit]
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # counts: no fractional ticks
    ax.set_title(title)
    for i, v in enumerate(vals):
        ax.annotate(str(v), (i, v), ha="center", va="bottom", fontsize=8)
    fig.tight_layout()
    return fig


def plot_hops(counts: Mapping[str, int], path: str | Path, title: str = "hop distribution",
              unit: str = "pair") -> Path:
    """Bar chart of a hop distribution (``hops.json`` ``counts``: per query–gold pair) saved to
    ``path`` (PNG); the run titles it with its dataset and KG (``hop distribution: <dataset> on KG
    <kg>``)."""
    fig = hops_figure(counts, title, unit)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path
