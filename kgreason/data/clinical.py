"""Clinical datasets: DDXPlus (differential diagnosis) and ProbSum (problem-list summarisation).

**DDXPlus** (Tchango et al. 2022; CC-BY): a patients CSV with ``AGE, SEX, PATHOLOGY, EVIDENCES,
INITIAL_EVIDENCE, DIFFERENTIAL_DIAGNOSIS`` plus ``release_conditions.json`` and
``release_evidences.json``. Evidence codes are decoded to English (``question_en``; categorical /
multi-choice values ``E_55_@_V_123`` via ``value_meaning[...]["en"]``, numeric values as is).
Two releases exist:

* the English release: ``E_xx`` evidence codes, ``PATHOLOGY`` = condition key;
* the first, French-coded release (``'toux'``, ``'trav1_@_N'``; French pathology names): codes
  that ``release_evidences.json`` does not define are decoded from an ``English Evidences``
  column (``{question_en: answer}``) when the file has one, as the shared sample does; otherwise
  a :class:`DataError` names the record and the code. Pathology names map through
  ``cond-name-fr`` → ``cond-name-eng``.

Fields: ``findings`` = decoded evidence texts; ``topic_entities`` = the evidence questions
(entity names of ``kg=ddxplus``); ``diagnoses``/``answers`` = the English pathology name;
``extra.differential`` = ``[[English name, probability], ...]``.

**ProbSum** (BioNLP 2023 Task 1A, Gao et al.; PhysioNet credentialed, MIMIC-III derived): a CSV
with ``File ID, Assessment, Subjective Sections, Objective Sections, Summary``; the summary is
the problem list, ``;``-separated. ``question`` is the note (S + O + A), ``diagnoses`` the
problems.
"""

from __future__ import annotations

import ast
import csv
import json
from pathlib import Path
from typing import Any

from kgreason.data.base import DataError, ExampleSet
from kgreason.data.kgqa import hub_records, uniq
from kgreason.types import Example

DDX_COLUMNS = ("AGE", "SEX", "PATHOLOGY", "EVIDENCES", "INITIAL_EVIDENCE")
PROBSUM_COLUMNS = ("File ID", "Assessment", "Subjective Sections", "Objective Sections", "Summary")


