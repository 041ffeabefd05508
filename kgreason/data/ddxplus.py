"""The one DDXPlus reader: patients CSV → :class:`Example`, knowledge base JSON → :class:`KG`.

**DDXPlus** (Tchango et al. 2022; CC-BY) ships three files:

* ``release_evidences.json`` — ``{code: record}``; a record has ``question_en``, ``data_type``
  (``B`` binary, ``C`` categorical, ``M`` multi-choice), ``default_value`` and, for ``C``/``M``,
  ``value_meaning`` ``{value code: {"en": ..., "fr": ...}}``;
* ``release_conditions.json`` — ``{pathology: record}`` with ``cond-name-eng``, ``cond-name-fr``,
  ``icd10-id``, ``symptoms`` and ``antecedents`` (``{evidence code: {}}``);
* a patients CSV with ``AGE, SEX, PATHOLOGY, EVIDENCES, INITIAL_EVIDENCE, DIFFERENTIAL_DIAGNOSIS``.

Two patient releases exist:

* the English release: ``E_xx`` evidence codes (``E_55_@_V_123`` = evidence ``E_55`` with value
  ``V_123``), ``PATHOLOGY`` = condition key;
* the first, French-coded release (``'toux'``, ``'trav1_@_N'``; French pathology names), which the
  shared 588-patient sample comes from: codes ``release_evidences.json`` does not define are read
  from its ``English Evidences`` column (``{question_en: answer}``) when the file has one;
  otherwise the reader stops with an error naming the record and the code. Pathology names map
  through ``cond-name-fr`` → ``cond-name-eng``.

Readers (every error names the file, the line and the field, and what was expected):

==========================  ==================================================================
:func:`read_evidences`      ``release_evidences.json`` → ``{code: record}``, fields checked
:func:`read_conditions`     ``release_conditions.json`` → ``{key: record}``, fields checked
:func:`read_patients`       patients CSV → :class:`PatientRow` (fields + ``file:line``)
:func:`load_ddxplus`        patients → :class:`ExampleSet` (``dataset=ddxplus``)
:func:`load_ddxplus_kg`     knowledge base → KG (``kg=ddxplus``)
==========================  ==================================================================

Example fields: ``findings`` = decoded evidence texts; ``topic_entities`` = the evidence questions
(entity names of :func:`load_ddxplus_kg`); ``diagnoses``/``answers`` = the English pathology name;
``extra.differential`` = ``[[English name, probability], ...]``.

KG: ``(pathology, has_symptom | has_antecedent, evidence)``; pathology entities are English names
(aliases: French name, JSON key, ICD-10 code), evidence entities the English question text (the
``E_xx`` code is an alias); types ``pathology`` / ``evidence``.

A patient's answer is *non-default* (:func:`is_default_answer`) when it differs from the
evidence's ``default_value``: binary → ``False``; categorical / multi-choice → the English meaning
of the default value code (``nowhere``, ``No``/``N``); numeric → the default as written (``0``).
"""

from __future__ import annotations

import ast
import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from kgreason.textio import InputFileError, iter_lines, read_text
from kgreason.data.base import DataError, ExampleSet
from kgreason.data.kgqa import hub_records, uniq
from kgreason.kg.store import KG
from kgreason.types import Example

PathLike = str | Path
PATIENT_COLUMNS = ("AGE", "SEX", "PATHOLOGY", "EVIDENCES", "INITIAL_EVIDENCE")
DATA_TYPES = ("B", "C", "M")


# ----------------------------------------------------------------------------- JSON files
def _read_json(path: PathLike) -> tuple[Any, str]:
    p = Path(path)
    if not p.is_file():
        raise DataError(f"{p}: file not found")
    try:
        text = read_text(p)  # strict UTF-8; file:line:column on a bad byte (kgreason.textio)
    except InputFileError as e:
        raise DataError(str(e)) from None
    if not text.strip():
        raise DataError(f"{p}: empty file; expected a JSON object")
    try:
        return json.loads(text), text
    except json.JSONDecodeError as e:
        raise DataError(f"{p}:{e.lineno}: invalid JSON ({e.msg})") from None


def _line_of(text: str, key: str) -> int:
    """1-based line where ``"key":`` first appears in a JSON text (1 when not found)."""
    i = text.find(json.dumps(key, ensure_ascii=False) + ":")
    if i < 0:
        i = text.find(json.dumps(key) + ":")
    return text.count("\n", 0, i) + 1 if i >= 0 else 1


