"""The one diagnosis precision / recall / F1 (LogosKG App. A.2, Eq. 11-12): a golden table of
hand-computed cases, and the per-round metrics that score ``Prediction.rounds`` with it.

Rule pinned here (docs/metrics.md, kgreason/metrics/clinical.py): both sides become *sets* of
normalised strings (lower-case, ASCII punctuation deleted, whitespace collapsed, one leading
article a/an/the dropped); |pred ∩ gold| is the size of the set intersection. Empty prediction
set → P = R = F1 = 0; empty gold set → not applicable (None). Two strings are also one entity
when the run linked them to the same KG entity (names, labels, aliases; ``extra["dx_entity_links"]``
of the prediction row); without links (this table) only the string rule applies.
"""

from __future__ import annotations

import pytest

from kgreason.metrics import METRICS
from kgreason.metrics.clinical import dx_prf
from kgreason.types import Example, Prediction

# (predicted, gold, expected (P, R, F1) or None, why)
GOLDEN = [
    (["Pneumonia.", "the flu"], ["pneumonia", "Flu"], (1.0, 1.0, 1.0),
     "case, a trailing full stop and the article 'the' do not change the entity (issue 15 case)"),
    (["A", "b", "C", "d"], ["a", "c", "E"], (2 / 4, 2 / 3, 4 / 7),
     "2 of 4 predictions are gold, 2 of 3 gold found; F1 = 2(1/2)(2/3)/(1/2+2/3) = 4/7"),
    (["flu", "Flu", "cold"], ["flu"], (1 / 2, 1.0, 2 / 3),
     "'flu' and 'Flu' are one entity: the prediction set is {flu, cold}"),
    (["Flu", "cold", "asthma"], ["flu", "Pneumonia"], (1 / 3, 1 / 2, 2 / 5),
     "1 hit; P = 1/3, R = 1/2, F1 = 2(1/3)(1/2)/(1/3+1/2) = 2/5"),
    ([], ["asthma"], (0.0, 0.0, 0.0), "empty prediction: P = 0 by convention, R = 0"),
    (["...", "?!"], ["asthma"], (0.0, 0.0, 0.0), "predictions that normalise to nothing are dropped"),
    (["Hepatitis A", "an Influenza"], ["hepatitis", "Influenza"], (1 / 2, 1 / 2, 1 / 2),
     "only a LEADING article goes: 'Hepatitis A' stays distinct from 'Hepatitis'"),
    (["A"], ["a"], (1.0, 1.0, 1.0), "a lone article is a word, not a leading article"),
    (["Guillain-Barré syndrome"], ["Guillain Barré syndrome"], (0.0, 0.0, 0.0),
     "a hyphen is deleted, not turned into a space ('guillainbarré' vs 'guillain barré')"),
    (["asthma"], [], None, "no gold diagnosis: not applicable, left out of the mean"),
    (["x"], ["y"], (0.0, 0.0, 0.0), "no overlap"),
    (["URTI"], ["Upper respiratory tract infection"], (0.0, 0.0, 0.0),
     "without KG links an abbreviation is a different string (with links: LINKED below)"),
    (["Crohn\u2019s disease"], ["Crohn's disease"], (0.0, 0.0, 0.0),
     "only ASCII punctuation is dropped (SQuAD rule): a typographic apostrophe stays"),
    (["Acute pulmonary edema", "Pulmonary embolism"], ["pulmonary  embolism"], (1 / 2, 1.0, 2 / 3),
     "whitespace runs collapse"),
]


@pytest.mark.parametrize("pred,gold,expected,why", GOLDEN, ids=[g[3][:40] for g in GOLDEN])
def test_dx_prf_golden_table(pred, gold, expected, why):
    got = dx_prf(pred, gold)
    if expected is None:
        assert got is None, why
    else:
        assert got == pytest.approx(expected), why


def test_metric_objects_use_the_same_function():
    ex = Example(id="x", question="note", diagnoses=("pneumonia", "Flu"))
    p = Prediction("x", ("Pneumonia.", "the flu"))
    assert [METRICS[n].per_example(p, ex) for n in ("dx_precision", "dx_recall", "dx_f1")] == [1.0, 1.0, 1.0]


