"""Every ablation acts (issue 41 item 3): each file of conf/ablation/ is run against ``none`` on a
tiny embedded dataset of its reasoner, with a scripted model (a control-flow test: the replies
are chosen so that the ablated step is reached), and the two runs must differ in the requests
sent to the model, in the predictions (answers, extra) or in the metrics; a difference in the
trace alone (a step logged that changed nothing the model saw or answered) does not count.

A new file in conf/ablation/ without a case here fails ``test_every_ablation_has_a_case``.
Timing fields (wall time, latency) are left out of the comparison; the control test shows two
``none`` runs compare equal, so "differs" is never an artefact of the clock.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from omegaconf import open_dict

from conftest import REPO, compose_cfg

ABLATIONS = sorted(p.stem for p in (REPO / "conf" / "ablation").glob("*.yaml") if p.stem != "none")

# LogosKG-Dx on the embedded clinical world (the rules of tests/reasoners/test_logoskg_dx.py):
# Round 1 picks from the candidates, Round 2 names one listed and one unlisted diagnosis
# Round 1 names diagnoses (one unknown); Round 2 picks a listed name and the first word of the first
# listed candidate (read as that candidate only under dx_round2_fuzzy_pick)
_DX_RULES = [
    {"pattern": r"Candidate diagnoses:\n- (\w+) ", "reply": '["{0}", "Zoutrix syndrome"]'},
    {"pattern": "most likely diagnoses", "reply": '["Grouwai syndrome", "Gehu disorder", "Made Up", "Zoutrix"]'},
]
_DX = {"over": ["reasoner=logoskg_dx", "dataset=embedded_clinical", "reasoner.hops=2"], "rules": _DX_RULES}
_DX3 = {"over": ["reasoner=logoskg_dx", "dataset=embedded_clinical", "reasoner.hops=3"], "rules": _DX_RULES}
_REKNOS = {"over": ["reasoner=reknos"], "rules": []}
# SGR's Eq. 2 call names the question's entity (V_q), so the run reaches the KG; the rest is empty
_SGR_STRUCT = {"pattern": r"Turn the question into a structured query.*Question: (?:Which company produced|Where was) "
                          r"(.+?)(?: born)?\?", "reply": '{{"entities": ["{0}"], "relations": [], "constraints": []}}'}
# reasoner.hops=2: the questions are 1-hop; the default 3 hops embeds ~1,600 candidate triples each
_SGR = {"over": ["reasoner=sgr", "reasoner.hops=2"], "rules": [_SGR_STRUCT]}
# the Eq. 2 entities link to nothing: full SGR takes the empty path, the dataset's topics do not
_SGR_TOPICS = {"over": ["reasoner=sgr", "reasoner.hops=2"], "rules": [
    {"pattern": "Turn the question into a structured query",
     "reply": '{"entities": ["Nobody Atall Xq"], "relations": [], "constraints": []}'}]}
# the embedded world's first question, "Which company produced <film>?": a schema written against
# the edge direction (the answer as head), and a Cypher query that finds the producer
_PRODUCED = r"Which company produced (.+?)\?"
_SGR_SCHEMA = {"over": ["reasoner=sgr", "reasoner.hops=2"], "rules": [
    _SGR_STRUCT,
    {"pattern": "knowledge graph expert.*?" + _PRODUCED,
     "reply": '{{"schema": [["?answer", "film.film.produced_by", "{0}"]], "answer": "?answer"}}'},
    {"pattern": _PRODUCED + ".*?Translate the question",  # the question opens the Cypher prompt (issue 70)
     "reply": "```cypher\nMATCH (f:Entity)-[a]->(c:Entity) WHERE f.name = '{0}' AND a.relation = "
              "'film.film.produced_by' RETURN DISTINCT c.name AS answer\n```"},
]}
# sgr_pooled_vote: direct reasoning finds nothing, the stepwise paths say one company and §3.5's paths
# another; the paper's rule takes Eq. 31's (§3.5 ran), the pooled vote (each family one unit) ties and
# keeps the stepwise answer, which voted first
_SGR_POOL = {"over": ["reasoner=sgr", "reasoner.hops=2"], "rules": [
    _SGR_STRUCT,
    {"pattern": "one step per reply", "reply": '{"triple": 1, "state": "s", "answer": "Alpha Pictures"}'},
    {"pattern": "one step at a time", "reply": '{"hypothesis": "h", "claims": [], "answer": "Beta Pictures"}'}]}
# sgr_rq_exact: the Eq. 2 relation phrase names no KG relation; by embedding it maps to produced_by
_SGR_RQ = {"over": ["reasoner=sgr", "reasoner.hops=2"], "rules": [
    {"pattern": r"Turn the question into a structured query.*Question: Which company produced (.+?)\?",
     "reply": '{{"entities": ["{0}"], "relations": ["produced"], "constraints": []}}'}]}
_SUBQRAG = {"subqrag": True}
_TOG = {"over": ["reasoner=tog"], "rules": []}  # nothing kept: ToG's empty-retrieval path
# ToG on the first question: the relation-pruning reply lists 4 relations for a width of 3, and the
# reasoning step never says {Yes}, so the search reaches the depth limit
_TOG_REL = {"over": ["reasoner=tog"], "rules": [
    {"pattern": "score relations.*Q: Which company produced",
     "reply": "1. {film.film.produced_by (Score: 0.4)}: a.\n2. {film.film.directed_by (Score: 0.3)}: b.\n"
              "3. {film.film.genre (Score: 0.2)}: c.\n4. {film.film.language (Score: 0.1)}: d."}]}

_TIMING = re.compile(r"(^|_|/)(wall|time|latency|elapsed|seconds|per_s|_s$|duration)|_s$|_ms$")


def _strip(node):
    """The run's content without clock readings."""
    if isinstance(node, dict):
        return {k: _strip(v) for k, v in node.items() if not _TIMING.search(str(k))}
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node


