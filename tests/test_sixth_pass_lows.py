"""The sixth reliability pass's lows (issue 73: L5, L6, L7, L9), each checked as a user meets it.

L8 (`models fetch` and the pinned size) is in tests/llm/test_models_fetch.py; L1-L4 are with the
bundles (tests/storage/test_bundle_hostile.py) and the call store (tests/storage/test_callstore_merge.py)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import types
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
BUNDLE = REPO / "experiments" / "validation" / "bundles" / "heldout_n100_llamacpp" / "metaqa_io.tar.gz"


def _kg(tmp: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**ENV, "KGREASON_CACHE_DIR": str(tmp / "kgcache"), "KGREASON_OUTPUT": str(tmp / "outputs")}
    return subprocess.run([sys.executable, "-m", "kgreason", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


def _no_traceback(r: subprocess.CompletedProcess, *needles: str) -> None:
    assert r.returncode == 2 and "Traceback" not in r.stderr, (r.returncode, r.stderr[-3000:])
    for n in needles:
        assert n in r.stderr, r.stderr[-3000:]


# ------------------------------------------------------------------------------------------ L9
def test_an_in_order_reasoner_with_several_workers_is_refused_before_anything_is_built(tmp_path):
    r = _kg(tmp_path, "reasoner=subqrag", "dataset=embedded_multihop", "llm=scripted", "example_workers=4",
            "dataset.limit=2", "tracking=none", f"llm_cache.dir={tmp_path / 'c'}", f"hydra.run.dir={tmp_path / 'r'}")
    _no_traceback(r, "example_workers=4", "SubQRAG", "set example_workers=1")
    assert not (tmp_path / "r").exists()


def test_a_readonly_cache_that_is_not_there_is_one_setting_to_fix(tmp_path):
    r = _kg(tmp_path, "reasoner=io", "llm=scripted", "dataset.limit=1", "llm_cache.mode=readonly",
            f"llm_cache.dir={tmp_path / 'nocache'}", "tracking=none", f"hydra.run.dir={tmp_path / 'r'}")
    _no_traceback(r, "llm_cache.mode=readonly", str(tmp_path / "nocache"))


def test_ask_against_a_sparql_endpoint_without_the_graph_is_one_line(tmp_path, shared_data):
    """Needs the CWQ sample (``dataset=cwq`` reads it before the endpoint is asked): skips without it."""
    pytest.importorskip("pyoxigraph")
    from kgreason.kg.sparql_local import OxigraphServer

    with OxigraphServer() as srv:  # an endpoint that answers, holding no graph
        r = _kg(tmp_path, "ask", "Who directed Heat?", "kg=freebase_sparql", f"kg.url={srv.url}", "retriever=sparql",
                "reasoner=io", "llm=scripted", "dataset=cwq", f"kg.cache_dir={tmp_path / 'sc'}",
                "--out", str(tmp_path / "ask.html"))
    _no_traceback(r, "kgreason ask: error: SPARQL endpoint", "is the Freebase graph loaded")
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


# ------------------------------------------------------------------------------------------ L6
def test_ask_caps_its_entity_lookups_on_a_sparql_kg(tmp_path, capsys):
    """2,000 words sent 15,987 entity-lookup queries to the endpoint, with no cap."""
    pytest.importorskip("pyoxigraph")
    from kgreason import ask
    from kgreason.ask import _example
    from kgreason.kg.sparql import freebase_sparql
    from kgreason.kg.sparql_local import OxigraphServer

    cap = getattr(ask, "MAX_REMOTE_LOOKUPS", 256)
    ns = "http://rdf.freebase.com/ns/"
    data = (f"<{ns}m.0f1> <{ns}film.film.directed_by> <{ns}m.0p1> .\n"
            f'<{ns}m.0p1> <{ns}type.object.name> "Michael Mann"@en .\n'
            f'<{ns}m.0f1> <{ns}type.object.name> "Heat"@en .\n')
    with OxigraphServer(data=data) as srv:
        kg = freebase_sparql(srv.url, cache_dir=None, backoff_s=0.01)
        question = "Michael Mann directed which film? " + " ".join(["Lorem"] * 300)
        before = srv.requests
        ex = _example(types.SimpleNamespace(dataset=[], kg=kg), question, None, [])
        sent = srv.requests - before
    assert ex.topic_entities == ("m.0p1",)  # Michael Mann, found before the cap
    assert sent <= cap + 5, f"{sent} queries for one question"  # + the label fetch of a hit
    err = capsys.readouterr().err
    assert f"stopped looking for entity names after {cap} lookups" in err and "--topic" in err


# ------------------------------------------------------------------------------------------ L5
def test_a_stop_before_an_embedding_stores_first_bar_says_the_store_restarts(tmp_path, monkeypatch, caplog):
    """A stop early in an embedding-store build (loading the model, before its progress bar) said
    "what the set-up finished is kept (SubQRAG's index…) and a resume goes on from there", while the
    store is discarded and rebuilt."""
    from kgreason import progress
    from kgreason.runner import run
    from kgreason.runner.run import RunInterrupted

    def stopped(c):
        raise RunInterrupted(signal.SIGTERM)

    monkeypatch.setattr(run, "_open_embedding_stores", stopped)
    c = types.SimpleNamespace(run_id=None, reasoner=None, dataset=None)
    with pytest.raises(RunInterrupted) as e:
        run._prepare(c, [], tmp_path)
    assert progress.stopped_at() is None  # no bar had started
    with caplog.at_level(logging.WARNING, logger="kgreason"):
        run._write_prepare_stopped(tmp_path, e.value, 0, 5)
    line = caplog.records[-1].getMessage()
    assert "a resume goes on from there" not in line and "SubQRAG" not in line, line
    assert "not kept" in line and "the store restarts" in line, line


# ------------------------------------------------------------------------------------------ L7
@pytest.fixture
def full_disk(tmp_path):
    from tmpfs_util import small_tmpfs

    with small_tmpfs(tmp_path / "disk", size="1m", free=0) as d:
        yield d


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A finished run's dir (a committed bundle's run, unpacked)."""
    from kgreason.storage.bundle import open_bundle

    opened = open_bundle(BUNDLE, tmp_path_factory.mktemp("b") / "opened")
    return opened.run_dir(opened.runs[0])