def _read_csv(path: str | Path, required: tuple[str, ...]) -> list[dict[str, str]]:
    p = Path(path)
    if not p.is_file():
        raise DataError(f"{p}: file not found")
    with open(p, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames is None:
            raise DataError(f"{p}: empty file; expected a CSV header with {list(required)}")
        missing = [c for c in required if c not in reader.fieldnames]
        if missing:
            raise DataError(f"{p}: header lacks column(s) {missing}; found {reader.fieldnames}")
        rows = []
        for row in reader:
            if None in row:
                raise DataError(f"{p}:{reader.line_num}: more fields than the header's {len(reader.fieldnames)}")
            rows.append(row)
    if not rows:
        raise DataError(f"{p}: no data rows")
    return rows


def _read_json(path: str | Path) -> Any:
    p = Path(path)
    if not p.is_file():
        raise DataError(f"{p}: file not found")
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise DataError(f"{p}:{e.lineno}: invalid JSON ({e.msg})") from None


def _literal(text: str, where: str, what: str) -> Any:
    try:
        return ast.literal_eval(text) if text.strip() else []
    except (ValueError, SyntaxError):
        raise DataError(f"{where}: field {what}: expected a Python/JSON list literal, got {text[:60]!r}") from None


class DDXPlusDecoder:
    """Decodes DDXPlus evidence codes and pathology names to English."""

    def __init__(self, conditions: str | Path, evidences: str | Path) -> None:
        self.evidences = _read_json(evidences)
        cond = _read_json(conditions)
        if not isinstance(self.evidences, dict) or not isinstance(cond, dict):
            raise DataError(f"{conditions} / {evidences}: expected JSON objects keyed by name/code")
        self.pathology: dict[str, str] = {}
        for key, rec in cond.items():
            eng = rec.get("cond-name-eng") or key
            for alias in (key, rec.get("condition_name"), rec.get("cond-name-fr"), eng):
                if alias:
                    self.pathology[alias] = eng

    def pathology_name(self, name: str, where: str) -> str:
        try:
            return self.pathology[name]
        except KeyError:
            raise DataError(f"{where}: unknown pathology {name!r} (not in release_conditions.json)") from None

    def evidence(self, code: str) -> tuple[str, str] | None:
        """``(question_en, finding text)`` or None when the code is unknown."""
        base, _, value = code.partition("_@_")
        rec = self.evidences.get(base)
        if rec is None:
            return None
        q = rec["question_en"].strip()
        if not value:
            return q, q
        meaning = (rec.get("value_meaning") or {}).get(value)
        shown = meaning.get("en", value) if isinstance(meaning, dict) else value
        return q, f"{q}: {shown}"


def french_code_map(rows: list[dict[str, str]], dec: DDXPlusDecoder) -> dict[str, str]:
    """French-coded release: ``{code: question_en}`` learnt from the rows' ``English Evidences``.

    A row whose distinct base codes (``trav1`` of ``trav1_@_N``) and English questions have the
    same count is aligned in order (the shared sample lists both in the same order). Only codes
    ``release_evidences.json`` does not define are learnt.
    """
    pairs: list[tuple[list[str], list[str]]] = []
    for row in rows:
        eng = row.get("English Evidences")
        if not eng:
            continue
        try:
            codes, eng_map = ast.literal_eval(row.get("EVIDENCES") or "[]"), ast.literal_eval(eng)
        except (ValueError, SyntaxError):
            continue  # reported with its record index by parse_ddxplus_row
        if not isinstance(codes, list) or not isinstance(eng_map, dict):
            continue
        bases = list(dict.fromkeys(str(c).partition("_@_")[0] for c in codes))
        pairs.append((bases, [str(q).strip() for q in eng_map]))
    out: dict[str, str] = {}
    for bases, qs in pairs:
        if len(bases) == len(qs):
            for b, q in zip(bases, qs):
                if dec.evidence(b) is None:
                    out.setdefault(b, q)
    return out


def parse_ddxplus_row(row: dict[str, str], dec: DDXPlusDecoder, where: str, idx: int,
                      fr_codes: dict[str, str] | None = None) -> Example:
    for c in DDX_COLUMNS:
        if c not in row or row[c] is None:
            raise DataError(f"{where}: missing field {c!r}")
    codes = _literal(row["EVIDENCES"], where, "EVIDENCES")
    if not isinstance(codes, list):
        raise DataError(f"{where}: field EVIDENCES: expected a list of evidence codes")
    english = row.get("English Evidences")
    eng_map = _literal(english, where, "English Evidences") if english else {}
    questions, findings, undecoded = [], [], []
    initial_fr = None
    for code in codes:
        got = dec.evidence(str(code))
        if got is None:
            undecoded.append(str(code))
            continue
        questions.append(got[0])
        findings.append(got[1])
    if undecoded:
        if not isinstance(eng_map, dict) or not eng_map:
            raise DataError(f"{where}: evidence code {undecoded[0]!r} is not in release_evidences.json "
                            "(French-coded early release?) and the row has no 'English Evidences' column")
        questions, findings = [], []
        iq = (fr_codes or {}).get(row["INITIAL_EVIDENCE"])
        if iq is not None:
            initial_fr = (iq, iq)
        for q, a in eng_map.items():
            questions.append(str(q).strip())
            findings.append(str(q).strip() if str(a) == "True" else f"{str(q).strip()}: {a}")
    diag = dec.pathology_name(row["PATHOLOGY"], where)
    if row.get("English Pathology") and row["English Pathology"] != diag:
        raise DataError(f"{where}: PATHOLOGY {row['PATHOLOGY']!r} maps to {diag!r} but 'English Pathology' "
                        f"says {row['English Pathology']!r}")
    initial = dec.evidence(row["INITIAL_EVIDENCE"]) or initial_fr
    diff = []
    if row.get("DIFFERENTIAL_DIAGNOSIS"):
        for j, item in enumerate(_literal(row["DIFFERENTIAL_DIAGNOSIS"], where, "DIFFERENTIAL_DIAGNOSIS")):
            if not isinstance(item, (list, tuple)) or len(item) != 2:
                raise DataError(f"{where}: DIFFERENTIAL_DIAGNOSIS[{j}]: expected [pathology, probability]")
            diff.append([dec.pathology_name(str(item[0]), where), float(item[1])])
    note = (f"Age: {row['AGE']}. Sex: {row['SEX']}. "
            + (f"Chief complaint: {initial[1]}. " if initial else "")
            + "Findings: " + "; ".join(findings) + ".")
    pid = row.get("OriginalRowKey") or row.get("") or str(idx)
    return Example(id=f"ddxplus-{pid}", question=note, answers=(diag,), answer_groups=((diag,),),
                   topic_entities=uniq(questions), topic_names=uniq(questions), findings=tuple(findings),
                   diagnoses=(diag,),
                   extra={"age": row["AGE"], "sex": row["SEX"], "differential": diff,
                          "initial_evidence": initial[1] if initial else row["INITIAL_EVIDENCE"],
                          "icd10": row.get("ICD-10")})


def load_ddxplus(path: str | None = None, conditions: str | None = None, evidences: str | None = None,
                 split: str = "test", limit: int | None = None, sample: int | None = None, seed: int = 0,
                 source: str = "local", hub_id: str = "aai530-group6/ddxplus") -> ExampleSet:
    """DDXPlus patients → ExampleSet (gold diagnosis = ``PATHOLOGY`` in English)."""
    if conditions is None or evidences is None:
        raise DataError("ddxplus: conditions= and evidences= (release_*.json) are required to decode codes")
    dec = DDXPlusDecoder(conditions, evidences)
    if source == "hub":
        rows, src = hub_records(hub_id, split), f"hub:{hub_id}[{split}]"
        rows = [{k: (v if isinstance(v, str) else repr(v)) for k, v in r.items()} for r in rows]
    elif source == "local":
        if path is None:
            raise DataError("ddxplus: path is required with source='local'")
        rows, src = _read_csv(path, DDX_COLUMNS), str(path)
    else:
        raise DataError(f"ddxplus: source must be 'local' or 'hub', got {source!r}")
    fr = french_code_map(rows, dec)
    items = [parse_ddxplus_row(r, dec, f"{src}: record {i}", i, fr) for i, r in enumerate(rows)]
    return ExampleSet("ddxplus", items, sample=sample, limit=limit, seed=seed)


def load_probsum(path: str | None = None, split: str = "test", limit: int | None = None,
                 sample: int | None = None, seed: int = 0, source: str = "local",
                 hub_id: str = "") -> ExampleSet:
    """ProbSum (BioNLP 2023 Task 1A) CSV → ExampleSet; ``diagnoses`` = ``;``-split Summary."""
    if source == "hub":
        raise DataError("probsum: PhysioNet-credentialed data is not on the hub; download it from "
                        "physionet.org and pass path=")
    if path is None:
        raise DataError("probsum: path is required")
    rows = _read_csv(path, PROBSUM_COLUMNS)
    items = []
    for i, row in enumerate(rows):
        where = f"{path}: record {i}"
        fid = (row["File ID"] or "").strip()
        if not fid:
            raise DataError(f"{where}: empty 'File ID'")
        problems = uniq(p.strip() for p in (row["Summary"] or "").split(";"))
        if not problems:
            raise DataError(f"{where}: empty 'Summary' (expected ';'-separated problems)")
        s, o, a = (row[c].strip() for c in ("Subjective Sections", "Objective Sections", "Assessment"))
        note = f"Subjective:\n{s}\n\nObjective:\n{o}\n\nAssessment:\n{a}"
        items.append(Example(id=f"probsum-{fid}", question=note, answers=problems, answer_groups=tuple((p,) for p in problems),
                             diagnoses=problems, findings=(s, o, a) if o else (s, a),
                             extra={"summary": row["Summary"].strip(), "assessment": a}))
    return ExampleSet("probsum", items, sample=sample, limit=limit, seed=seed)


__all__ = ["load_ddxplus", "load_probsum", "DDXPlusDecoder", "parse_ddxplus_row"]
