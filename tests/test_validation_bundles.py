"""The validation table ships replayable and current (issues 58 and 71): every held-out row
measured since issue 58 is committed with its bundle under ``experiments/validation/bundles/``;
the generator that writes the README's and docs/validation.md's tables checks each bundled row
against its bundle; and CI replays every bundled held-out row on today's code (no model call):
a row recorded as current must replay identical, or the change that altered its requests or its
results fails here with the row named."""

from __future__ import annotations

import json
import shutil
import sys
import tarfile
from pathlib import Path

import pytest

from kgreason.storage.bundle import BundleError, open_bundle
from kgreason.runner.replay import compare_run, replay_verdict, verify

RUNNER = Path(__file__).resolve().parents[1] / "experiments" / "validation" / "run_validation.py"

#: rows CI replays on a fixed prefix of their questions (the first :data:`PREFIX`, in the run's
#: order) because their whole replay would not fit CI's budget; every other bundled held-out row is
#: replayed in full. None today: with its recorded rankings a replay builds no KG embedding store,
#: and SGR, the slowest, replays about 1 s a question on 2 cores (the 14-question `metaqa_sgr` row in
#: 8 s; a Freebase-slice row first exports the slice to the graph database, about 20 s).
CI_PREFIX: set[str] = set()


def _runner():
    experiments = str(RUNNER.parents[1])
    if experiments not in sys.path:
        sys.path.insert(0, experiments)
    import validation_runner

    return validation_runner


def _bundled_rows():
    mod = _runner()
    out = []
    for f in sorted(mod.places.HERE.glob("validation_*.json")):
        for row, e in json.loads(f.read_text()).items():
            if e.get("bundle"):
                out.append((f.stem, row, e))
    return out


def test_the_table_has_bundled_rows_and_each_bundle_gives_its_row():
    rows = _bundled_rows()
    assert rows, "no committed validation row has a bundle"
    assert _runner().bundle_problems() == []


@pytest.mark.parametrize("table,row,entry", _bundled_rows(), ids=lambda x: x if isinstance(x, str) else "")
def test_each_committed_bundle_verifies(table, row, entry, tmp_path):
    """Digests checked and every metric re-scored from the bundled predictions (no model, no data)."""
    opened = open_bundle(RUNNER.parent / entry["bundle"]["file"], tmp_path / "b")
    lines = verify(opened)
    assert lines and all(ok for _run, ok, _line in lines), lines


def test_a_row_that_no_longer_matches_its_bundle_is_named():
    mod = _runner()
    _table, row, e = _bundled_rows()[0]
    key = next(iter(e["metrics"]))
    edited = {**e, "metrics": {**e["metrics"], key: (e["metrics"][key] or 0) + 0.5}}
    assert mod.bundle_problem(row, edited) == (
        f"{row}: field metrics of the JSON row differs from what its bundle {e['bundle']['file']} gives")
    assert "SHA-256 differs" in mod.bundle_problem(row, {**e, "bundle": {**e["bundle"], "sha256": "0" * 64}})


def test_a_committed_bundle_edited_after_export_is_refused(tmp_path):
    """One reply changed inside a committed bundle (repacked): opening it names the entry."""
    _table, _row, e = next(r for r in _bundled_rows() if r[2]["bundle"].get("calls"))  # a row with model replies
    src = RUNNER.parent / e["bundle"]["file"]
    unpacked = tmp_path / "u"
    with tarfile.open(src) as t:
        t.extractall(unpacked, filter="data")
    calls = unpacked / "calls" / "llm_calls.jsonl"
    lines = calls.read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    first["rec"]["value"]["texts"] = ["an answer nobody gave"]
    lines[0] = json.dumps(first)
    calls.write_text("\n".join(lines) + "\n", encoding="utf-8")
    edited = tmp_path / "edited.tar.gz"
    with tarfile.open(edited, "w:gz") as t:
        for p in sorted(unpacked.rglob("*")):
            if p.is_file():
                t.add(p, arcname=p.relative_to(unpacked).as_posix())
    with pytest.raises(BundleError, match="calls/llm_calls.jsonl"):
        open_bundle(edited, tmp_path / "o")


def _heldout():
    return [x for x in _bundled_rows() if x[0].startswith("validation_heldout")]


