"""Every experiments/<preset>/paper.yaml value is the one printed in the cited table of the paper
text (shared/papers/*.txt), and every entry names a metric and overrides the preset can produce.
Every conf/experiment preset has a paper.yaml (with a note when the paper prints no value for it).

The paper texts are not in the repo: the text check skips cleanly when ../shared/papers is absent."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import pytest
import yaml

from kgreason.judges.pdsqi import TABLE5_DIMENSIONS
from kgreason.tables import PAPER_FIELDS, load_paper

REPO = Path(__file__).resolve().parents[1]
PAPERS = REPO.parent / "shared" / "papers"
FILES = sorted(REPO.glob("experiments/*/paper.yaml"))


@lru_cache(maxsize=None)
def _paper(path: Path) -> dict:
    """load_paper once per file (logoskg_dx_hops has ~300 entries, each a test)."""
    return load_paper(path)


@lru_cache(maxsize=None)
def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


ENTRIES = [(f, i) for f in FILES for i in range(len(_paper(f)["entries"]))]


def _ids():
    return [f"{f.parent.name}:{i}" for f, i in ENTRIES]


CAPTION = r"\s*(Table|Figure) \d+[.:]"


def table_block(text: str, table: int, caption: str = "above") -> list[str]:
    """The lines from the caption 'Table N' (``Table N:`` or ``Table N.``) to the next caption;
    with ``caption: below`` (the text prints the caption under the table, as logoskg.txt does),
    the lines from the previous Table/Figure caption to it."""
    lines = text.splitlines()
    start = next((k for k, ln in enumerate(lines) if re.match(rf"\s*Table {table}[.:]", ln)), None)
    if start is None:
        raise AssertionError(f"no caption 'Table {table}' in the paper text")
    if caption == "below":
        prev = next((k for k in range(start - 1, -1, -1) if re.match(CAPTION, lines[k])), -1)
        return lines[max(prev + 1, start - 60):start]
    end = next((k for k in range(start + 1, len(lines)) if re.match(r"\s*Table \d+[.:]", lines[k])), len(lines))
    return lines[start:min(end, start + 60)]


def _squash(s: str) -> str:
    """Runs of spaces and tabs as one space (row labels span tab-separated cells in some texts)."""
    return " ".join(s.split())


def row_numbers(line: str, row: str, decimals: int) -> list[str]:
    """The row's cells after its label: numbers with ``decimals`` decimals (the text glues
    some cells together) and '–' (an empty cell); parenthesised deltas are not cells."""
    rest = _squash(line)[len(_squash(row)):]
    rest = re.sub(r"\([^)]*\)", " ", rest)
    return re.findall(rf"\d+\.\d{{{decimals}}}|–", rest)


def test_every_preset_has_paper_values_for_sgr_and_subqrag():
    names = {f.parent.name for f in FILES}
    assert {"sgr_table1", "sgr_table2", "subqrag_table1", "subqrag_table2", "kgqa_baselines"} <= names


def test_every_preset_has_a_paper_yaml():
    """Each conf/experiment preset has experiments/<preset>/paper.yaml: the paper's printed values,
    or (entries: []) a note saying why there are none (a figure only, not the paper's setting)."""
    presets = sorted(p.stem for p in (REPO / "conf" / "experiment").glob("*.yaml"))
    missing = [p for p in presets if not (REPO / "experiments" / p / "paper.yaml").is_file()]
    assert not missing, f"presets without experiments/<preset>/paper.yaml: {missing}"
    for p in presets:
        doc = load_paper(REPO / "experiments" / p / "paper.yaml")
        if not doc["entries"]:
            assert len(str(doc.get("note", "")).strip()) > 20, f"{p}: no entries and no note saying why"


def test_empty_paper_yaml_needs_a_note(tmp_path):
    f = tmp_path / "paper.yaml"
    f.write_text("paper: X\nsource: x.txt\nscale: 1.0\ndecimals: 2\nentries: []\n")
    with pytest.raises(ValueError, match="'entries' is empty: give a 'note'"):
        load_paper(f)


@pytest.mark.parametrize("path,i", ENTRIES, ids=_ids())
def test_value_is_in_the_cited_table(path, i):
    doc = _paper(path)
    src = PAPERS / doc["source"]
    if not src.is_file():
        pytest.skip(f"paper text {doc['source']} not here (../shared/papers)")
    e = doc["entries"][i]
    text = _text(src)
    if "quote" in e:  # a summary quoting the table (reknos.txt): the sentence, and the number in it
        assert _squash(e["quote"]) in _squash(text), f"{path.parent.name}: quote not in {doc['source']}: {e['quote']!r}"
        nums = re.findall(r"\d+(?:\.\d+)?", e["quote"])
        assert float(nums[e["index"]]) == float(e["value"]), (
            f"{path.parent.name}: {e['row']}: paper.yaml says {e['value']}, the quote has {nums[e['index']]} at {e['index']}")
        return
    block = table_block(text, int(e["table"]), doc.get("caption", "above"))
    lines = [ln for ln in block if _squash(ln).startswith(_squash(e["row"]))]
    if "occurrence" in e:  # a label printed once per panel (logoskg.txt Table 5: per dataset)
        assert e["occurrence"] < len(lines), f"row {e['row']!r}: only {len(lines)} lines of Table {e['table']}"
        lines = [lines[e["occurrence"]]]
    assert len(lines) == 1, f"row {e['row']!r}: {len(lines)} lines of Table {e['table']} start with it"
    cells = row_numbers(lines[0], e["row"], int(doc["decimals"]))
    assert e["index"] < len(cells), f"row {e['row']!r} has {len(cells)} cells: {cells}"
    assert cells[e["index"]] == f"{float(e['value']):.{doc['decimals']}f}", (
        f"{path.parent.name}: {e['row']} / {e['column']}: paper.yaml says {e['value']}, "
        f"Table {e['table']} prints {cells[e['index']]} at cell {e['index']} ({cells})")


# what judge=pdsqi adds to a run's metrics.json (docs/metrics.md "PDSQI-9 judge"): per judged round
_JUDGE_METRICS = {f"judge/{r}/{a}" for r in ("baseline", "round1", "round2")
                  for a in (*TABLE5_DIMENSIONS, "pdsqi_average")}


@pytest.mark.parametrize("path", FILES, ids=[f.parent.name for f in FILES])
def test_entries_match_the_preset(path):
    """Each entry's metric is one the preset computes (judge=pdsqi adds judge/<round>/<item>), and
    each group override names an option the preset sweeps or sets, or that its comments run it
    with (``kg=primekg`` over ``kg: umls``), so `--paper` can find the cell; with the paper's model."""
    preset = path.parent.name
    conf = yaml.safe_load((REPO / "conf" / "experiment" / f"{preset}.yaml").read_text())
    params = {k: set(str(v).split(",")) for k, v in
              (((conf.get("hydra") or {}).get("sweeper") or {}).get("params") or {}).items()}
    defaults = {}
    for d in conf.get("defaults", []):
        if isinstance(d, dict):
            for k, v in d.items():
                defaults[k.replace("override /", "")] = {str(v)}
    # the preset's dataset.metrics, else those of the dataset it selects (logoskg_dx_hops: ddxplus)
    metrics = (conf.get("dataset") or {}).get("metrics")
    if metrics is None and "dataset" in defaults:
        ds = next(iter(defaults["dataset"]))
        metrics = yaml.safe_load((REPO / "conf" / "dataset" / f"{ds}.yaml").read_text())["metrics"]
    metrics = set(metrics or [])
    # `group=option` commands the preset's own comments give (e.g. "experiment=logoskg_dx_hops kg=primekg")
    documented: dict[str, set[str]] = {}
    for line in (REPO / "conf" / "experiment" / f"{preset}.yaml").read_text().splitlines():
        if line.lstrip().startswith("#"):
            for k, v in re.findall(r"(?<![\w.])(\w+)=([\w.-]+)", line):
                documented.setdefault(k, set()).add(v)
    doc = load_paper(path)
    cells = set()
    for e in doc["entries"]:
        assert set(PAPER_FIELDS) <= set(e)
        allowed_metrics = metrics | (_JUDGE_METRICS if e["overrides"].get("judge") == "pdsqi" else set())
        assert e["metric"] in allowed_metrics, f"{preset}: {e['metric']} is not in the preset's dataset.metrics"
        for k, v in e["overrides"].items():
            allowed = params.get(k) or defaults.get(k)
            if allowed is None:  # a group the preset leaves to the command line: any option of it
                allowed = {f.stem for f in (REPO / "conf" / k).glob("*.yaml")} if "." not in k else {str(v)}
            if str(v) not in allowed and k in defaults:  # another option of a group the preset sets:
                allowed = allowed | documented.get(k, set())  # only as its comments run it (kg=primekg)
            assert str(v) in allowed, f"{preset}: {k}={v} is neither swept nor set by the preset ({allowed})"
        key = (e["table"], e["row"], e["column"])
        assert key not in cells, f"{preset}: duplicate entry {key}"
        cells.add(key)
    models = {e["model"] for e in doc["entries"]}
    if (conf.get("llm") or {}).get("model"):
        assert conf["llm"]["model"] in models  # a preset that names a model names the paper's
