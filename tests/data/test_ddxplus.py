"""The one DDXPlus reader (kgreason/data/ddxplus.py): knowledge base → KG, patients → rows and
Examples; every error names the file, the line and the field."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kgreason.data import DataError
from kgreason.data.ddxplus import (
    is_default_answer, load_ddxplus_kg, read_conditions, read_evidences, read_patients,
)

DDX = Path(__file__).resolve().parents[1] / "assets" / "ddxplus"


def _triples(kg):
    return {(kg.entity_names[h], kg.relation_names[r], kg.entity_names[t]) for h, r, t in kg.triples}


def write(p: Path, text: str) -> Path:
    p.write_text(text, encoding="utf-8")
    return p


def test_ddxplus_kg_assets(tmp_path):
    kg = load_ddxplus_kg(DDX / "release_conditions.json", DDX / "release_evidences.json")
    assert kg.n_triples == 6 + 2
    cough = kg.entity_id("Do you have a cough?")
    assert kg.type_of(cough) == "evidence" and kg.type_of(kg.entity_id("URTI")) == "pathology"
    assert kg.find_entity("E_201") == cough and kg.find_entity("Pneumonie") == kg.entity_id("Pneumonia")
    assert ("URTI", "has_antecedent", "Have you traveled out of the country in the last 4 weeks?") in _triples(kg)


def test_dangling_evidence_names_file_line_and_field(tmp_path):
    text = (DDX / "release_conditions.json").read_text()
    bad = text.replace('"E_201": {}}, "antecedents": {}', '"E_999": {}}, "antecedents": {}')
    assert bad != text
    line = next(i for i, ln in enumerate(bad.splitlines(), 1) if '"Pneumonia"' in ln)
    with pytest.raises(DataError, match=rf"c.json:{line}: condition 'Pneumonia': field 'symptoms': "
                                        r"dangling reference: evidence 'E_999'"):
        load_ddxplus_kg(write(tmp_path / "c.json", bad), DDX / "release_evidences.json")


@pytest.mark.parametrize("mutate,match", [
    (lambda ev: ev["E_91"].pop("question_en"), r"evidence 'E_91': field 'question_en': expected a non-empty string"),
    (lambda ev: ev["E_91"].update(data_type="X"), r"evidence 'E_91': field 'data_type': expected one of"),
    (lambda ev: ev["E_91"].update(value_meaning=[1]), r"evidence 'E_91': field 'value_meaning'"),
])
def test_evidence_errors_name_line_and_field(tmp_path, mutate, match):
    ev = json.loads((DDX / "release_evidences.json").read_text())
    mutate(ev)
    text = json.dumps(ev, indent=1)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if ln.strip().startswith('"E_91"'))
    with pytest.raises(DataError, match=rf"e.json:{line}: {match}"):
        read_evidences(write(tmp_path / "e.json", text))


def test_condition_and_json_errors(tmp_path):
    with pytest.raises(DataError, match=r"c.json:3: condition 'X': field 'antecedents': expected an object"):
        read_conditions(write(tmp_path / "c.json", '{\n "Y": {"symptoms": {}, "antecedents": {}},\n'
                                                   ' "X": {"symptoms": {}}\n}'))
    with pytest.raises(DataError, match=r"j.json:2: invalid JSON"):
        read_conditions(write(tmp_path / "j.json", '{\n oops\n}'))
    with pytest.raises(DataError, match=r"missing.json: file not found"):
        read_evidences(tmp_path / "missing.json")


def test_patient_rows_carry_their_line(tmp_path):
    p = write(tmp_path / "p.csv", 'AGE,SEX,PATHOLOGY,EVIDENCES,INITIAL_EVIDENCE\n'
                                  '1,M,URTI,"[\'E_91\',\n\'E_201\']",E_91\n'  # a quoted field over two lines
                                  '2,F,URTI,"[\'E_91\'",E_91\n')
    rows = read_patients(p)
    assert [r.where for r in rows] == [f"{p}:2", f"{p}:4"]
    assert rows[0].literal("EVIDENCES", list) == ["E_91", "E_201"]
    with pytest.raises(DataError, match=rf"p.csv:4: field EVIDENCES: expected a Python/JSON list literal"):
        rows[1].literal("EVIDENCES", list)


@pytest.mark.parametrize("csv_text,match", [
    ("AGE,SEX,PATHOLOGY,EVIDENCES,INITIAL_EVIDENCE\n1,M,Flu,\"['E_91']\",E_91\n",
     r"bad.csv:2: field PATHOLOGY: unknown pathology 'Flu'"),
    ("AGE,SEX,PATHOLOGY,EVIDENCES,INITIAL_EVIDENCE\n1,M,URTI,\"['E_91']\",E_91\n1,M,URTI,\"{}\",E_91\n",
     r"bad.csv:3: field EVIDENCES: expected a list, got dict"),
    ("AGE,SEX,PATHOLOGY,EVIDENCES,INITIAL_EVIDENCE,DIFFERENTIAL_DIAGNOSIS\n1,M,URTI,\"['E_91']\",E_91,\"[['URTI']]\"\n",
     r"bad.csv:2: field DIFFERENTIAL_DIAGNOSIS\[0\]: expected \[pathology, probability\]"),
    ("AGE,SEX,PATHOLOGY,EVIDENCES,INITIAL_EVIDENCE,English Pathology\n1,M,URTI,\"['E_91']\",E_91,Pneumonia\n",
     r"bad.csv:2: field 'English Pathology'"),
])
def test_patient_errors_name_file_line_and_field(tmp_path, csv_text, match):
    from kgreason.data import load_ddxplus

    p = write(tmp_path / "bad.csv", csv_text)
    with pytest.raises(DataError, match=match):
        load_ddxplus(str(p), str(DDX / "release_conditions.json"), str(DDX / "release_evidences.json"))


def test_is_default_answer():
    ev = read_evidences(DDX / "release_evidences.json")
    binary = next(r for r in ev.values() if r["data_type"] == "B")
    assert is_default_answer(binary, "False") and not is_default_answer(binary, "True")
    cat = next(r for r in ev.values() if r["data_type"] in ("C", "M") and r.get("value_meaning"))
    dv = cat["default_value"]
    en = cat["value_meaning"][dv]["en"] if dv in cat["value_meaning"] else str(dv)
    assert is_default_answer(cat, en)
    other = next(m["en"] for k, m in cat["value_meaning"].items() if k != dv)
    assert not is_default_answer(cat, other)


def test_ddxplus_kg_shared(shared_data):
    d = shared_data / "ddxplus"
    kg = load_ddxplus_kg(d / "release_conditions.json", d / "release_evidences.json")
    cond = json.loads((d / "release_conditions.json").read_text())
    n_links = sum(len(c["symptoms"]) + len(c["antecedents"]) for c in cond.values())
    assert n_links == 888 and kg.n_triples == 888  # PROVENANCE: 888 condition-evidence links
    assert len(kg.entities_of_type("pathology")) == 49 and len(kg.entities_of_type("evidence")) == 223
    deg = np.bincount(kg.heads, minlength=kg.n_entities)
    assert deg[kg.entity_id("Spontaneous pneumothorax")] == 17


def test_shared_patients_read_by_line(shared_data):
    rows = read_patients(shared_data / "ddxplus" / "patients_val_sample588_karishmagrana.csv")
    assert len(rows) == 588 and rows[0].where.endswith("patients_val_sample588_karishmagrana.csv:2")