def test_per_round_metrics_score_the_prediction_rounds():
    ex = Example(id="x", question="note", diagnoses=("a", "c", "E"))
    p = Prediction("x", ("a",), rounds={"baseline": ("A", "b", "C", "d"), "round1": ("a", "c"), "round2": ()})
    got = {n: METRICS[n].per_example(p, ex) for n in METRICS if n.startswith("dx_") and "_round" in n
           or n.startswith("dx_baseline")}
    assert got["dx_baseline_precision"] == pytest.approx(0.5)
    assert got["dx_baseline_recall"] == pytest.approx(2 / 3)
    assert got["dx_baseline_f1"] == pytest.approx(4 / 7)
    assert (got["dx_round1_precision"], got["dx_round1_recall"]) == pytest.approx((1.0, 2 / 3))
    assert (got["dx_round2_precision"], got["dx_round2_f1"]) == (0.0, 0.0)  # an empty round scores 0
    # a round the prediction does not carry is not applicable (rounds=1 runs, kg_dx, errors)
    q = Prediction("x", ("a",), rounds={"baseline": ("a",)})
    assert METRICS["dx_round2_f1"].per_example(q, ex) is None
    assert METRICS["dx_round1_f1"].per_example(Prediction("x", ("a",)), ex) is None


def test_score_cli_reads_rounds_from_prediction_rows():
    from kgreason.score import ScoreInputError, parse_line

    row = {"id": "x", "prediction": "a", "answers": ["a", "c", "E"], "diagnoses": ["a", "c", "E"],
           "rounds": {"baseline": ["A", "b", "C", "d"], "round1": ["a"]}}
    pred, ex = parse_line(row, "p.jsonl:1")
    assert pred.rounds == {"baseline": ("A", "b", "C", "d"), "round1": ("a",)}
    assert METRICS["dx_baseline_f1"].per_example(pred, ex) == pytest.approx(4 / 7)
    with pytest.raises(ScoreInputError, match=r"p.jsonl:2: field 'rounds.round1' must be a string or a list"):
        parse_line({**row, "rounds": {"round1": [1]}}, "p.jsonl:2")


# KG-id matching (LogosKG A.2 is entity-level): (pred, gold, links, expected, why)
LINKED = [
    (["High Blood Pressure"], ["Hypertension"], {"High Blood Pressure": "C0020538", "Hypertension": "C0020538"},
     (1.0, 1.0, 1.0), "two UMLS names of one CUI are one entity"),
    (["URTI"], ["Upper respiratory tract infection"], {"URTI": "C0041912", "Upper respiratory tract infection": "C0041912"},
     (1.0, 1.0, 1.0), "an abbreviation the KG lists as an alias"),
    (["Diabetes", "Diabetes Mellitus", "Asthma"], ["diabetes mellitus"],
     {"Diabetes": "C0011849", "Diabetes Mellitus": "C0011849"}, (1 / 2, 1.0, 2 / 3),
     "two aliases of one predicted entity count once: pred = {C0011849, asthma}"),
    (["Diabetes"], ["Hypertension"], {"Diabetes": "C0011849", "Hypertension": "C0020538"},
     (0.0, 0.0, 0.0), "different entities stay different"),
    (["Pneumonia."], ["pneumonia"], {"pneumonia": "C0032285"},
     (1.0, 1.0, 1.0), "the string rule still holds when only one side links"),
    (["High Blood Pressure"], ["Hypertension", "HTN"], {"High Blood Pressure": "C0020538", "Hypertension": "C0020538",
                                                        "HTN": "C0020538"},
     (1.0, 1.0, 1.0), "two gold strings of one entity are one gold entity"),
    (["Flu"], ["Influenza"], {"Flu": "C0021400"}, (0.0, 0.0, 0.0), "one side linked, the other not: no match"),
]