def read_evidences(path: PathLike) -> dict[str, dict]:
    """``release_evidences.json`` → ``{code: record}`` with ``question_en``, ``data_type`` and
    ``value_meaning`` checked."""
    ev, text = _read_json(path)
    if not isinstance(ev, dict) or not ev:
        raise DataError(f"{path}:1: expected a non-empty JSON object {{evidence code: record}}")
    for code, rec in ev.items():
        where = f"{path}:{_line_of(text, code)}: evidence {code!r}"
        if not isinstance(rec, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(rec).__name__}")
        q = rec.get("question_en")
        if not isinstance(q, str) or not q.strip():
            raise DataError(f"{where}: field 'question_en': expected a non-empty string, got {q!r}")
        if rec.get("data_type") not in DATA_TYPES:
            raise DataError(f"{where}: field 'data_type': expected one of {list(DATA_TYPES)}, "
                            f"got {rec.get('data_type')!r}")
        vm = rec.get("value_meaning") or {}
        if not isinstance(vm, dict) or not all(isinstance(m, dict) for m in vm.values()):
            raise DataError(f"{where}: field 'value_meaning': expected {{value code: {{'en': ..., 'fr': ...}}}}")
    return ev


def read_conditions(path: PathLike) -> dict[str, dict]:
    """``release_conditions.json`` → ``{key: record}`` with ``symptoms``/``antecedents`` checked."""
    cond, text = _read_json(path)
    if not isinstance(cond, dict) or not cond:
        raise DataError(f"{path}:1: expected a non-empty JSON object {{condition name: record}}")
    for key, rec in cond.items():
        where = f"{path}:{_line_of(text, key)}: condition {key!r}"
        if not isinstance(rec, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(rec).__name__}")
        for field in ("symptoms", "antecedents"):
            if not isinstance(rec.get(field), dict):
                raise DataError(f"{where}: field {field!r}: expected an object {{evidence code: {{}}}}, "
                                f"got {rec.get(field)!r:.60}")
    return cond


def condition_name(rec: Mapping[str, Any], key: str) -> str:
    """English pathology name (``cond-name-eng``, else ``condition_name``, else the key)."""
    return rec.get("cond-name-eng") or rec.get("condition_name") or key


def is_default_answer(ev: Mapping[str, Any], answer_en: Any) -> bool:
    """True when an English answer equals the evidence's default (module docstring)."""
    if ev.get("data_type") == "B":
        return str(answer_en) == "False"
    dv = str(ev.get("default_value"))
    meaning = (ev.get("value_meaning") or {}).get(dv)
    return str(answer_en) == (str(meaning.get("en", dv)) if isinstance(meaning, dict) else dv)


# ----------------------------------------------------------------------------- patients CSV
@dataclass(frozen=True)
class PatientRow:
    """One patient record: the CSV fields and where it came from (``file:line``)."""

    fields: Mapping[str, str]
    where: str
    index: int  # 0-based record index

    def get(self, name: str, default: str | None = None) -> str | None:
        return self.fields.get(name, default)

    def __getitem__(self, name: str) -> str:
        val = self.fields.get(name)
        if val is None:
            raise DataError(f"{self.where}: missing field {name!r}")
        return val

    def literal(self, name: str, kind: type) -> Any:
        """A Python/JSON literal column (``EVIDENCES``, ``English Evidences`` ...), type-checked."""
        text = self[name]
        try:
            val = ast.literal_eval(text) if text.strip() else kind()
        except (ValueError, SyntaxError):
            raise DataError(f"{self.where}: field {name}: expected a Python/JSON {kind.__name__} literal, "
                            f"got {text[:60]!r}") from None
        if not isinstance(val, kind):
            raise DataError(f"{self.where}: field {name}: expected a {kind.__name__}, got {type(val).__name__}")
        return val


