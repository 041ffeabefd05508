"""One question, seen: a self-contained HTML page of one answered example (``kgreason ask``,
``kgreason show RUN_DIR EXAMPLE_ID``, and the pages ``kgreason report`` links to).

The page is built from what a run stores for every example, a row of ``predictions.jsonl``
(question, answers, gold, metrics, usage and the reasoner's trace of :class:`~kgreason.types.Step`
records), and the run's record (``run.json``: which reasoner, KG, dataset and model):

* the answer, the gold answers and the example's scores;
* a drawing of the subgraph the method used, read from the trace by :func:`subgraph_of`:
  the facts a retrieve-then-answer method kept for its prompt (RAG's ``rank`` step, SGR's
  ``E*_q``), ToG's beam per depth (its ``beam`` steps), SGR's paths (the triples each path's
  hypotheses claimed), SubQRAG's sub-questions (the triples each one used), and any other
  ``triples`` a step recorded. Laid out with networkx, drawn with matplotlib into an inline SVG
  (text kept as text, so the names are searchable); a table lists the same edges;
* the funnel: which of the reasoner's stages this question passed, in stage order (its
  ``extra["funnel"]``; the order from the run's ``metrics.json`` ``funnel/_stages``), the first
  stage it did not reach marked (:func:`funnel_html`);
* every model call in order, with its full prompt (every message), its replies, what was parsed
  from them and its usage, then every other trace step.

Everything the user or the data wrote is HTML-escaped; the page loads nothing (no script, no
stylesheet, no font, no network).
"""

from __future__ import annotations

import argparse
import html
import io
import json
import re
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from kgreason.textio import write_text_file

#: edges drawn at most (the table under the drawing lists every edge found)
MAX_DRAWN_EDGES = 60

_FACT = re.compile(r"^(.+?) \| (.+?) \| (.+)$")


def _fact(text: Any) -> tuple[str, str, str] | None:
    """``"head | relation | tail"`` (how the KG verbalises a triple) → the triple."""
    if not isinstance(text, str):
        return None
    m = _FACT.match(text.strip())
    return (m.group(1), m.group(2), m.group(3)) if m else None


def _triple(x: Any) -> tuple[str, str, str] | None:
    if isinstance(x, (list, tuple)) and len(x) == 3 and all(isinstance(v, (str, int, float)) for v in x):
        return (str(x[0]), str(x[1]), str(x[2]))
    return None


def _scored_facts(items: Any) -> list[tuple[str, str, str]]:
    """``[["head | rel | tail", score], ...]`` (a ranking step's kept facts) → triples."""
    out = []
    for it in items if isinstance(items, list) else ():
        f = _fact(it[0] if isinstance(it, (list, tuple)) and it else it)
        if f:
            out.append(f)
    return out


