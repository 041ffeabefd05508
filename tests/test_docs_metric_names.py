"""Docs name only metrics that exist (issue 29).

Scans docs/*.md, README.md and experiments/*/README.md for namespaced metric names
(``metric/...``, ``llm/...``, ``judge/...``, ``dx/...``, ``retrieval/...``) and fails on a name
no code produces. What the code produces is collected, not typed in:

* ``metric/<name>`` for every metric of the registry (``kgreason.metrics.METRICS``);
* the ``metrics.json`` keys of real small runs: the embedded default (``retrieval_only``) and
  ``logoskg_dx`` on the embedded clinical world with a scripted LLM and the PDSQI judge on a
  scripted judge model (diagnosis rounds, ``judge/*``, ``llm/answer/*``, ``llm/judge/*``);
* ``kgreason.llm.accounting.ledger_metrics`` on a ledger holding every LLM purpose (``llm/index/*``,
  ``llm/score/*`` are only produced by runs with those calls: SubQRAG's index, log-prob scoring);
* ``ONLY_ON_FAILURE`` below: keys written only when something fails, with the reason.

Placeholders in the docs match any one path segment (``<round>``, ``<attr>``, ``<purpose>``),
``*`` and ``...`` match anything, ``{a,b}`` expands. A path with a file extension
(``retrieval/base.py``) or inside a longer path (``kgreason/llm/...``) is not a metric name.

Allowlist: an HTML comment ``<!-- metric-names-allow: PATTERN PATTERN -->`` in a scanned file
lets names matching those glob patterns pass (for a rename landing from another branch).
"""

from __future__ import annotations

import fnmatch
import json
import re
from pathlib import Path

import pytest

from conftest import compose_cfg

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted([*REPO.glob("docs/*.md"), REPO / "README.md", *REPO.glob("experiments/*/README.md")])

# keys the code writes only when something goes wrong (a run of the tests above cannot show them)
ONLY_ON_FAILURE = {
    "judge/errors": "run.summarise: examples whose judge call failed (absent when none failed)",
}

NAME = re.compile(r"(?<![\w/.\-])((?:metric|llm|judge|dx|retrieval)/(?:<[^>`]*>|[A-Za-z0-9_{},*.\-/])+)")
PATH_EXT = re.compile(r"\.(py|ya?ml|txt|json|jsonl|md|csv|png|sh|ipynb|rrf)$", re.I)
ALLOW = re.compile(r"<!--\s*metric-names-allow:\s*(.*?)\s*-->", re.S)


def _expand(s: str) -> list[str]:
    m = re.search(r"\{([^{}]*)\}", s)
    if not m:
        return [s]
    return [x for alt in m.group(1).split(",") for x in _expand(s[: m.start()] + alt + s[m.end():])]


def _regex(name: str) -> re.Pattern:
    out, i = "", 0
    while i < len(name):
        if name.startswith("...", i):
            out, i = out + ".*", i + 3
        elif name[i] == "<":
            j = name.index(">", i)
            out, i = out + "[^/]+", j + 1
        elif name[i] == "*":
            out, i = out + ".*", i + 1
        else:
            out, i = out + re.escape(name[i]), i + 1
    return re.compile(out + r"\Z")


def doc_names(text: str) -> list[tuple[int, str]]:
    """``(line, name)`` of every metric name in a markdown text (see the module docstring)."""
    found = []
    for m in NAME.finditer(text):
        raw = m.group(1)
        name = raw if raw.endswith("...") else raw.rstrip(".,;:")
        if PATH_EXT.search(name):
            continue
        if name.endswith("/"):
            name += "*"
        found.append((text.count("\n", 0, m.start()) + 1, name))
    return found


def test_scanner_reads_names_and_skips_paths():
    text = ("`metric/hits_at_1`, `llm/<purpose>/<same fields>`; kgreason/llm/parsing.py, "
            "`retrieval/base.py`, logoskg_dx/<date>, `judge/...`, `dx/<round>_p`, llm/calls.")
    assert [n for _, n in doc_names(text)] == ["metric/hits_at_1", "llm/<purpose>/<same fields>", "judge/...",
                                               "dx/<round>_p", "llm/calls"]
    assert _expand("metric/dx_{a,b}_{p,r}") == ["metric/dx_a_p", "metric/dx_a_r", "metric/dx_b_p", "metric/dx_b_r"]
    assert _regex("judge/<round>/accurate").match("judge/round1/accurate")
    assert not _regex("dx/<round>_p").match("metric/dx_round1_precision")


