"""Currency by behaviour (issue 71): replaying a committed bundle on changed code says the row is
stale, naming the first example and request that differ, whatever file the change is in; each
test edits a scratch checkout of this repository (never the repository itself) and replays a
committed held-out bundle's first question there, with the bundle's recorded rankings (no KG
embedding store is built, no model is called)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BUNDLES = REPO / "experiments" / "validation" / "bundles" / "heldout_n30_llamacpp"

pytestmark = pytest.mark.slow  # each replays one MetaQA question in a fresh process: 20-60 s on 2 cores


def _scratch(tmp: Path) -> Path:
    """A copy of the checkout's code and configs (what ``python -m kgreason`` runs from)."""
    root = tmp / "checkout"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO / "kgreason", root / "kgreason", ignore=ignore)
    shutil.copytree(REPO / "conf", root / "conf", ignore=ignore)
    shutil.copy2(REPO / "pyproject.toml", root / "pyproject.toml")
    return root


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{path}: the line to edit is not there once"
    path.write_text(text.replace(old, new), encoding="utf-8")


def _replay(root: Path, bundle: Path, tmp: Path, shared_data: Path) -> tuple[dict, str]:
    env = {**os.environ, "PYTHONPATH": str(root), "KGREASON_DATA": str(shared_data),
           "KGREASON_CACHE_DIR": str(tmp / "kgcache"), "KGREASON_PROGRESS": "off"}
    out = tmp / "verdicts.json"
    r = subprocess.run([sys.executable, "-m", "kgreason", "bundle", "replay", str(bundle), "--first", "1",
                        "--rankings", "recorded", "--json", str(out)], cwd=root, env=env, capture_output=True,
                       text=True, timeout=900)
    assert out.is_file(), r.stderr[-3000:]
    (verdict,) = json.loads(out.read_text())
    return verdict, r.stdout


def _first_id(bundle: Path) -> str:
    with tarfile.open(bundle) as t:
        name = next(m for m in t.getnames() if m.endswith("/predictions.jsonl"))
        return json.loads(t.extractfile(name).readline())["id"]


def test_an_sgr_prompt_edit_makes_the_bundled_metaqa_sgr_row_stale_naming_the_request(tmp_path, shared_data):
    bundle = BUNDLES / "metaqa_sgr.tar.gz"
    root = _scratch(tmp_path)
    prompt = root / "kgreason" / "reasoners" / "prompts" / "sgr" / "structure.txt"
    _edit(prompt, "an exclusion).", "an exclusion, a superlative).")
    verdict, stdout = _replay(root, bundle, tmp_path, shared_data)
    ex = _first_id(bundle)
    assert verdict["status"] == "stale" and verdict["kind"] == "miss", verdict
    assert verdict["example"] == ex and verdict["request"] == "structure"
    line = verdict["line"]
    assert line.startswith(f"stale: example {ex}, request structure (purpose answer): the method now asks something "
                           "else; the bundle's nearest request structure differs at message 1, line 4: "), line
    assert "an exclusion)." in line and "a superlative)." in line
    assert f"metaqa_sgr: {line}" in stdout


def test_a_parsing_change_outside_the_method_files_makes_a_row_stale(tmp_path, shared_data):
    """``kgreason/llm/parsing.py`` is in no row's ``METHOD_FILES``: the blob-hash stamp never saw
    a change there. The replay asks exactly the bundle's requests and reads other answers."""
    bundle = BUNDLES / "metaqa_io.tar.gz"
    root = _scratch(tmp_path)
    parsing = root / "kgreason" / "llm" / "parsing.py"
    # a JSON array now gives its first item only (the first metaqa_io reply is a two-item array)
    _edit(parsing, "        return ParseResult(True, [str(x).strip() for x in js.value if str(x).strip()])\n"
                   "    if js.ok and isinstance(js.value, dict):",
          "        return ParseResult(True, [str(x).strip() for x in js.value if str(x).strip()][:1])\n"
          "    if js.ok and isinstance(js.value, dict):")
    verdict, _ = _replay(root, bundle, tmp_path, shared_data)
    ex = _first_id(bundle)
    assert verdict["status"] == "stale" and verdict["kind"] == "result", verdict
    assert verdict["example"] == ex
    assert verdict["line"].startswith(f"stale: example {ex}: the same replies give another result: field "), verdict
    assert verdict["line"].endswith("the scoring or parsing changed")


def test_the_unchanged_checkout_replays_the_row_identical(tmp_path, shared_data):
    """The control of the parsing test (the SGR test's own control: its diff shows the edited line;
    an unchanged SGR replay of the first question took 3.5 min here, its E*_q embedded on the fly)."""
    verdict, _ = _replay(_scratch(tmp_path), BUNDLES / "metaqa_io.tar.gz", tmp_path, shared_data)
    assert verdict["status"] == "identical" and verdict["line"] == "identical (the first 1 of 30 examples)", verdict
