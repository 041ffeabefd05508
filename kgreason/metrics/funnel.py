"""The funnel: where a multi-stage method loses a question (issue 72, item 3).

A reasoner declares its ordered stage names in ``BaseReasoner.funnel`` and records, per
question, the stages the question reached with ``Trace.stage(name)`` (a bool) or the branch it
took with ``Trace.stage(name, "value")`` (a categorical stage); the question's
``Prediction.extra["funnel"]`` is then ``{stage: bool | str}``, and a declared stage missing from
it was not reached (False).

:func:`funnel_rates` turns a run's rows into the ``metrics.json`` keys:

* ``funnel/<stage>``: the share of the run's questions whose value is True;
* ``funnel/<stage>/<value>``: for a categorical stage (a string value in some row), the share
  whose value is ``<value>``; such a stage has no bare ``funnel/<stage>`` key;
* ``funnel/_stages``: the stage names in order (the reasoner's ``funnel`` tuple, then any stage a
  row recorded that the tuple does not name, sorted), the one non-number of the family.

The denominator is every row of the run: an errored row (its ``error`` set) counts as reaching
no stage, whatever it recorded before it failed, so the rates share ``metric/*``'s denominator
(docs/metrics.md, "Errored examples"). A reasoner that declares no stage and whose rows record
none gives no ``funnel/*`` key at all.

:func:`funnel_columns` reads those keys back in stage order (``kgreason tables --funnel``,
``kgreason report``), and :func:`question_funnel` lists one question's stages
(``kgreason show``). Nothing here imports a reasoner: the rows and the metrics file are enough.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

PREFIX = "funnel/"
STAGES_KEY = "funnel/_stages"


def row_funnel(row: Mapping[str, Any]) -> dict[str, bool | str]:
    """A row's recorded ``{stage: value}`` (``extra["funnel"]``; empty when it has none)."""
    extra = row.get("extra") or {}
    f = extra.get("funnel") if isinstance(extra, Mapping) else None
    return {str(k): v for k, v in f.items()} if isinstance(f, Mapping) else {}


def stage_order(declared: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """The declared stages in order, then any stage a row recorded that is not declared (sorted)."""
    order = [str(s) for s in dict.fromkeys(declared)]
    seen = set(order)
    extra = sorted({k for r in rows for k in row_funnel(r)} - seen)
    return order + extra


def funnel_rates(rows: Sequence[Mapping[str, Any]], declared: Sequence[str] = ()) -> dict[str, Any]:
    """``funnel/*`` keys of ``metrics.json`` for ``rows`` (module docstring); ``{}`` when no stage
    is declared or recorded."""
    rows = list(rows)
    stages = stage_order(declared, rows)
    if not stages:
        return {}
    n = len(rows)
    values = [{} if r.get("error") else row_funnel(r) for r in rows]  # an errored row reached nothing
    out: dict[str, Any] = {STAGES_KEY: stages}
    for s in stages:
        got = [v.get(s, False) for v in values]
        cats = sorted({str(x) for x in got if isinstance(x, str)})
        if cats:
            for c in cats:
                out[f"{PREFIX}{s}/{c}"] = (sum(1 for x in got if isinstance(x, str) and x == c) / n) if n else None
        else:
            out[f"{PREFIX}{s}"] = (sum(1 for x in got if x is True) / n) if n else None
    return out


def funnel_columns(metrics: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(stage label, metrics key)`` in stage order for the ``funnel/*`` keys of one run's
    ``metrics.json``: a bool stage is labelled by its name, a categorical one by ``stage=value``
    (one column per value, values sorted). Stages missing from ``funnel/_stages`` (a file written
    by hand) follow in key order."""
    keys = [k for k in metrics if k.startswith(PREFIX) and k != STAGES_KEY]
    listed = metrics.get(STAGES_KEY)
    order = [str(s) for s in listed] if isinstance(listed, list) else []
    out: list[tuple[str, str]] = []
    done: set[str] = set()
    for s in order + sorted({k[len(PREFIX):].split("/", 1)[0] for k in keys} - set(order)):
        bare = PREFIX + s
        if bare in metrics and bare not in done:
            out.append((s, bare))
            done.add(bare)
        for k in sorted(k for k in keys if k.startswith(bare + "/")):
            if k not in done:
                out.append((f"{s}={k[len(bare) + 1:]}", k))
                done.add(k)
    return out


def question_funnel(extra: Mapping[str, Any] | None, declared: Sequence[str] = (),
                    errored: bool = False) -> list[tuple[str, bool | str]]:
    """One question's ``(stage, value)`` in stage order: the declared stages (False where not
    recorded), then any other recorded stage. ``errored``: the row failed, so, as in the rates,
    every stage reads False."""
    rec = row_funnel({"extra": extra or {}})
    order = stage_order(declared, [{"extra": extra or {}}])
    return [(s, False if errored else rec.get(s, False)) for s in order]