@pytest.mark.parametrize("pred,gold,links,expected,why", LINKED, ids=[g[4][:40] for g in LINKED])
def test_dx_prf_entity_level_golden_table(pred, gold, links, expected, why):
    assert dx_prf(pred, gold, links) == pytest.approx(expected), why
    # the metric objects read the links the run records in the prediction's extra
    ex = Example(id="x", question="note", diagnoses=tuple(gold))
    p = Prediction("x", tuple(pred), extra={"dx_entity_links": links}, rounds={"round2": tuple(pred)})
    got = [METRICS[n].per_example(p, ex) for n in ("dx_precision", "dx_recall", "dx_f1")]
    assert got == pytest.approx(list(expected)), why
    assert METRICS["dx_round2_f1"].per_example(p, ex) == pytest.approx(expected[2]), why


def _umls_kg():
    from pathlib import Path

    from kgreason.kg.loaders import load_umls_rrf

    d = Path(__file__).resolve().parents[1] / "assets" / "umls"
    return load_umls_rrf(d / "MRCONSO.RRF", d / "MRREL.RRF", d / "MRSTY.RRF")


def test_entity_links_through_umls_names_and_aliases():
    """tests/assets/umls: C0011849 is 'Diabetes Mellitus' (preferred) and 'Diabetes' (MSH entry
    term); C0020538 is 'Hypertension' and 'High Blood Pressure'."""
    from kgreason.metrics.clinical import entity_links

    kg = _umls_kg()
    links = entity_links(kg, ["Diabetes", "diabetes mellitus", "High Blood Pressure", "Hypertension", "Gout"])
    assert links == {"Diabetes": "C0011849", "diabetes mellitus": "C0011849",
                     "High Blood Pressure": "C0020538", "Hypertension": "C0020538"}
    # a correct Round 2 pick under another label of the gold concept
    assert dx_prf(["Diabetes", "Gout"], ["Diabetes Mellitus"], entity_links(kg, ["Diabetes", "Gout",
                                                                                "Diabetes Mellitus"])) \
        == pytest.approx((1 / 2, 1.0, 2 / 3))
    assert dx_prf(["Diabetes", "Gout"], ["Diabetes Mellitus"]) == (0.0, 0.0, 0.0), "string rule alone: no match"


class _AliasReasoner:
    """Answers with the other UMLS name of each gold concept (a stand-in reasoner: control flow)."""

    def answer(self, ex):
        return Prediction(ex.id, ("Diabetes", "Gout"), rounds={"baseline": ("Gout",), "round1": (),
                                                               "round2": ("High Blood Pressure", "Diabetes")})


def test_run_scores_kg_alias_matches_and_score_cli_reproduces_them(tmp_path):
    """The run links predictions and golds to the KG, scores entity-level, and records the links
    in the row, so re-scoring predictions.jsonl offline gives the run's values."""
    import json

    from kgreason.runner.run import Components, _answer_and_score
    from kgreason.score import parse_line, score

    names = ["dx_precision", "dx_recall", "dx_f1", *[f"dx_{r}_{s}" for r in ("baseline", "round1", "round2")
                                                     for s in ("precision", "recall", "f1")]]
    c = Components(dataset=None, kg=_umls_kg(), retriever=None, llm=None, reasoner=_AliasReasoner(),
                   metrics=[METRICS[n] for n in names])
    ex = Example(id="p1", question="note", diagnoses=("Diabetes Mellitus", "Hypertension"))
    row = _answer_and_score(c, ex)
    m = row["metrics"]
    assert (m["dx_precision"], m["dx_recall"]) == pytest.approx((1 / 2, 1 / 2))
    assert (m["dx_round2_precision"], m["dx_round2_recall"], m["dx_round2_f1"]) == pytest.approx((1.0, 1.0, 1.0))
    assert m["dx_baseline_f1"] == 0.0 and m["dx_round1_f1"] == 0.0
    assert row["extra"]["dx_entity_links"]["High Blood Pressure"] == "C0020538"
    line = json.loads(json.dumps(row))  # what predictions.jsonl holds
    pred, ex2 = parse_line(line, "p.jsonl:1")
    assert score([(pred, ex2)], names) == pytest.approx(m)
