"""Configs are code: every option of every group composes into the component it names, every
ablation bundle sets its fields on the reasoner it is named after, every experiment preset's
overrides take effect, and ``run.build`` injects the run's shared resources into every reasoner.
"""

from __future__ import annotations

import pytest
import yaml
from hydra.utils import get_class, get_object, instantiate
from omegaconf import OmegaConf

from conftest import REPO, compose_cfg

CONF = REPO / "conf"
GROUPS = ["dataset", "kg", "retriever", "reasoner", "llm", "embedder", "graphdb", "judge", "tracking", "ablation"]
# ablation file prefix → reasoner it belongs to (when they differ)
ABLATION_OWNER = {"dx": "logoskg_dx"}
# groups whose options are "nothing" (no _target_)
EMPTY = {("judge", "none"), ("graphdb", "none"), ("ablation", "none")}

REASONERS = {
    "retrieval_only": "kgreason.reasoners.retrieval_only.RetrievalOnly", "io": "kgreason.reasoners.io.IO",
    "cot": "kgreason.reasoners.cot.CoT", "rag": "kgreason.reasoners.rag.RAG",
    "rag_text": "kgreason.reasoners.rag_text.RagText", "tog": "kgreason.reasoners.tog.ToG",
    "sgr": "kgreason.reasoners.sgr.SGR", "reknos": "kgreason.reasoners.reknos.ReKnoS",
    "subqrag": "kgreason.reasoners.subqrag.SubQRAG", "kg_dx": "kgreason.reasoners.kg_dx.KGDx",
    "logoskg_dx": "kgreason.reasoners.logoskg_dx.LogosKGDx",
}
# reasoners that embed text: they must hold the run's one embedder
EMBEDS = {"rag", "rag_text", "sgr", "subqrag", "logoskg_dx"}


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def _file(group: str, option: str) -> dict:
    return yaml.safe_load((CONF / group / f"{option}.yaml").read_text()) or {}


@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS for o in options(g)])
def test_every_option_composes_into_its_own_file(group, option, tmp_path):
    """The composed node is the option's file (plus interpolations), and its target imports."""
    overrides = [f"{group}={option}"]
    if group == "ablation":
        prefix = option.split("_")[0]
        reasoner = ABLATION_OWNER.get(prefix, prefix)
        if (CONF / "reasoner" / f"{reasoner}.yaml").exists():
            overrides.append(f"reasoner={reasoner}")
    cfg = compose_cfg(overrides, tmp_path)
    resolved = OmegaConf.to_container(cfg, resolve=True)  # every interpolation resolves
    own = _file(group, option)
    if group == "ablation":  # a bundle of fields of other groups: each one lands there
        for g, fields in own.items():
            for k, v in fields.items():
                assert resolved[g][k] == v, f"ablation={option}: {g}.{k}"
        return
    if (group, option) in EMPTY:
        assert not (resolved.get(group) or {}).get("_target_")
        return
    node = OmegaConf.to_container(cfg[group], resolve=False)
    assert callable(get_object(node["_target_"]))
    for k, v in own.items():
        if k != "defaults":
            _assert_contains(node[k], v, f"{group}={option}: {k}")


def _assert_contains(got, want, where: str) -> None:
    """``want`` (a file's own values) holds in ``got`` (the composed node); a nested mapping in
    the file may override part of a node its defaults list pulls in (judge.llm)."""
    if isinstance(want, dict) and isinstance(got, dict):
        for k, v in want.items():
            assert k in got, f"{where}.{k} missing"
            _assert_contains(got[k], v, f"{where}.{k}")
    else:
        assert got == want, where


def test_default_run_is_the_documented_one(tmp_path):
    """``python -m kgreason``: retrieval_only over SciPy (within, both) on the embedded KG and
    questions, the local LLM (never built: the reasoner does not call it), kuzu as graph DB (never
    opened) and the MiniLM embedder (never loaded)."""
    from kgreason.embed import Embedder
    from kgreason.kg.cypher import LazyGraphDB
    from kgreason.llm.accounting import MeteredLLM
    from kgreason.llm.lazy import LazyLLM
    from kgreason.reasoners.retrieval_only import RetrievalOnly
    from kgreason.retrieval.prefetch import PrefetchingRetriever
    from kgreason.retrieval.scipy_engine import ScipyRetriever
    from kgreason.runner.run import build

    cfg = compose_cfg(["tracking=none"], tmp_path)
    assert cfg.dataset._target_ == "kgreason.data.embedded.load_embedded" and cfg.dataset.task == "kgqa"
    assert cfg.llm._target_ == "kgreason.llm.local.LocalLLM" and cfg.graphdb.engine == "kuzu"
    with build(cfg, tmp_path) as c:
        assert isinstance(c.reasoner, RetrievalOnly)
        assert isinstance(c.retriever, PrefetchingRetriever) and c.retriever.chunk_size == 64
        inner = c.retriever.inner
        assert isinstance(inner, ScipyRetriever)
        assert (inner.semantics.value, inner.direction.value) == ("within", "both")
        assert isinstance(c.llm, MeteredLLM) and c.llm.purpose == "answer"  # every call counted
        assert isinstance(c.llm.inner, LazyLLM) and not c.llm.inner.built
        assert isinstance(c.graphdb, LazyGraphDB) and not c.graphdb.opened
        assert isinstance(c.embedder, Embedder) and not c.embedder.loaded
        assert c.judge is None and [m.name for m in c.metrics] == list(cfg.dataset.metrics)
        assert c.kg.name == "embedded" and len(list(c.dataset)) == 300