# SubQRAG as the presets run it: the pool (a small slice of the embedded world's passages) is
# indexed offline by the model (§2.1, kg_source=index), then the questions are answered. The
# director question's second sub-question ("Where was #1 born?") is not in the index, so it takes
# the corpus fallback (§2.3); the genre question gets a "sufficient" answer that no used triple
# names (what subqrag_require_grounded refuses).
PERSON, PLACE, FILM = "Fyry Cidrul", "Dazoville", "The Golden Signal"
_BORN = '[["Fyry Cidrul", "born in", "Dazoville"], ["Fyry Cidrul", "born in", "Atlantis"]]'


def _subqrag_rules(person_passage):
    """``person_passage``: the extraction replies for Fyry Cidrul's passage, in call order (the
    first is the offline index's)."""
    return [
        {"pattern": r"Decompose.*Question: Where was the director of (.+?) born\?",
         "reply": '["Who directed {0}?", "Where was #1 born?"]'},
        {"pattern": r"Decompose.*Question: (.+?)\n", "reply": '["{0}"]'},
        {"pattern": r"\[(\d+)\] The Golden Signal \| directed by \| Fyry Cidrul.*Question: Who directed",
         "reply": '{{"answer": "Fyry Cidrul", "used": [{0}], "sufficient": true}}'},
        {"pattern": r"\[(\d+)\] Fyry Cidrul \| born in \| Dazoville.*Question: Where was Fyry Cidrul born",
         "reply": '{{"answer": "Dazoville", "used": [{0}], "sufficient": true}}'},
        {"pattern": r"Triples:.*Question: What genre", "reply": '{"answer": "drama", "used": [], "sufficient": true}'},
        {"pattern": r"Triples:.*Question:", "reply": '{"answer": "unknown", "used": [], "sufficient": false}'},
        {"pattern": r"Passages:.*Question: Where was Fyry Cidrul born", "reply": '{"answer": "Dazoville"}'},
        {"pattern": r"Passages:.*Question:", "reply": '{"answer": "unknown"}'},
        {"pattern": r"Graph memory", "reply": '{"answer": "Dazoville"}'},
        {"pattern": r"Fyry Cidrul was born in Dazoville", "reply": list(person_passage)},
        {"pattern": r"The Golden Signal is a film directed by Fyry Cidrul",
         "reply": '[["The Golden Signal", "directed by", "Fyry Cidrul"]]'},
        {"pattern": r"\b([A-Z]\w+) is a city in (\w+)", "reply": '[["{0}", "city in", "{1}"]]'},
    ]


