"""Clinical datasets: ProbSum (problem-list summarisation) here; DDXPlus (differential
diagnosis) in :mod:`kgreason.data.ddxplus`, the one DDXPlus reader.

**ProbSum** (BioNLP 2023 Task 1A, Gao et al.; PhysioNet credentialed, MIMIC-III derived): a CSV
with ``File ID, Assessment, Subjective Sections, Objective Sections, Summary``; the summary is
the problem list, ``;``-separated. ``question`` is the note (S + O + A), ``diagnoses`` the
problems.
"""

from __future__ import annotations

import csv
from pathlib import Path

from kgreason.data.base import DataError, ExampleSet
from kgreason.data.kgqa import uniq
from kgreason.textio import InputFileError, iter_lines
from kgreason.types import Example

PROBSUM_COLUMNS = ("File ID", "Assessment", "Subjective Sections", "Objective Sections", "Summary")


def _read_csv(path: str | Path, required: tuple[str, ...]) -> list[dict[str, str]]:
    p = Path(path)
    if not p.is_file():
        raise DataError(f"{p}: file not found")
    try:
        return _csv_rows(p, required)
    except InputFileError as e:  # a bad byte, NUL or stray byte-order mark, with file:line
        raise DataError(str(e)) from None


def _csv_rows(p: Path, required: tuple[str, ...]) -> list[dict[str, str]]:
    with iter_lines(p) as f:
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


def load_probsum(path: str | None = None, split: str = "test", limit: int | None = None,
                 sample: int | None = None, sample_seed: int = 0, source: str = "local",
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
    return ExampleSet("probsum", items, sample=sample, limit=limit, sample_seed=sample_seed,
                      origins=[f"{path}: record {i}" for i in range(len(items))], id_field="File ID")


__all__ = ["load_probsum"]
