"""Configs are code: every option of every group composes; cheap ones instantiate; every
ablation bundle applies to the reasoner it is named after; every experiment preset composes."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from conftest import REPO, compose_cfg

CONF = REPO / "conf"
GROUPS = ["dataset", "kg", "retriever", "reasoner", "llm", "judge", "tracking", "ablation"]
# ablation file prefix → reasoner it belongs to (when they differ)
ABLATION_OWNER = {"dx": "logoskg_dx"}


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS for o in options(g)])
def test_every_option_composes(group, option, tmp_path):
    overrides = [f"{group}={option}"]
    if group == "ablation":
        prefix = option.split("_")[0]
        reasoner = ABLATION_OWNER.get(prefix, prefix)
        if (CONF / "reasoner" / f"{reasoner}.yaml").exists():
            overrides.append(f"reasoner={reasoner}")
    cfg = compose_cfg(overrides, tmp_path)
    OmegaConf.to_container(cfg, resolve=True)  # every interpolation resolves


@pytest.mark.parametrize("option", options("experiment"))
def test_every_experiment_composes(option, tmp_path):
    cfg = compose_cfg([f"experiment={option}"], tmp_path)
    assert cfg.reasoner._target_


@pytest.mark.parametrize("option", [o for o in options("retriever") if o not in ("torch_cuda",)])
def test_retrievers_instantiate_on_embedded(option, tmp_path, embedded_kg):
    cfg = compose_cfg([f"retriever={option}"], tmp_path)
    r = instantiate(cfg.retriever, kg=embedded_kg)
    sub = r.retrieve([0, 1], 2)
    assert sub.hops == 2


@pytest.mark.parametrize("option", options("reasoner"))
def test_reasoners_instantiate(option, tmp_path, embedded_kg):
    """Constructors take the injected kg/retriever/llm and reject nothing from their own YAML."""
    from kgreason.llm.scripted import ScriptedLLM
    from kgreason.retrieval.scipy_engine import ScipyRetriever

    cfg = compose_cfg([f"reasoner={option}"], tmp_path)
    # the retriever exactly as the default config builds it (scipy, direction both)
    instantiate(cfg.reasoner, kg=embedded_kg, retriever=instantiate(cfg.retriever, kg=embedded_kg), llm=ScriptedLLM())
    if option in ("kg_dx", "logoskg_dx"):  # hop distances are undirected: a one-way retriever is refused
        with pytest.raises(Exception, match="direction=both"):
            instantiate(cfg.reasoner, kg=embedded_kg, retriever=ScipyRetriever(embedded_kg, direction="out"),
                        llm=ScriptedLLM())


@pytest.mark.parametrize("option", options("ablation"))
def test_ablation_rejected_by_wrong_reasoner(option, tmp_path, embedded_kg):
    """An ablation that sets fields the chosen reasoner lacks fails at instantiate."""
    from kgreason.llm.scripted import ScriptedLLM
    from kgreason.retrieval.scipy_engine import ScipyRetriever

    cfg = compose_cfg([f"ablation={option}", "reasoner=retrieval_only"], tmp_path)
    if set(cfg.reasoner) <= set(compose_cfg(["reasoner=retrieval_only"], tmp_path / "b").reasoner):
        pytest.skip("ablation does not touch reasoner fields")
    with pytest.raises(Exception):
        instantiate(cfg.reasoner, kg=embedded_kg, retriever=ScipyRetriever(embedded_kg), llm=ScriptedLLM())