def read_patients(path: PathLike) -> list[PatientRow]:
    """Patients CSV → rows; the header must hold :data:`PATIENT_COLUMNS`."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"{p}: file not found")
    try:
        return _read_patient_rows(p)
    except InputFileError as e:  # a bad byte, NUL or stray byte-order mark, with file:line
        raise DataError(str(e)) from None


def _read_patient_rows(p: Path) -> list[PatientRow]:
    with iter_lines(p) as f:
        reader = csv.DictReader(f)
        if reader.fieldnames is None:
            raise DataError(f"{p}: empty file; expected a CSV header with {list(PATIENT_COLUMNS)}")
        missing = [c for c in PATIENT_COLUMNS if c not in reader.fieldnames]
        if missing:
            raise DataError(f"{p}:1: header lacks column(s) {missing}; found {reader.fieldnames}")
        rows, start = [], reader.line_num + 1
        for i, row in enumerate(reader):
            where = f"{p}:{start}"
            if None in row:
                raise DataError(f"{where}: more fields than the header's {len(reader.fieldnames)}")
            rows.append(PatientRow(row, where, i))
            start = reader.line_num + 1
    if not rows:
        raise DataError(f"{p}: no data rows")
    return rows


def english_answers(row: PatientRow) -> dict[str, str]:
    """The ``English Evidences`` column ``{question_en: answer}`` (French-coded release), or {}."""
    if not row.get("English Evidences"):
        return {}
    return {str(q).strip(): str(a) for q, a in row.literal("English Evidences", dict).items()}


class DDXPlusDecoder:
    """Decodes DDXPlus evidence codes and pathology names to English."""

    def __init__(self, conditions: PathLike, evidences: PathLike) -> None:
        self.evidences = read_evidences(evidences)
        self.conditions_path = str(conditions)
        self.pathology: dict[str, str] = {}
        for key, rec in read_conditions(conditions).items():
            eng = condition_name(rec, key)
            for alias in (key, rec.get("condition_name"), rec.get("cond-name-fr"), eng):
                if alias:
                    self.pathology[alias] = eng

    def pathology_name(self, name: str, where: str, field: str) -> str:
        try:
            return self.pathology[name]
        except KeyError:
            raise DataError(f"{where}: field {field}: unknown pathology {name!r} "
                            f"(not in {self.conditions_path})") from None

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

    def question_codes(self) -> dict[str, str]:
        """``{question_en: code}`` (questions are unique in the released file)."""
        return {rec["question_en"].strip(): code for code, rec in self.evidences.items()}


def french_code_map(rows: list[PatientRow], dec: DDXPlusDecoder) -> dict[str, str]:
    """French-coded release: ``{code: question_en}`` learnt from the rows' ``English Evidences``.

    A row whose distinct base codes (``trav1`` of ``trav1_@_N``) and English questions have the
    same count is aligned in order (the shared sample lists both in the same order). Only codes
    ``release_evidences.json`` does not define are learnt. Malformed rows are skipped here and
    reported with their line by :func:`parse_patient`.
    """
    out: dict[str, str] = {}
    for row in rows:
        try:
            codes, eng = row.literal("EVIDENCES", list), english_answers(row)
        except DataError:
            continue
        bases = list(dict.fromkeys(str(c).partition("_@_")[0] for c in codes))
        if eng and len(bases) == len(eng):
            for b, q in zip(bases, eng):
                if dec.evidence(b) is None:
                    out.setdefault(b, q)
    return out


def _decode_findings(row: PatientRow, dec: DDXPlusDecoder,
                     fr_codes: Mapping[str, str]) -> tuple[list[str], list[str], tuple[str, str] | None]:
    """``(questions, findings, initial evidence)`` of one patient: decoded from the codes, or,
    when a code is unknown (French-coded release), from the ``English Evidences`` column."""
    codes = row.literal("EVIDENCES", list)
    decoded = [dec.evidence(str(c)) for c in codes]
    initial = dec.evidence(row["INITIAL_EVIDENCE"])
    if all(d is not None for d in decoded):
        return [d[0] for d in decoded], [d[1] for d in decoded], initial
    eng = english_answers(row)
    if not eng:
        bad = next(str(c) for c, d in zip(codes, decoded) if d is None)
        raise DataError(f"{row.where}: field EVIDENCES: evidence code {bad!r} is not in release_evidences.json "
                        "(French-coded early release?) and the row has no 'English Evidences' column")
    iq = fr_codes.get(row["INITIAL_EVIDENCE"])
    questions = list(eng)
    findings = [q if a == "True" else f"{q}: {a}" for q, a in eng.items()]
    return questions, findings, initial or ((iq, iq) if iq is not None else None)


def _differential(row: PatientRow, dec: DDXPlusDecoder) -> list[list]:
    if not row.get("DIFFERENTIAL_DIAGNOSIS"):
        return []
    out = []
    for j, item in enumerate(row.literal("DIFFERENTIAL_DIAGNOSIS", list)):
        if not isinstance(item, (list, tuple)) or len(item) != 2:
            raise DataError(f"{row.where}: field DIFFERENTIAL_DIAGNOSIS[{j}]: expected [pathology, probability]")
        out.append([dec.pathology_name(str(item[0]), row.where, f"DIFFERENTIAL_DIAGNOSIS[{j}]"), float(item[1])])
    return out


def parse_patient(row: PatientRow, dec: DDXPlusDecoder, fr_codes: Mapping[str, str] | None = None) -> Example:
    """One patient row → :class:`Example` (fields in the module docstring)."""
    for c in PATIENT_COLUMNS:
        row[c]  # noqa: B018 - raises naming the missing field
    questions, findings, initial = _decode_findings(row, dec, fr_codes or {})
    diag = dec.pathology_name(row["PATHOLOGY"], row.where, "PATHOLOGY")
    if row.get("English Pathology") and row["English Pathology"] != diag:
        raise DataError(f"{row.where}: field 'English Pathology': PATHOLOGY {row['PATHOLOGY']!r} maps to "
                        f"{diag!r} but the column says {row['English Pathology']!r}")
    note = (f"Age: {row['AGE']}. Sex: {row['SEX']}. "
            + (f"Chief complaint: {initial[1]}. " if initial else "")
            + "Findings: " + "; ".join(findings) + ".")
    pid = row.get("OriginalRowKey") or row.get("") or str(row.index)
    return Example(id=f"ddxplus-{pid}", question=note, answers=(diag,), answer_groups=((diag,),),
                   topic_entities=uniq(questions), topic_names=uniq(questions), findings=tuple(findings),
                   diagnoses=(diag,),
                   extra={"age": row["AGE"], "sex": row["SEX"], "differential": _differential(row, dec),
                          "initial_evidence": initial[1] if initial else row["INITIAL_EVIDENCE"],
                          "icd10": row.get("ICD-10")})


def load_ddxplus(path: str | None = None, conditions: str | None = None, evidences: str | None = None,
                 split: str = "test", limit: int | None = None, sample: int | None = None, sample_seed: int = 0,
                 source: str = "local", hub_id: str = "aai530-group6/ddxplus") -> ExampleSet:
    """DDXPlus patients → ExampleSet (gold diagnosis = ``PATHOLOGY`` in English)."""
    if conditions is None or evidences is None:
        raise DataError("ddxplus: conditions= and evidences= (release_*.json) are required to decode codes")
    dec = DDXPlusDecoder(conditions, evidences)
    if source == "hub":
        recs = hub_records(hub_id, split)
        rows = [PatientRow({k: (v if isinstance(v, str) else repr(v)) for k, v in r.items()},
                           f"hub:{hub_id}[{split}] record {i}", i) for i, r in enumerate(recs)]
    elif source == "local":
        if path is None:
            raise DataError("ddxplus: path is required with source='local'")
        rows = read_patients(path)
    else:
        raise DataError(f"ddxplus: source must be 'local' or 'hub', got {source!r}")
    fr = french_code_map(rows, dec)
    return ExampleSet("ddxplus", [parse_patient(r, dec, fr) for r in rows], sample=sample, limit=limit,
                      sample_seed=sample_seed, origins=[r.where for r in rows])


def load_ddxplus_kg(conditions: PathLike, evidences: PathLike, name: str = "ddxplus") -> KG:
    """DDXPlus knowledge base → KG ``(pathology, has_symptom | has_antecedent, evidence)``
    (entities and aliases in the module docstring). A condition naming an evidence code that
    ``release_evidences.json`` lacks is an error (dangling reference)."""
    ev = read_evidences(evidences)
    cond = read_conditions(conditions)
    text = read_text(conditions)
    triples, types, aliases = [], {}, {}
    for code, rec in ev.items():
        q = rec["question_en"].strip()
        types[q] = "evidence"
        aliases[code] = q
    for key, rec in cond.items():
        cname = condition_name(rec, key)
        types[cname] = "pathology"
        for alias in (key, rec.get("cond-name-fr"), rec.get("icd10-id")):
            if alias and alias != cname:
                aliases.setdefault(alias, cname)
        for field, rel in (("symptoms", "has_symptom"), ("antecedents", "has_antecedent")):
            for code in rec[field]:
                if code not in ev:
                    raise DataError(f"{conditions}:{_line_of(text, key)}: condition {key!r}: field {field!r}: "
                                    f"dangling reference: evidence {code!r} is not in {evidences}")
                triples.append((cname, rel, ev[code]["question_en"].strip()))
    return KG.from_triples(triples, entity_types=types, aliases=aliases, name=name)


__all__ = [
    "PATIENT_COLUMNS", "PatientRow", "DDXPlusDecoder", "read_evidences", "read_conditions", "read_patients",
    "english_answers", "is_default_answer", "condition_name", "french_code_map", "parse_patient",
    "load_ddxplus", "load_ddxplus_kg",
]