def _one_line_naming(r: subprocess.CompletedProcess, path: Path) -> None:
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert "No space left on device" in lines[-1] and str(path) in lines[-1], r.stderr[-3000:]


def _files(d: Path) -> list[tuple[str, int]]:
    return sorted((p.relative_to(d).as_posix(), p.stat().st_size) for p in d.rglob("*") if p.is_file())


def test_show_on_a_full_disk_names_the_page_and_leaves_no_empty_one(tmp_path, full_disk, run_dir):
    page = full_disk / "page.html"
    r = _kg(tmp_path, "show", str(run_dir), _first_id(run_dir), "--out", str(page))
    _one_line_naming(r, page)
    assert not page.exists() and _files(full_disk) == [("filler", (full_disk / "filler").stat().st_size)]


def _first_id(run_dir: Path) -> str:
    import json

    return json.loads((run_dir / "predictions.jsonl").read_text().splitlines()[0])["id"]


@pytest.mark.parametrize("tool", ["tables", "report"])
def test_tables_and_report_on_a_full_disk_name_the_file_and_leave_no_empty_one(tmp_path, full_disk, tool):
    out = full_disk / "out"
    out.mkdir()
    r = _kg(tmp_path, tool, str(BUNDLE), "--out", str(out), "--boot", "50", *(["--questions", "0"] if tool == "report" else []))
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert "No space left on device" in lines[-1] and f"{out}/" in lines[-1], r.stderr[-3000:]
    assert _files(out) == [], _files(out)  # no empty or half-written table