# the read passages hold indexed triples (what the fallback memory rules choose among)
_SUBQRAG = {"subqrag": _subqrag_rules(['[["Fyry Cidrul", "citizen of", "Brothailia"]]'])}
# the offline pass missed the person's birthplace, which the passage states: the graph update
# (Eq. 4) at the fallback is what finds it (a second extraction call gets it), and "w/o Update"
# must not; the other read passages hold no triple, so the memory rules cannot tell the runs apart
_SUBQRAG_MISSED = {"subqrag": _subqrag_rules(["[]", _BORN])[:-1]}


#: ablation → the run it is compared on (reasoner, data, scripted replies)
CASES: dict[str, dict] = {
    "dx_exact_k": _DX3, "dx_round1_only": _DX, "dx_round2_fuzzy_pick": _DX, "dx_round2_top50": _DX,
    "dx_tau_0_8": _DX, "dx_topn_20": _DX,
    "reknos_cluster_superrel": _REKNOS, "reknos_forward_only": _REKNOS, "reknos_no_fewshot": _REKNOS,
    "reknos_random_superrel": _REKNOS,
    "sgr_no_integration_weights": _SGR, "sgr_no_cypher": _SGR, "sgr_no_refine": _SGR, "sgr_no_schema": _SGR,
    "sgr_no_stepwise": _SGR, "sgr_dataset_topics": _SGR_TOPICS,
    "sgr_schema_either_way_fallback": _SGR_SCHEMA,
    "sgr_pooled_vote": _SGR_POOL, "sgr_rq_exact": _SGR_RQ,
    "subqrag_memory_answer_named": _SUBQRAG, "subqrag_no_decomposition": _SUBQRAG, "subqrag_no_rewriting": _SUBQRAG,
    "subqrag_no_update": _SUBQRAG_MISSED, "subqrag_require_grounded": _SUBQRAG, "subqrag_topk": _SUBQRAG,
    "subqrag_extract_top2": _SUBQRAG,  # the fallback's extraction call lists 2 of its 3 read passages
    "tog_bm25": _TOG, "tog_embedding": _TOG,
    # ablations of the empty-retrieval path and of ToG as released (issue 43, branch methods)
    "on_empty_abstain": _TOG, "tog_depth_limit_triplets": _TOG_REL, "tog_relation_cap_w": _TOG_REL,
}


@pytest.fixture(scope="module")
def small_world(world):
    """The passages of the person, the film and a few distractors of the embedded world."""
    kg, names = world.kg, world.kg.entity_names
    heads = {names[h] for h, _, _ in kg.triples[:60]}
    return [p for p in world.corpus if p[0] in {PERSON, FILM} | set(sorted(heads)[:8])]