@pytest.mark.slow
@pytest.mark.parametrize("table,row,entry", _heldout(), ids=lambda x: x if isinstance(x, str) else "")
def test_ci_replays_every_bundled_heldout_row_and_a_current_one_is_identical(table, row, entry, shared_data,
                                                                            tmp_path, monkeypatch, request):
    """Each bundled held-out row is re-run from its config with its replies as a read-only call
    store and its recorded rankings (no KG embedding store is built): a row whose JSON records it
    current (``currency``) must give identical requests, predictions and metrics (in full, or on its
    fixed prefix, :data:`CI_PREFIX`), with zero model calls. A row recorded stale or not yet checked
    is listed, not replayed. Every row's outcome and time is printed at the end of the session
    (tests/conftest.py). Measured on 2 cores: 3-45 s a row."""
    mod = _runner()
    log = request.config.__dict__.setdefault("validation_replays", [])
    verdict = mod.verdict(entry)
    if entry.get("history"):  # retired (docs/validation.md's history section): never shown beside current rows
        verdict = "retired"
        log.append((table, row, verdict, entry["history"].get("why", ""), None))
        pytest.skip(f"{table}/{row} is retired to the history section: not replayed")
    if verdict != "current":
        cur = entry.get("currency") or {}
        log.append((table, row, verdict, cur.get("line", "its bundle was never replayed on today's code"), None))
        pytest.skip(f"{table}/{row} is {verdict}" + (f" at {cur.get('at')}" if cur else "") + ": not replayed")
    monkeypatch.setenv("KGREASON_DATA", str(shared_data))
    monkeypatch.setenv("KGREASON_PROGRESS", "off")
    # a replay needs no weights: the named model answers from the store and is never looked for
    # (CI has no Qwen; kgreason/llm/local.py ``defer_load``)
    import kgreason.llm.local as local

    monkeypatch.setattr(local, "resolve_gguf", lambda *a, **k: pytest.fail("the replay looked for the model's weights"))
    opened = open_bundle(RUNNER.parent / entry["bundle"]["file"], tmp_path / "b")
    cache = tmp_path / "cache"
    from kgreason.storage.callstore import LLM_STORE

    (cache / LLM_STORE).mkdir(parents=True)
    shutil.copyfile(opened.root / "calls" / "llm_calls.jsonl", cache / LLM_STORE / "bundle.jsonl")
    out = tmp_path / "replayed"
    rel = opened.runs[0]
    first = PREFIX if row in CI_PREFIX else None
    v = replay_verdict(opened, rel, cache, out, first=first, rankings="recorded")
    log.append((table, row, v.status, v.line, v.seconds))
    assert v.status == "identical", (
        f"{table}/{row} is recorded current (at {entry['currency'].get('at')}) but replays {v.line}. The change "
        f"alters this row's requests or results: re-measure the row, or record it stale in the same commit "
        f"(python experiments/validation/run_validation.py --check-current --rows {row})")
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["llm/calls"] == 0
    if entry.get("partial"):  # a partial row's replay asks only the questions its bundle holds replies for
        with tarfile.open(RUNNER.parent / entry["bundle"]["file"]) as t:
            name = next(m for m in t.getnames() if m.endswith("/predictions.jsonl"))
            held = [json.loads(line)["id"] for line in t.extractfile(name).read().decode().splitlines() if line.strip()]
        answered = [json.loads(line)["id"] for line in (out / "predictions.jsonl").read_text().splitlines()
                    if line.strip()]
        assert sorted(answered) == sorted(held[:first] if first else held), (row, len(answered), len(held))
    if first is None and not entry.get("partial"):  # the whole row: the committed JSON row is what the replay gives
        # (a partial row's examples are compared by replay_verdict's compare_partial above)
        assert compare_run(opened.run_dir(rel), out) == "identical"
        got = mod.derive(out, row)
        assert mod.bundles._close(got["metrics"], entry["metrics"]) and got["n_examples"] == entry["n_examples"]


def test_no_committed_bundle_names_a_path_of_the_machine_that_made_it():
    """Paths under the data root, the clone and the home dir are written as ``$KGREASON_DATA/…``,
    ``./…`` and ``~/…`` (kgreason/storage/bundle.py ``portable``)."""
    machine = ("/" + "work" + "/", "/root/", "/home/")
    for _table, row, e in _bundled_rows():
        with tarfile.open(RUNNER.parent / e["bundle"]["file"]) as t:
            for m in t.getmembers():
                text = t.extractfile(m).read().decode("utf-8", "replace")
                assert not any(p in text for p in machine), (row, m.name)
        with tarfile.open(RUNNER.parent / e["bundle"]["file"]) as t:
            needs = json.loads(t.extractfile("manifest.json").read())["needs"]
        assert needs and all(k.startswith("$KGREASON_DATA/") for k in needs), needs


