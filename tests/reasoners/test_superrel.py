"""Super-relations on Freebase (reknos.txt §3.2): compound CVT relations group by the hierarchy of
their first hop, and the run reports the group-size histogram of its KG."""

from __future__ import annotations

import json

import pytest

from kgreason.kg.store import KG
from kgreason.reasoners.superrel import hierarchy_group, hierarchy_superrelations

# (relation as the freebase_slice loader writes it, its group, why)
GROUPS = [
    ("film.film.directed_by", "film.film", "plain domain.type.property: its domain.type"),
    ("award.award_category.winners|award.award_honor.award_winner", "award.award_category",
     "CVT path: the first hop's domain.type, not the CVT type award.award_honor"),
    ("people.person.spouse_s|people.marriage.spouse", "people.person", "CVT path (marriage)"),
    ("film.actor.film|film.performance.film", "film.actor", "CVT path (performance)"),
    ("nationality", "nationality", "no hierarchy: a group of its own"),
]


@pytest.mark.parametrize("rel, group, why", GROUPS)
def test_hierarchy_group_of_one_relation(rel, group, why):
    assert hierarchy_group(rel) == group, why


def test_compound_relations_join_their_first_hops_group():
    kg = KG.from_triples([
        ("a", "award.award_category.winners|award.award_honor.award_winner", "b"),
        ("a", "award.award_category.nominees|award.award_nomination.nominated_for", "c"),
        ("a", "award.award_category.category_of", "d"),
    ])
    sr = hierarchy_superrelations(kg)
    assert sr.names == ["award.award_category"]
    h = sr.histogram(kg)
    assert (h["n_groups"], h["singletons"], h["compound_relations"], h["sizes"]) == (1, 0, 2, {"3": 1})


@pytest.fixture(scope="module")
def fb15k237(shared_data):
    from kgreason.kg.loaders import load_freebase_slice

    d = shared_data / "freebase_fb15k237"
    if not (d / "train.txt.gz").exists():
        pytest.skip(f"{d} has no FB15k-237 splits")
    return load_freebase_slice([d / f"{s}.txt.gz" for s in ("train", "valid", "test")],
                               names=d / "entity2text.txt", relation_style="dot")


def test_freebase_slice_grouping(fb15k237):
    """FB15k-237's 237 relations (144 of them CVT paths). The domain.type prefix rule gave 159
    groups, 117 singletons, 113 of them compound names; grouping by the first hop gives 109
    groups, 64 singletons, and no group named after a CVT path."""
    kg = fb15k237
    sr = hierarchy_superrelations(kg)
    h = sr.histogram(kg)
    assert (h["n_relations"], h["compound_relations"]) == (237, 144)
    assert (h["n_groups"], h["singletons"]) == (109, 64)
    assert h["sizes"] == {"1": 64, "2": 19, "3": 12, "4": 6, "5": 3, "6": 2, "7": 1, "12": 1, "29": 1}
    assert sum(int(k) * v for k, v in h["sizes"].items()) == 237
    assert not any("|" in n for n in sr.names)
    old = {r.rsplit(".", 1)[0] for r in kg.relation_names}  # the prefix rule, for the record
    assert len(old) == 159


def test_the_run_reports_the_group_histogram(tmp_path):
    from conftest import compose_cfg

    from kgreason.runner.run import run

    out = tmp_path / "reknos"
    cfg = compose_cfg(["reasoner=reknos", "llm=scripted", "dataset.limit=1", "tracking=none"], out)
    res = run(cfg, out)
    rep = json.loads((out / "reasoner.json").read_text())["superrelations"]
    assert rep == res.reports["reasoner"]["superrelations"]
    assert rep["kg"] == "embedded" and rep["source"] == "hierarchy"
    assert sum(int(k) * v for k, v in rep["sizes"].items()) == rep["n_relations"]