def _run_subqrag(case: dict, ablation: str, out: Path, emb: Path, corpus) -> dict:
    """SubQRAG built from the composed config (its ablation included), indexing ``corpus``."""
    from hydra.utils import instantiate

    from kgreason.data.base import ExampleSet
    from kgreason.embed import Embedder
    from kgreason.llm.scripted import ScriptedLLM
    from kgreason.types import Example, to_jsonable

    cfg = compose_cfg(["reasoner=subqrag", f"ablation={ablation}", "llm=scripted", "tracking=none",
                       "reasoner.kg_source=index", f"reasoner.index_dir={out / 'index'}"], out)
    llm = ScriptedLLM(rules=case["subqrag"])
    r = instantiate(cfg.reasoner, kg=None, llm=llm, embedder=Embedder(cache_dir=str(emb)))
    docs = ExampleSet("docs", [])
    docs.corpus = list(corpus)
    r.prepare(docs)
    questions = [f"Where was the director of {FILM} born?", f"What genre is {FILM}?"]
    rows = [to_jsonable(r.answer(Example(id=f"q{i}", question=q, answers=(PLACE,)))) for i, q in enumerate(questions)]
    return {"requests": [[(m.role, m.content) for m in c.messages] for c in llm.calls], "rows": _strip(rows),
            "metrics": {}}


def _run(case: dict, ablation: str, out: Path, emb: Path, monkeypatch) -> dict:
    from kgreason.llm.scripted import ScriptedLLM
    from kgreason.runner.run import run

    made: list[ScriptedLLM] = []
    init = ScriptedLLM.__init__

    def spy(self, *a, **kw):
        init(self, *a, **kw)
        made.append(self)

    monkeypatch.setattr(ScriptedLLM, "__init__", spy)
    cfg = compose_cfg([*case["over"], f"ablation={ablation}", "llm=scripted", "dataset.limit=2", "tracking=none",
                       "llm_cache.mode=off", f"embedder.cache_dir={emb}"], out)
    with open_dict(cfg):
        cfg.llm.rules = list(case["rules"])
    res = run(cfg, out)
    monkeypatch.setattr(ScriptedLLM, "__init__", init)
    rows = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    requests = [[(m.role, m.content) for m in req.messages] for llm in made for req in llm.calls]
    return {"requests": requests, "rows": _strip(rows), "metrics": _strip(dict(res.metrics))}


@pytest.fixture(scope="module")
def emb(tmp_path_factory):
    return tmp_path_factory.mktemp("emb")


_BASELINES: dict[int, dict] = {}


def _seen(run: dict, part: str):
    """What an ablation must change: the requests the model saw, the predictions (answers, extra:
    the rows without their trace) or the metrics. A difference confined to the trace (a step
    logged that changed nothing the model saw or answered) is not an ablation acting."""
    if part == "predictions":
        return [{k: v for k, v in r.items() if k != "trace"} for r in run["rows"]]
    return run[part]


def test_every_ablation_has_a_case():
    missing = sorted(set(ABLATIONS) - set(CASES))
    assert not missing, f"give each conf/ablation/*.yaml file a case in CASES: {missing}"


@pytest.mark.slow  # about 55 s for the 23 ablations on 2 cores (MiniLM, kuzu export, SubQRAG index)
@pytest.mark.parametrize("ablation", ABLATIONS)
def test_ablation_changes_the_run(ablation, tmp_path, emb, monkeypatch, request):
    case = CASES[ablation]
    if case.get("subqrag"):
        corpus = request.getfixturevalue("small_world")
        go = lambda a, out: _run_subqrag(case, a, out, emb, corpus)  # noqa: E731
    else:
        go = lambda a, out: _run(case, a, out, emb, monkeypatch)  # noqa: E731
    key = id(case)
    if key not in _BASELINES:
        _BASELINES[key] = go("none", tmp_path / "none")
    base = _BASELINES[key]
    got = go(ablation, tmp_path / ablation)
    differs = [part for part in ("requests", "predictions", "metrics") if _seen(got, part) != _seen(base, part)]
    assert differs, f"ablation={ablation} gave the same requests, predictions and metrics as none"


def test_two_none_runs_compare_equal(tmp_path, emb, monkeypatch):
    """The control: the comparison sees no difference between two identical runs."""
    a = _run(_TOG, "none", tmp_path / "a", emb, monkeypatch)
    b = _run(_TOG, "none", tmp_path / "b", emb, monkeypatch)
    assert a == b and a["requests"] and a["rows"]