def test_a_replay_without_the_data_says_which_file_in_one_line(tmp_path, monkeypatch):
    _table, _row, e = _bundled_rows()[0]
    opened = open_bundle(RUNNER.parent / e["bundle"]["file"], tmp_path / "b")
    monkeypatch.setenv("KGREASON_DATA", str(tmp_path / "nowhere"))
    line = replay_verdict(opened, opened.runs[0], tmp_path / "cache", tmp_path / "out").line
    assert line.startswith("failed: needs the data file $KGREASON_DATA/") and "\n" not in line
    assert "set KGREASON_DATA" in line and not (tmp_path / "out").exists()


def test_a_partial_run_replays_only_the_examples_its_bundle_holds(tmp_path):
    """A row stopped before its N is bundled with the examples it answered; the replay answers the
    whole config (the rest miss the call store, as they must), and only the bundled examples are
    compared and re-scored (kgreason/runner/replay.py ``compare_partial``)."""
    from kgreason.runner.replay import compare_partial

    _table, _row, e = next(x for x in _bundled_rows() if x[1] == "metaqa_io")
    opened = open_bundle(RUNNER.parent / e["bundle"]["file"], tmp_path / "b")
    rows = [json.loads(x) for x in (opened.run_dir(opened.runs[0]) / "predictions.jsonl").read_text().splitlines()]
    bundled, replayed = tmp_path / "bundled", tmp_path / "replayed"
    bundled.mkdir()
    replayed.mkdir()
    kept = rows[:5]
    (bundled / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    hits = sum(r["metrics"]["hits_at_1"] for r in kept) / len(kept)
    (bundled / "metrics.json").write_text(json.dumps({"metric/hits_at_1": hits, "run/partial": True}))
    missed = [{**r, "prediction": None, "error": "CacheMiss: llm_cache.mode=readonly"} for r in rows[5:]]
    (replayed / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:5] + missed))
    ids = {r["id"] for r in kept}
    assert compare_partial(bundled, replayed, ids) == "identical (5 examples of a partial run)"
    changed = [{**rows[0], "prediction": "someone else"}] + rows[1:5]
    (replayed / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in changed))
    assert compare_partial(bundled, replayed, ids).startswith(
        f"stale: example {rows[0]['id']}: the same replies give another result: field ")


@pytest.mark.slow
def test_check_current_records_each_rows_verdict_with_the_commit_it_was_checked_at(tmp_path, shared_data,
                                                                                  monkeypatch):
    """``run_validation.py --check-current`` replays a row's bundle in a process of its own and
    records ``currency`` in the row's JSON: the verdict, the replay's line and the commit (about
    10 s: the first 2 questions of ``metaqa_io``)."""
    mod = _runner()
    _table, row, e = next(x for x in _heldout() if x[1] == "metaqa_io" and "n30" in x[0])
    monkeypatch.setenv("KGREASON_DATA", str(shared_data))
    monkeypatch.setattr(mod.places, "HERE", tmp_path)
    (tmp_path / e["bundle"]["file"]).parent.mkdir(parents=True)
    shutil.copy(RUNNER.parent / e["bundle"]["file"], tmp_path / e["bundle"]["file"])
    bare = {k: v for k, v in e.items() if k != "currency"}
    (tmp_path / "validation_heldout_n30_llamacpp.json").write_text(json.dumps({row: bare}))
    assert mod.verdict(bare) == "unchecked"
    lines = []
    ((table, got_row, rec),) = mod.check_current(rows=[row], first=2, echo=lines.append)
    assert (table, got_row) == ("validation_heldout_n30_llamacpp", row)
    assert rec["verdict"] == "current" and rec["line"] == "identical (the first 2 of 30 examples)", rec
    head = mod.stamp._git("rev-parse", "HEAD").strip()[:12]
    assert rec["at"] == head and rec["replay"] == "the first 2 questions, recorded rankings"
    saved = json.loads((tmp_path / "validation_heldout_n30_llamacpp.json").read_text())[row]
    assert saved["currency"] == rec and mod.verdict(saved) == "current"
    assert lines == [f"validation_heldout_n30_llamacpp/{row}: current ({rec['seconds']} s): {rec['line']}"]