def subgraph_of(trace: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What a method used, from its trace: ``{"edges": [(head, relation, tail, group)],
    "topic": [names], "layer": {name: depth} (ToG), "what": [what each group is]}``.

    Read per step kind (docs/running.md "One question"): ``link`` → the topic entities;
    ``rank`` (RAG, ReKnoS' kept facts) and SGR's ``subgraph E*_q`` → the kept facts; ToG's
    ``beam`` → the triples that brought each kept entity in, per depth; SGR's hypothesis calls →
    each path's claimed triples; SubQRAG's ``subquestion`` → the triples each sub-question used;
    any other step's ``triples`` list → its triples. An edge found twice keeps its first group."""
    edges: dict[tuple[str, str, str], str] = {}
    topic: list[str] = []
    layer: dict[str, int] = {}
    what: list[str] = []

    def add(triples, group: str) -> None:
        new = False
        for tr in triples:
            if tr and tr not in edges:
                edges[tr] = group
                new = True
        if new and group not in what:
            what.append(group)

    for s in trace:
        kind, name, data = s.get("kind"), str(s.get("name", "")), s.get("data") or {}
        if kind == "link":
            topic += [str(x[0]) for x in data.get("linked") or [] if isinstance(x, (list, tuple)) and x]
        elif kind == "rank":
            add(_scored_facts(data.get("kept")), "facts kept for the prompt")
        elif kind == "subgraph":
            add(_scored_facts(data.get("top")), f"subgraph {name} (top facts)")
        elif kind == "beam":
            d = int(data.get("depth") or 0)
            for e in data.get("kept") or []:
                layer.setdefault(str(e), d)
            add([_triple(x) for x in data.get("triples") or []], f"beam, depth {d}")
        elif kind == "llm" and isinstance(data.get("parsed"), Mapping) and data["parsed"].get("claims"):
            m = re.match(r"hypothesis_(p\d+)", name)
            add([_triple(x) for x in data["parsed"]["claims"]], f"path {m.group(1)} (claimed)" if m else name)
        elif kind == "subquestion":
            sq = str(data.get("rewritten") or data.get("subquestion") or "")
            add([_triple(x) for x in data.get("used") or []], f"{name}: {sq[:60]}")
        elif kind == "memory":
            continue  # SubQRAG's graph memory = the sub-questions' used triples, drawn per sub-question
        elif isinstance(data.get("triples"), list):
            add([_triple(x) for x in data["triples"]], f"{kind} {name}")
    for t in dict.fromkeys(topic):
        layer.setdefault(t, 0)
    return {"edges": [(h, r, t, g) for (h, r, t), g in edges.items()], "topic": list(dict.fromkeys(topic)),
            "layer": layer, "what": what}


def _short(text: str, n: int = 28) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def draw_svg(sub: Mapping[str, Any], answers: Sequence[str] = (), max_edges: int = MAX_DRAWN_EDGES,
             gold: Sequence[str] = ()) -> str:
    """The subgraph as an inline ``<svg>`` (networkx layout, matplotlib drawing; text as text):
    :func:`figure`. Returns "" when there is no edge."""
    fig = figure(sub, answers, max_edges, gold)
    if fig is None:
        return ""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "kgreason"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    svg = buf.getvalue()
    svg = re.sub(r"\s*<metadata>.*?</metadata>", "", svg[svg.index("<svg"):], flags=re.S)  # no RDF namespaces
    return re.sub(r'\s+xmlns:xlink="[^"]*"', "", svg) if "xlink:" not in svg.split(">", 1)[1] else svg


#: node colours and the gold answers' ring
TOPIC_FILL, ANSWER_FILL, OTHER_FILL, GOLD_RING = "#f4c542", "#7bd389", "#dde3ea", "#1b5e20"


def _norm(name: str) -> str:
    return " ".join(str(name).split()).lower()


def figure(sub: Mapping[str, Any], answers: Sequence[str] = (), max_edges: int = MAX_DRAWN_EDGES,
           gold: Sequence[str] = ()):
    """The matplotlib Figure :func:`draw_svg` renders (None when there is no edge).

    Topic entities are squares (yellow), the predicted answers are filled green (a topic entity
    the method answered with too: a green square), the gold answers have a thick dark-green ring;
    edges are coloured by group. The legend names only what the drawing shows (no "predicted
    answer" entry when no drawn node is one). ToG's beam is laid out by depth (one column per
    depth); others by Kamada-Kawai (deterministic). Every label (node names, relations) lies
    inside the picture: the axes are widened until the texts' extents fit (:func:`_fit_texts`)."""
    edges = list(sub["edges"])[:max_edges]
    if not edges:
        return None
    import matplotlib
    import networkx as nx
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    g = nx.MultiDiGraph()
    for h, r, t, grp in edges:
        g.add_edge(h, t, relation=r, group=grp)
    layer = sub.get("layer") or {}
    if layer and all(n in layer for n in g.nodes):
        for n in g.nodes:
            g.nodes[n]["depth"] = int(layer[n])
        pos = nx.multipartite_layout(g, subset_key="depth")
    else:
        try:  # Kamada-Kawai spreads hubs and their leaves evenly (deterministic: no random start)
            pos = nx.kamada_kawai_layout(nx.Graph(g))
        except Exception:  # noqa: BLE001 - without SciPy: the seeded spring layout
            pos = nx.spring_layout(g, seed=0, k=1.6 / max(1, len(g) ** 0.5))
    groups = list(dict.fromkeys(grp for *_, grp in edges))
    cmap = matplotlib.colormaps["tab10"]
    colour = {grp: cmap(i % 10) for i, grp in enumerate(groups)}
    topic = set(sub.get("topic") or ())
    predicted = {_norm(a) for a in answers if a}
    golds = {_norm(a) for a in gold if a}
    is_pred = {n: _norm(n) in predicted for n in g.nodes}
    is_gold = {n: _norm(n) in golds for n in g.nodes}
    size = min(16.0, 6.0 + 0.25 * len(g))
    fig = Figure(figsize=(size, size * 0.7))
    ax = fig.add_subplot()
    ax.set_axis_off()
    fill = {n: ANSWER_FILL if is_pred[n] else TOPIC_FILL if n in topic else OTHER_FILL for n in g.nodes}
    for shape, ring in (("s", False), ("o", False), ("s", True), ("o", True)):
        nodes = [n for n in g.nodes if ("s" if n in topic else "o") == shape and is_gold[n] == ring]
        if nodes:
            nx.draw_networkx_nodes(g, pos, nodelist=nodes, node_shape=shape, ax=ax, node_size=520,
                                   node_color=[fill[n] for n in nodes], edgecolors=GOLD_RING if ring else "#555555",
                                   linewidths=3.0 if ring else 1.0)
    nx.draw_networkx_labels(g, pos, labels={n: _short(n) for n in g.nodes}, font_size=8, ax=ax, clip_on=False)
    seen: dict[tuple[str, str], int] = {}
    for h, t, k, d in g.edges(keys=True, data=True):
        i = seen[(h, t)] = seen.get((h, t), -1) + 1  # parallel edges bend apart
        nx.draw_networkx_edges(g, pos, edgelist=[(h, t, k)], ax=ax, edge_color=[colour[d["group"]]], arrows=True,
                               arrowsize=12, node_size=520, connectionstyle=f"arc3,rad={0.08 + 0.12 * i}")
    labels = {(h, t, k): _short(d["relation"].rsplit(".", 1)[-1] if d["relation"].count(".") > 1 else d["relation"], 24)
              for h, t, k, d in g.edges(keys=True, data=True)}
    nx.draw_networkx_edge_labels(g, pos, edge_labels=labels, font_size=6, ax=ax, connectionstyle="arc3,rad=0.08",
                                 bbox={"alpha": 0.6, "color": "white", "linewidth": 0}, clip_on=False)
    handles = [Line2D([0], [0], color=colour[grp], lw=2, label=_short(grp, 60)) for grp in groups]
    marker = dict(color="w", markeredgecolor="#555555", markersize=9)
    if topic & set(g.nodes):  # yellow unless every drawn topic entity is a predicted answer (then green)
        plain = any(n in topic and not is_pred[n] for n in g.nodes)
        handles.append(Line2D([0], [0], marker="s", markerfacecolor=TOPIC_FILL if plain else OTHER_FILL,
                              label="topic entity", **marker))
    if any(is_pred.values()):
        handles.append(Line2D([0], [0], marker="o", markerfacecolor=ANSWER_FILL, label="predicted answer", **marker))
    if any(is_gold.values()):
        handles.append(Line2D([0], [0], marker="o", color="w", markerfacecolor=OTHER_FILL, markeredgecolor=GOLD_RING,
                              markeredgewidth=3, markersize=9, label="gold answer"))
    ax.legend(handles=handles, loc="upper left", fontsize=7, frameon=True, bbox_to_anchor=(0, 1.0))
    fig.tight_layout()
    _fit_texts(fig, ax)
    return fig


def _fit_texts(fig, ax, pad: float = 0.02, rounds: int = 4) -> None:
    """Widen ``ax``'s data limits until every text drawn in it (node names, edge labels) lies
    inside the axes, so none is cut at the picture's edge (a long topic name at the left of a
    ToG beam was). Texts keep their size in points while the limits grow, so this is repeated a
    few times until nothing sticks out."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    for _ in range(rounds):
        renderer = canvas.get_renderer()
        texts = [t for t in ax.texts if t.get_visible() and t.get_text()]
        if not texts:
            return
        boxes = [t.get_window_extent(renderer) for t in texts]
        box = ax.get_window_extent(renderer)
        x0, y0 = min(b.x0 for b in boxes), min(b.y0 for b in boxes)
        x1, y1 = max(b.x1 for b in boxes), max(b.y1 for b in boxes)
        if x0 >= box.x0 and y0 >= box.y0 and x1 <= box.x1 and y1 <= box.y1:
            return
        inv = ax.transData.inverted()
        (dx0, dy0), (dx1, dy1) = inv.transform((x0, y0)), inv.transform((x1, y1))
        (lx0, lx1), (ly0, ly1) = ax.get_xlim(), ax.get_ylim()
        wx, wy = pad * (max(lx1, dx1) - min(lx0, dx0)), pad * (max(ly1, dy1) - min(ly0, dy0))
        ax.set_xlim(min(lx0, dx0 - wx), max(lx1, dx1 + wx))
        ax.set_ylim(min(ly0, dy0 - wy), max(ly1, dy1 + wy))


# ----------------------------------------------------------------------------- the page

_CSS = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.3em} h2{font-size:1.1em;margin-top:1.6em;border-bottom:1px solid #ddd}
pre{white-space:pre-wrap;word-break:break-word;background:#f6f8fa;padding:.6em;border-radius:4px;font-size:.85em}
table{border-collapse:collapse;font-size:.85em} td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left}
.meta td:first-child{font-weight:bold} details{margin:.4em 0} summary{cursor:pointer}
.role{font-weight:bold;color:#555} .err{color:#b00020} .figure svg{max-width:100%;height:auto}
.funnel tr.yes td:last-child{color:#1a7f37} .funnel tr.no td:last-child{color:#b00020}
"""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _json(x: Any, limit: int = 20000) -> str:
    text = json.dumps(x, indent=1, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit] + f"\n… ({len(text) - limit} more characters)"


def _describe(record: Mapping[str, Any]) -> dict[str, str]:
    """Reasoner, KG, dataset and model of a run, from its record's choices (a Hydra run) or its
    config's targets (a run started from Python)."""
    choices = record.get("choices") or {}
    cfg = record.get("config") or {}
    out = {}
    for group in ("reasoner", "kg", "dataset", "llm", "retriever", "ablation"):
        v = choices.get(group)
        node = cfg.get(group) if isinstance(cfg.get(group), Mapping) else {}
        if not v and node:
            v = node.get("name") or str(node.get("_target_", "")).rsplit(".", 1)[-1]
        if group == "llm" and node.get("model"):
            v = f"{v or '?'} ({node['model']})"
        if v and not (group == "ablation" and v == "none"):
            out[group] = str(v)
    return out


def _call_html(i: int, s: Mapping[str, Any]) -> str:
    d = s.get("data") or {}
    usage = d.get("usage") or {}
    flags = [f"prompt {d['prompt_id']}" if d.get("prompt_id") else "",
             "from the call cache" if d.get("cached") else "", f"re-ask {d['attempt']}" if d.get("attempt") else "",
             "" if d.get("parse_ok", True) else "reply did not parse",
             f"temperature {d['temperature']}" if d.get("temperature") is not None else "",
             f"{usage.get('prompt_tokens', 0)} + {usage.get('completion_tokens', 0)} tokens" if usage else ""]
    parts = [f'<details class="call" open><summary>call {i}: <b>{_e(s.get("name"))}</b> '
             f'— {_e(", ".join(f for f in flags if f))}</summary>']
    for m in d.get("messages") or []:
        parts.append(f'<div class="role">{_e(m.get("role", "?"))}</div><pre class="prompt">{_e(m.get("content", ""))}</pre>')
    for j, r in enumerate(d.get("replies") or []):
        parts.append(f'<div class="role">reply{f" {j + 1}" if len(d.get("replies") or []) > 1 else ""}</div>'
                     f'<pre class="reply">{_e(r)}</pre>')
    if "parsed" in d:
        if d.get("parse_ok", True):
            parts.append(f'<div class="role">parsed</div><pre>{_e(_json(d["parsed"], 4000))}</pre>')
        elif d["parsed"] not in (None, "", [], {}):  # what the parser salvaged from a reply it refused
            parts.append('<div class="role">the parser\'s fallback (the reply did not parse as asked)</div>'
                         f'<pre>{_e(_json(d["parsed"], 4000))}</pre>')
    parts.append("</details>")
    return "\n".join(parts)


def funnel_html(extra: Mapping[str, Any] | None, stages: Sequence[str] = (), errored: bool = False) -> str:
    """One question's funnel as a table: each stage in order (``stages``, then any other stage the
    row recorded) with ``passed``, ``not reached`` or the branch taken; the first bool stage not
    reached is marked. ``""`` when the row records no stage."""
    from kgreason.metrics.funnel import question_funnel

    got = question_funnel(extra, stages)
    if not any(isinstance(v, str) or v is True for _, v in got) and not (extra or {}).get("funnel"):
        return ""
    lost = next((s for s, v in got if v is False), None)
    rows = []
    for stage, v in got:
        text = f"= {v}" if isinstance(v, str) else ("passed" if v else "not reached")
        mark = " ← first stage not reached" if stage == lost else ""
        rows.append(f'<tr class="{"yes" if v else "no"}"><td>{_e(stage)}</td><td>{_e(text)}{_e(mark)}</td></tr>')
    note = ("<p>This question errored: the run's funnel rates count it as reaching no stage; the stages "
            "below are what it recorded before it failed.</p>" if errored else "")
    return (note + '<table class="funnel"><tr><th>stage</th><th>this question</th></tr>' + "".join(rows)
            + "</table>")


def question_page(row: Mapping[str, Any], record: Mapping[str, Any] | None = None, *, source: str = "",
                  stages: Sequence[str] = ()) -> str:
    """The HTML page of one prediction row (see the module docstring). ``record``: the run's
    ``run.json`` (or what ``kgreason ask`` composed); ``source``: where the row came from;
    ``stages``: the reasoner's funnel order (the run's ``metrics.json`` ``funnel/_stages``,
    :func:`load_stages`; empty: the order the row recorded them)."""
    record = record or {}
    trace = list(row.get("trace") or [])
    preds = [str(a) for a in row.get("predictions") or ([row["prediction"]] if row.get("prediction") else [])]
    sub = subgraph_of(trace)
    gold = [str(g) for g in (row.get("answers") or row.get("diagnoses") or [])]
    svg = draw_svg(sub, preds, gold=gold)
    title = str(row.get("question", ""))
    meta = {"example": row.get("id", "?"), **_describe(record)}
    if source:
        meta["from"] = source
    p = [f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{_e(_short(title, 80))}</title>"
         f"<style>{_CSS}</style></head><body>",
         f'<h1 class="question">{_e(title)}</h1>',
         '<table class="meta">' + "".join(f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>" for k, v in meta.items()) + "</table>",
         "<h2>Answer</h2>",
         f'<p class="answer"><b>{_e(preds[0]) if preds else "(no answer)"}</b>'
         + (f" (ranked: {_e('; '.join(preds))})" if len(preds) > 1 else "") + "</p>"]
    if row.get("error"):
        p.append(f'<p class="err">error: {_e(row["error"])}</p>')
    if gold:
        p.append(f"<p>gold: {_e('; '.join(map(str, gold)))}</p>")
    scores = {k: v for k, v in (row.get("metrics") or {}).items() if v is not None}
    if scores:
        p.append("<p>scores: " + ", ".join(f"{_e(k)} = {_e(round(v, 4) if isinstance(v, float) else v)}"
                                           for k, v in scores.items()) + "</p>")
    calls = [s for s in trace if s.get("kind") == "llm"]
    cached = sum(1 for s in calls if (s.get("data") or {}).get("cached"))
    p.append(f"<p>{len(calls)} model call(s)" + (f", {cached} of them replayed from the call cache" if cached else "")
             + "</p>")
    funnel = funnel_html(row.get("extra"), stages, errored=bool(row.get("error")))
    if funnel:
        p.append("<h2>Funnel: the stages this question passed</h2>")
        p.append(funnel)
    p.append("<h2>Subgraph the method used</h2>")
    if svg:
        n = len(sub["edges"])
        shown = f"{min(n, MAX_DRAWN_EDGES)} of {n} edges drawn" if n > MAX_DRAWN_EDGES else f"{n} edges"
        drawn = {_norm(n) for h, _r, t, _g in sub["edges"][:MAX_DRAWN_EDGES] for n in (h, t)}
        marks = "topic entities square, predicted answers green" + (", gold answers ringed" if gold else "")
        p.append(f'<p>{_e("; ".join(sub["what"]))} ({shown}; {marks}).</p>')
        absent = [g for g in gold if _norm(g) not in drawn]
        if absent:
            p.append(f'<p class="nogold">gold answer(s) not in the drawn subgraph: {_e("; ".join(absent[:10]))}</p>')
        p.append(f'<div class="figure">{svg}</div>')
        p.append('<details><summary>the edges as a table</summary><table class="edges"><tr><th>group</th><th>head</th>'
                 "<th>relation</th><th>tail</th></tr>"
                 + "".join(f"<tr><td>{_e(g)}</td><td>{_e(h)}</td><td>{_e(r)}</td><td>{_e(t)}</td></tr>"
                           for h, r, t, g in sub["edges"]) + "</table></details>")
    else:
        p.append('<p class="nograph">This method recorded no KG facts for this question (it answers without '
                 "retrieval, or retrieved nothing).</p>")
    p.append("<h2>Model calls, in order</h2>")
    p += [_call_html(i + 1, s) for i, s in enumerate(calls)] or ["<p>none</p>"]
    others = [s for s in trace if s.get("kind") != "llm"]
    if others:
        p.append("<h2>Other steps</h2>")
        p += [f'<details class="step"><summary>{_e(s.get("kind"))} {_e(s.get("name"))}</summary>'
              f"<pre>{_e(_json(s.get('data') or {}))}</pre></details>" for s in others]
    usage = row.get("llm_usage") or {}
    if usage:
        p.append(f"<h2>Usage</h2><pre>{_e(_json(usage))}</pre>")
    p.append("</body></html>\n")
    return "\n".join(p)


# ----------------------------------------------------------------------------- kgreason show

def page_name(example_id: str) -> str:
    """A file name for an example's page (ids may hold ``/`` or other characters)."""
    return "question_" + re.sub(r"[^A-Za-z0-9._-]+", "_", str(example_id))[:120] + ".html"


def load_row(run_dir: Path, example_id: str) -> dict[str, Any]:
    """The last row of ``example_id`` in the run's ``predictions.jsonl`` (read only)."""
    from kgreason.runs import PredictionStore

    path = run_dir / "predictions.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file (give a run dir: it holds predictions.jsonl and run.json)")
    store = PredictionStore(path, repair=False)
    if example_id not in store.rows:
        ids = list(store.rows)
        have = f"{len(ids)} examples; e.g. {', '.join(ids[:5])}" if ids else "no rows yet"
        raise KeyError(f"{path} has no example {example_id!r} ({have})")
    return store.rows[example_id]


def load_record(run_dir: Path) -> dict[str, Any]:
    try:
        return json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def load_stages(run_dir: Path) -> list[str]:
    """The run's funnel stage order (``metrics.json`` ``funnel/_stages``; empty when it has none)."""
    try:
        stages = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8")).get("funnel/_stages")
    except (OSError, ValueError, AttributeError):
        return []
    return [str(x) for x in stages] if isinstance(stages, list) else []


def write_page(run_dir: str | Path, example_id: str, out: str | Path | None = None) -> Path:
    """Write the page of one example of a finished (or partial) run; default
    ``<run dir>/questions/question_<id>.html``. Returns its path."""
    run_dir = Path(run_dir)
    if run_dir.suffix == ".jsonl" and run_dir.is_file():  # the run's predictions.jsonl named instead of its dir
        run_dir = run_dir.parent
    row = load_row(run_dir, example_id)
    out = Path(out) if out else run_dir / "questions" / page_name(example_id)
    page = question_page(row, load_record(run_dir), source=str(run_dir), stages=load_stages(run_dir))
    out.parent.mkdir(parents=True, exist_ok=True)
    return write_text_file(out, page)  # whole or not at all (never an empty page); an error names the file


def show_main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kgreason show",
                                 description="One example of a run as an HTML page: its answer, the funnel stages it "
                                             "passed, every model call (prompt and reply) and a drawing of the "
                                             "subgraph the method used.")
    ap.add_argument("run_dir", help="a run dir (holds predictions.jsonl and run.json), or its predictions.jsonl")
    ap.add_argument("example_id", help="the example's id (the `id` of its predictions.jsonl row)")
    ap.add_argument("--out", default=None, help="the page to write (default <run dir>/questions/question_<id>.html)")
    args = ap.parse_args(argv)
    from kgreason import progress

    progress.tool_log()
    try:
        # a line each interval while it works (a long predictions.jsonl read, a large subgraph laid out)
        with progress.stage(f"kgreason show: the page of {args.example_id}", lazy=True):
            path = write_page(args.run_dir, args.example_id, args.out)
    except (OSError, KeyError, UnicodeDecodeError) as e:  # a page that cannot be written, a file that is not text
        from kgreason.tables.cli import error_text

        print(f"kgreason show: error: {error_text(e)}", file=sys.stderr)
        return 2
    print(path)
    return 0


__all__ = ["subgraph_of", "draw_svg", "funnel_html", "question_page", "page_name", "load_row", "load_stages",
           "write_page", "show_main"]
