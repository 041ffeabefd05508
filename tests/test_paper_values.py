"""Every experiments/<preset>/paper.yaml value is the one printed in the cited table of the paper
text (shared/papers/*.txt), and every entry names a metric and overrides the preset can produce.

The paper texts are not in the repo: the text check skips cleanly when ../shared/papers is absent."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from kgreason.tables import PAPER_FIELDS, load_paper

REPO = Path(__file__).resolve().parents[1]
PAPERS = REPO.parent / "shared" / "papers"
FILES = sorted(REPO.glob("experiments/*/paper.yaml"))
ENTRIES = [(f, i) for f in FILES for i in range(len(load_paper(f)["entries"]))]


def _ids():
    return [f"{f.parent.name}:{i}" for f, i in ENTRIES]


def table_block(text: str, table: int) -> list[str]:
    """The lines from the caption 'Table N' (``Table N:`` or ``Table N.``) to the next caption."""
    lines = text.splitlines()
    start = next((k for k, ln in enumerate(lines) if re.match(rf"\s*Table {table}[.:]", ln)), None)
    if start is None:
        raise AssertionError(f"no caption 'Table {table}' in the paper text")
    end = next((k for k in range(start + 1, len(lines)) if re.match(r"\s*Table \d+[.:]", lines[k])), len(lines))
    return lines[start:min(end, start + 60)]


def row_numbers(line: str, row: str, decimals: int) -> list[str]:
    """The row's cells after its label: numbers with ``decimals`` decimals (the text glues
    some cells together) and '–' (an empty cell); parenthesised deltas are not cells."""
    rest = line.strip()[len(row):]
    rest = re.sub(r"\([^)]*\)", " ", rest)
    return re.findall(rf"\d+\.\d{{{decimals}}}|–", rest)


def test_every_preset_has_paper_values_for_sgr_and_subqrag():
    names = {f.parent.name for f in FILES}
    assert {"sgr_table1", "sgr_table2", "subqrag_table1", "subqrag_table2", "kgqa_baselines"} <= names


@pytest.mark.parametrize("path,i", ENTRIES, ids=_ids())
def test_value_is_in_the_cited_table(path, i):
    doc = load_paper(path)
    src = PAPERS / doc["source"]
    if not src.is_file():
        pytest.skip(f"paper text {doc['source']} not here (../shared/papers)")
    e = doc["entries"][i]
    block = table_block(src.read_text(encoding="utf-8"), int(e["table"]))
    lines = [ln for ln in block if ln.strip().startswith(e["row"])]
    assert len(lines) == 1, f"row {e['row']!r}: {len(lines)} lines of Table {e['table']} start with it"
    cells = row_numbers(lines[0], e["row"], int(doc["decimals"]))
    assert e["index"] < len(cells), f"row {e['row']!r} has {len(cells)} cells: {cells}"
    assert cells[e["index"]] == f"{float(e['value']):.{doc['decimals']}f}", (
        f"{path.parent.name}: {e['row']} / {e['column']}: paper.yaml says {e['value']}, "
        f"Table {e['table']} prints {cells[e['index']]} at cell {e['index']} ({cells})")


@pytest.mark.parametrize("path", FILES, ids=[f.parent.name for f in FILES])
def test_entries_match_the_preset(path):
    """Each entry's metric is one the preset computes, and each group override names an option
    the preset sweeps or sets (so `--paper` can find the cell), with the paper's model."""
    preset = path.parent.name
    conf = yaml.safe_load((REPO / "conf" / "experiment" / f"{preset}.yaml").read_text())
    metrics = set(conf["dataset"]["metrics"])
    params = {k: set(str(v).split(",")) for k, v in conf["hydra"]["sweeper"]["params"].items()}
    defaults = {}
    for d in conf.get("defaults", []):
        if isinstance(d, dict):
            for k, v in d.items():
                defaults[k.replace("override /", "")] = {str(v)}
    doc = load_paper(path)
    cells = set()
    for e in doc["entries"]:
        assert set(PAPER_FIELDS) <= set(e)
        assert e["metric"] in metrics, f"{preset}: {e['metric']} is not in the preset's dataset.metrics"
        for k, v in e["overrides"].items():
            allowed = params.get(k) or defaults.get(k)
            if allowed is None:  # a group the preset leaves to the command line: any option of it
                allowed = {f.stem for f in (REPO / "conf" / k).glob("*.yaml")} if "." not in k else {str(v)}
            assert str(v) in allowed, f"{preset}: {k}={v} is neither swept nor set by the preset ({allowed})"
        key = (e["table"], e["row"], e["column"])
        assert key not in cells, f"{preset}: duplicate entry {key}"
        cells.add(key)
    models = {e["model"] for e in doc["entries"]}
    if (conf.get("llm") or {}).get("model"):
        assert conf["llm"]["model"] in models  # a preset that names a model names the paper's