@pytest.mark.parametrize("option", options("experiment"))
def test_every_experiment_applies_its_overrides(option, tmp_path):
    """Each ``override /group: option`` of the preset is the composed group, and each field the
    preset sets outside ``hydra`` is in the composed config."""
    cfg = compose_cfg([f"experiment={option}"], tmp_path)
    spec = _file("experiment", option)
    for item in spec.get("defaults", []):
        ((key, value),) = item.items()
        if key.startswith("override /"):
            group = key.removeprefix("override /")
            if group in ("hydra/launcher",):
                continue
            want = _file(group, value).get("_target_")
            assert cfg[group].get("_target_") == want, f"experiment={option}: {group}={value}"
    for group, fields in spec.items():
        if group in ("defaults", "hydra") or not isinstance(fields, dict):
            continue
        for k, v in fields.items():
            got = OmegaConf.to_container(cfg[group], resolve=False)[k]
            assert got == v, f"experiment={option}: {group}.{k}"


@pytest.mark.parametrize("option", [o for o in options("retriever") if o not in ("torch_cuda",)])
def test_retrievers_instantiate_on_embedded(option, tmp_path, embedded_kg):
    cfg = compose_cfg([f"retriever={option}"], tmp_path)
    r = instantiate(cfg.retriever, kg=embedded_kg)
    assert type(r) is get_class(cfg.retriever._target_)
    sub = r.retrieve([0, 1], 2)
    assert sub.hops == 2


def test_every_reasoner_has_an_expected_class():
    assert set(options("reasoner")) == set(REASONERS)


@pytest.mark.parametrize("option", options("reasoner"))
def test_build_injects_the_shared_resources(option, tmp_path):
    """run.build gives every reasoner the run's kg, retriever, llm, embedder and graph database
    (the constructor contract, docs/architecture.md); nothing heavy is loaded at build, except
    the graph DB that SGR opens up front; closing the components closes them."""
    from kgreason.runner.run import build

    cfg = compose_cfg([f"reasoner={option}", "llm=scripted", "tracking=none"], tmp_path)
    c = build(cfg, tmp_path)
    try:
        assert type(c.reasoner) is get_class(REASONERS[option])
        if hasattr(c.reasoner, "kg") and option not in ("subqrag",):
            assert c.reasoner.kg is c.kg
        if option in EMBEDS:
            assert c.reasoner.embedder is c.embedder
        assert not c.embedder.loaded and not c.llm.built
        assert c.graphdb.opened == (option == "sgr")
        if option == "sgr":
            assert c.reasoner.db is c.graphdb.open()
    finally:
        c.close()
    assert not c.graphdb.opened
    c.close()  # idempotent
    if option in ("kg_dx", "logoskg_dx"):  # hop distances are undirected: a one-way retriever is refused
        cfg = compose_cfg([f"reasoner={option}", "llm=scripted", "tracking=none", "retriever.direction=out"], tmp_path)
        with pytest.raises(Exception, match="direction=both"):
            build(cfg, tmp_path)


def test_sgr_without_a_graph_database_fails_at_build(tmp_path):
    from kgreason.runner.run import build

    cfg = compose_cfg(["reasoner=sgr", "graphdb=none", "llm=scripted", "tracking=none"], tmp_path)
    with pytest.raises(Exception, match="graphdb=kuzu"):
        build(cfg, tmp_path)
    cfg = compose_cfg(["reasoner=sgr", "graphdb=none", "ablation=sgr_no_cypher", "llm=scripted", "tracking=none"], tmp_path)
    with build(cfg, tmp_path) as c:
        assert c.graphdb is None and c.reasoner.db is None


_FIELDS: dict[str, set[str]] = {}


def _reasoner_fields(reasoner: str, tmp_path) -> set[str]:
    """The fields of ``reasoner``'s composed config (cached: composing is the slow part)."""
    if reasoner not in _FIELDS:
        _FIELDS[reasoner] = set(compose_cfg([f"reasoner={reasoner}"], tmp_path / f"fields_{reasoner}").reasoner)
    return _FIELDS[reasoner]


@pytest.mark.parametrize("option", [o for o in options("ablation") if o != "none"])
def test_ablation_rejected_by_wrong_reasoner(option, tmp_path, embedded_kg):
    """An ablation composed onto a reasoner that lacks a field it sets fails at instantiate, so a
    wrong ``reasoner=`` never runs silently as another method. Every ablation is tried: on
    retrieval_only, or, where retrieval_only has every field the ablation sets (subqrag_topk:
    ``top_k``), on the first reasoner that lacks one. An ablation whose fields every reasoner
    accepts would be rejected by none: that fails here too (issue 72, item 6: this test used to
    return early for ``subqrag_topk`` and check nothing)."""
    from kgreason.llm.scripted import ScriptedLLM
    from kgreason.retrieval.scipy_engine import ScipyRetriever

    fields = set(_file("ablation", option).get("reasoner") or {})
    assert fields, f"ablation {option} sets no reasoner field"
    wrong = [r for r in dict.fromkeys(["retrieval_only", *options("reasoner")])
             if fields - _reasoner_fields(r, tmp_path)]
    assert wrong, f"ablation {option}: every reasoner has the fields it sets ({sorted(fields)}); none would reject it"
    cfg = compose_cfg([f"ablation={option}", f"reasoner={wrong[0]}"], tmp_path)
    assert fields - set(compose_cfg([f"reasoner={wrong[0]}"], tmp_path / "b").reasoner)
    with pytest.raises(Exception, match="unexpected keyword"):
        instantiate(cfg.reasoner, kg=embedded_kg, retriever=ScipyRetriever(embedded_kg), llm=ScriptedLLM())


def test_the_none_ablation_sets_no_field():
    assert not _file("ablation", "none").get("reasoner")