@pytest.fixture(scope="module")
def produced(tmp_path_factory) -> set[str]:
    from omegaconf import open_dict

    from kgreason.llm.accounting import PURPOSES, Ledger, ledger_metrics
    from kgreason.metrics import METRICS
    from kgreason.runner.run import run

    keys = {f"metric/{m}" for m in METRICS} | set(ONLY_ON_FAILURE)
    base = tmp_path_factory.mktemp("default")
    keys |= set(run(compose_cfg(["tracking=jsonl", "dataset.limit=5", "reports.hop_distribution=false"], base),
                    base / "run").metrics)
    dx = tmp_path_factory.mktemp("dx")
    cfg = compose_cfg(["reasoner=logoskg_dx", "dataset=embedded_clinical", "llm=scripted", "judge=pdsqi",
                       "llm@judge.llm=scripted", "judge.llm.model=scripted-judge", "dataset.limit=2",
                       "tracking=none", "reasoner.hops=2"], dx)
    scores = {a: 4 for a in ("cited", "accurate", "thorough", "useful", "organized", "comprehensible",
                             "succinct", "synthesized")}
    scores.update(abstraction_needed=1, stigmatizing=0, stigmatizing_record=0)
    with open_dict(cfg):
        cfg.judge.llm.rules = [{"pattern": "Diagnostic output to evaluate", "reply": json.dumps(scores)}]
        cfg.llm.rules = [{"pattern": "Candidate diagnoses:", "reply": '["Zoutrix syndrome"]'},
                         {"pattern": "most likely diagnoses", "reply": '["Grouwai syndrome"]'}]
    keys |= set(run(cfg, dx / "run").metrics)
    keys |= set(ledger_metrics([Ledger.from_json({p: {"calls": 1} for p in PURPOSES})], 1))
    # text-QA figures (rag_text / SubQRAG rows carry pool_size; the runs above are KGQA and Dx)
    from kgreason.runner.run import retrieval_figures

    keys |= set(retrieval_figures([{"extra": {"pool_size": 3}}]))
    assert "metric/dx_round2_f1" in keys and "judge/round1/accurate" in keys and "llm/answer/calls" in keys
    return keys


def _allowed() -> list[str]:
    return [p for f in DOCS for m in ALLOW.finditer(f.read_text()) for p in m.group(1).split()]


def test_docs_name_only_metrics_the_code_produces(produced):
    allow = _allowed()
    bad = []
    for f in DOCS:
        for line, name in doc_names(f.read_text()):
            for variant in _expand(name):
                if any(fnmatch.fnmatchcase(variant, a) for a in allow):
                    continue
                rx = _regex(variant)
                if not any(rx.match(k) for k in produced):
                    bad.append(f"{f.relative_to(REPO)}:{line}: {variant}")
    assert not bad, "docs name metrics no code produces:\n" + "\n".join(bad)


def test_preset_readmes_name_the_metric_their_table_uses(tmp_path):
    """An experiment README that names run metrics names its table's own (the preset's first
    metrics, tests/metrics/test_presets.py), and only metrics that preset computes: the ReKnoS
    and baseline READMEs said "compare `metric/hits_at_1`" where the table's Hits@1 is
    `tog_hits_at_1`."""
    from tests.metrics.test_presets import TABLE_COLUMNS

    bad = []
    for preset, (cols, ours) in sorted(TABLE_COLUMNS.items()):
        readme = REPO / "experiments" / preset / "README.md"
        if not readme.is_file():
            continue
        named = {n.split("/", 1)[1] for _, n in doc_names(readme.read_text()) if n.startswith("metric/")}
        if not named:
            continue
        computed = set(compose_cfg([f"experiment={preset}"], tmp_path).dataset.metrics)
        for col, m in zip(cols, ours):
            if m not in named:
                bad.append(f"{readme.relative_to(REPO)}: names run metrics but not `metric/{m}` ({col})")
        for n in sorted(x for v in named for x in _expand(v)):
            if not any(_regex(n).match(c) for c in computed):
                bad.append(f"{readme.relative_to(REPO)}: `metric/{n}` is not computed by experiment={preset}")
    assert not bad, "\n".join(bad)
