"""One question, seen (issue 59 item 8): ``kgreason ask`` answers one question with any method and
writes one self-contained HTML page (the answer, every model call with its prompt and reply, a
drawing of the subgraph the method used); ``kgreason show`` writes the same page for an example
of a finished run; ``kgreason report`` links such pages.

The scripted model is a test double for control flow here: what is checked is that every call
the method made is on the page and that the drawing holds the facts the trace recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest

from conftest import compose_cfg

from kgreason.tables.question import show_main, subgraph_of

ROOT = Path(__file__).resolve().parents[1]
SVG_NS = "{http://www.w3.org/2000/svg}"
DESCENDING = " ".join(f"{0.99 - i / 1000:.3f}" for i in range(40))
TOG_RULES = [{"pattern": r"^TASK: score", "reply": DESCENDING}, {"pattern": r"^TASK: decide", "reply": "{No}"},
             {"pattern": r"^TASK: answer", "reply": "Answer: Favark Pictures"}]


def _rules() -> str:
    """:data:`TOG_RULES` as a Hydra override."""
    return "llm.rules=[" + ",".join("{pattern:'%s',reply:'%s'}" % (r["pattern"], r["reply"]) for r in TOG_RULES) + "]"


class _Page(HTMLParser):
    """Collects the page's tags (and fails on a closing tag that closes nothing open)."""

    VOID = {"meta", "br", "hr", "img", "input", "link"}

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        assert tag in self.stack, f"</{tag}> closes nothing"
        while self.stack.pop() != tag:
            pass

    def handle_data(self, data):
        self.text.append(data)


def _parse(page: str) -> _Page:
    p = _Page()
    p.feed(page)
    p.close()
    assert not p.stack, f"unclosed tags: {p.stack}"
    return p


def _svg_texts(page: str) -> list[str]:
    svg = page[page.index("<svg"): page.index("</svg>") + 6]
    root = ET.fromstring(svg)  # the inline drawing is well-formed SVG
    return ["".join(t.itertext()).strip() for t in root.iter(f"{SVG_NS}text")]


def _nothing_fetched(doc: _Page) -> None:
    """No script, stylesheet link, image or font is loaded: every tag's URL is a fragment or none."""
    assert not [t for t, _ in doc.tags if t in ("script", "link", "img", "iframe", "object")]
    urls = [v for _, a in doc.tags for k, v in a.items() if k in ("src", "href", "xlink:href") and v]
    assert all(u.startswith("#") for u in urls), urls


def test_ask_on_the_embedded_world_writes_a_page_with_the_drawn_subgraph(tmp_path):
    """A question typed by hand (with HTML in it) through the real command: ToG on the embedded
    world, starting from the entity the question names; the page escapes the question, draws the
    beam of every depth, and shows every model call with its prompt and reply."""
    out = tmp_path / "page.html"
    q = "Who produced <i>The Hollow Orchard</i> & when?"
    env = {**os.environ, "KGREASON_PROGRESS": "off", "KGREASON_OUTPUT": str(tmp_path / "outputs")}
    env.pop("HYDRA_FULL_ERROR", None)
    p = subprocess.run([sys.executable, "-m", "kgreason", "ask", q, "reasoner=tog", "llm=scripted", _rules(),
                        "--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    out_lines = p.stdout.splitlines()  # a question typed by hand has no gold: no gold or score line (test_long_tools.py)
    assert out_lines[0] == "answer: Favark Pictures" and out_lines[-1] == f"page: {out}", p.stdout
    assert len(out_lines) == 3 and out_lines[1].startswith("calls: "), p.stdout
    page = out.read_text(encoding="utf-8")
    doc = _parse(page)
    _nothing_fetched(doc)
    assert "<i>" not in page and "&lt;i&gt;The Hollow Orchard&lt;/i&gt; &amp; when?" in page
    row = json.loads(out.with_suffix(".json").read_text())["row"]
    assert row["trace"][0]["data"]["linked"][0][0] == "The Hollow Orchard"  # found in the question
    texts = _svg_texts(page)
    assert "The Hollow Orchard" in texts and "Favark Pictures" in texts  # topic and answer drawn
    assert "produced_by" in texts  # an edge label
    beams = [s["data"] for s in row["trace"] if s["kind"] == "beam"]
    assert beams and all(set(b["kept"]) <= set(texts) for b in beams)
    llm_steps = [s for s in row["trace"] if s["kind"] == "llm"]
    calls = [t for t in doc.tags if t[0] == "details" and t[1].get("class") == "call"]
    assert len(calls) == len(llm_steps) == row["extra"]["llm_calls"] > 1
    text = "".join(doc.text)
    assert all(s["data"]["messages"][-1]["content"].splitlines()[0] in text for s in llm_steps)
    assert "Answer: Favark Pictures" in text
    assert row["metrics"] == {}  # a question typed by hand has no gold: nothing is scored


def test_show_on_a_finished_tog_run_draws_the_beam_per_depth_and_every_call(tmp_path, monkeypatch):
    from kgreason.runner.run import run

    run_dir = tmp_path / "run"
    cfg = compose_cfg(["reasoner=tog", "llm=scripted", "dataset.limit=2", "tracking=none",
                       "reports.hop_distribution=false", f"llm_cache.dir={tmp_path / 'cache'}"], run_dir)
    cfg.llm.rules = TOG_RULES
    run(cfg, run_dir)
    row = json.loads((run_dir / "predictions.jsonl").read_text().splitlines()[0])
    monkeypatch.chdir(tmp_path)
    assert show_main([str(run_dir), row["id"]]) == 0
    page = (run_dir / "questions" / f"question_{row['id']}.html").read_text(encoding="utf-8")
    doc = _parse(page)
    _nothing_fetched(doc)
    beams = [s["data"] for s in row["trace"] if s["kind"] == "beam"]
    assert len(beams) == row["extra"]["depth_reached"] >= 2
    texts = _svg_texts(page)
    for b in beams:  # every entity of every depth's beam is drawn, and the legend names the depth
        assert set(b["kept"]) <= set(texts), (b["kept"], texts)
        assert f"beam, depth {b['depth']}" in texts
    sub = subgraph_of(row["trace"])
    assert {g for *_, g in sub["edges"]} == {f"beam, depth {b['depth']}" for b in beams}
    assert sub["layer"][sub["topic"][0]] == 0 and all(sub["layer"][e] == b["depth"] for b in beams for e in b["kept"])
    calls = [t for t in doc.tags if t[0] == "details" and t[1].get("class") == "call"]
    assert len(calls) == row["extra"]["llm_calls"] == sum(row["llm_usage"]["answer"]["calls"] for _ in [0])
    prompts = [t for t in doc.tags if t[0] == "pre" and t[1].get("class") == "prompt"]
    assert len(prompts) == sum(len(s["data"]["messages"]) for s in row["trace"] if s["kind"] == "llm")
    # the run's predictions.jsonl names the run as well; an unknown id is one line
    assert show_main([str(run_dir / "predictions.jsonl"), row["id"], "--out", str(tmp_path / "p.html")]) == 0
    assert (tmp_path / "p.html").read_text(encoding="utf-8") == page
    assert show_main([str(run_dir), "no-such-id"]) == 2


def test_report_links_the_pages_of_each_runs_first_examples(tmp_path):
    from kgreason.report import main as report_main

    run_dir = tmp_path / "run"
    p = subprocess.run([sys.executable, "-m", "kgreason", "reasoner=tog", "llm=scripted", _rules(), "dataset.limit=2",
                        "tracking=none", "reports.hop_distribution=false", f"hydra.run.dir={run_dir}"], cwd=ROOT,
                       env={**os.environ, "KGREASON_PROGRESS": "off"}, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert report_main([str(run_dir), "--questions", "2", "--ci", "none"]) == 0
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    links = [a["href"] for tag, a in _parse(page).tags if tag == "a"]
    assert len(links) == 2 and all((run_dir / h).is_file() for h in links), links
    assert "<svg" in (run_dir / links[0]).read_text(encoding="utf-8")
    assert "## Questions" in (run_dir / "report.md").read_text(encoding="utf-8")


def test_report_pages_read_the_last_row_per_id_and_skip_a_torn_line(tmp_path):
    """A resumed run holds an example twice (its error row, then the retry) and may hold a torn
    line (a kill mid-write): the report links each of the first examples once, drawn from its last
    row, and a torn line is skipped, not a traceback."""
    from types import SimpleNamespace

    import pandas as pd

    from kgreason.report import question_pages

    run = tmp_path / "run"
    run.mkdir()
    lines = [json.dumps({"id": "a", "prediction": "", "error": "timeout", "trace": []}), '{"id": "b", "predic',
             json.dumps({"id": "a", "prediction": "retried answer", "trace": []}),
             json.dumps({"id": "c", "prediction": "y", "trace": []})]
    (run / "predictions.jsonl").write_text("\n".join(lines) + "\n")
    t = SimpleNamespace(df=pd.DataFrame({"job": ["run"]}), root=tmp_path)
    items = question_pages(t, tmp_path / "out", 2)
    assert [i.split("]")[0] for i in items] == ["- [run: a", "- [run: c"], items
    assert "retried answer" in (tmp_path / "out" / "questions" / "run" / "question_a.html").read_text()


def test_sgr_paths_and_subqrag_subquestions_are_read_from_their_trace_steps():
    """The trace steps SGR (hypothesis calls' parsed claims, sgr/collaborative.py ``reasoning_path``) and SubQRAG
    (``subquestion`` steps, subqrag.py ``_answer``) record become one edge group each."""
    trace = [
        {"kind": "link", "name": "topic_entities", "data": {"linked": [["Paris", 3, "exact"]]}},
        {"kind": "llm", "name": "hypothesis_p0_t0", "data": {"parsed": {"answer": "France", "claims": [
            ["Paris", "capital_of", "France"]]}}},
        {"kind": "llm", "name": "hypothesis_p1_t0", "data": {"parsed": {"answer": "Seine", "claims": [
            ["Paris", "crossed_by", "Seine"], ["Paris", "capital_of", "France"]]}}},
        {"kind": "subquestion", "name": "q1", "data": {"subquestion": "Which river crosses Paris?",
                                                       "used": [["Seine", "crosses", "Paris"]]}},
        {"kind": "memory", "name": "graph_memory", "data": {"triples": [["Seine", "crosses", "Paris"]]}},
    ]
    sub = subgraph_of(trace)
    assert sub["topic"] == ["Paris"]
    assert sub["edges"] == [("Paris", "capital_of", "France", "path p0 (claimed)"),
                            ("Paris", "crossed_by", "Seine", "path p1 (claimed)"),
                            ("Seine", "crosses", "Paris", "q1: Which river crosses Paris?")]


def test_ask_refuses_a_typo_and_a_bare_word_in_one_line(tmp_path):
    from kgreason.ask import main

    assert main(["Who?", "reasoner=rgg"]) == 2
    assert main(["Who", "directed", "it?"]) == 2


def test_ask_takes_options_after_the_overrides_and_refuses_an_unknown_topic(tmp_path, monkeypatch, capsys):
    """``--topic``/``--out`` may stand between the question and the overrides or after them;
    a ``--topic`` the KG does not know stops in one line naming it, instead of a run from no entity
    that answers nothing."""
    from kgreason.ask import main

    monkeypatch.setenv("KGREASON_OUTPUT", str(tmp_path / "outputs"))
    monkeypatch.setenv("KGREASON_PROGRESS", "off")
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    out = tmp_path / "page.html"
    assert main(["Who produced it?", "--topic", "The Hollow Orchard", "reasoner=retrieval_only",
                 "--out", str(out)]) == 0
    row = json.loads(out.with_suffix(".json").read_text())["row"]
    assert row["trace"][0]["data"]["linked"][0][0] == "The Hollow Orchard"
    capsys.readouterr()
    assert main(["Who produced it?", "reasoner=retrieval_only", "--topic", "No Such Entity Qq",
                 "--out", str(tmp_path / "x.html")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'No Such Entity Qq'" in err[0] and "--topic" in err[0], err
    assert not (tmp_path / "x.html").exists()


def test_show_says_in_one_line_what_it_could_not_write_or_find(tmp_path, capsys):
    """A page that cannot be written (its folder is a file) is one line naming the path, not a
    traceback; a run with no rows says so instead of an empty "e.g." list."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "predictions.jsonl").write_text(json.dumps({"id": "a", "prediction": "x", "trace": []}) + "\n")
    (tmp_path / "afile").write_text("")
    assert show_main([str(run), "a", "--out", str(tmp_path / "afile" / "p.html")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kgreason show: error:") and "afile" in err[0], err
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "predictions.jsonl").write_text("")
    assert show_main([str(empty), "a"]) == 2
    err = capsys.readouterr().err
    assert "no rows" in err and "e.g." not in err, err


def test_ask_writes_a_question_with_undecodable_bytes(tmp_path, monkeypatch):
    """A question typed in another encoding reaches Python as lone surrogates (argv's
    surrogateescape); the page and its JSON are still written, each such character as U+FFFD,
    as every JSON writer of a run does (kgreason/textio.py utf8_safe)."""
    from kgreason.ask import main

    monkeypatch.setenv("KGREASON_OUTPUT", str(tmp_path / "outputs"))
    monkeypatch.setenv("KGREASON_PROGRESS", "off")
    out = tmp_path / "page.html"
    assert main(["Caf\udce9 owner?", "reasoner=retrieval_only", "--out", str(out)]) == 0
    assert "Caf\ufffd owner?" in out.read_text(encoding="utf-8")
    assert json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))["row"]["question"] == "Caf\ufffd owner?"


def test_show_names_the_file_of_a_file_system_error_not_its_number(tmp_path, monkeypatch, capsys):
    """A FileNotFoundError from the file system carries its errno first: the line is its message
    ("[Errno 2] ... 'path'"), not "error: 2"."""
    import errno

    run = tmp_path / "run"
    run.mkdir()
    (run / "predictions.jsonl").write_text(json.dumps({"id": "a", "prediction": "x", "trace": []}) + "\n")

    def gone(src, dst, *a, **k):  # the page is written whole, then renamed into place (kgreason/textio.py)
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(src))

    monkeypatch.setattr(os, "replace", gone)
    assert show_main([str(run), "a", "--out", str(tmp_path / "p.html")]) == 2
    err = capsys.readouterr().err.strip()
    assert "No such file or directory" in err and "p.html" in err, err


def test_the_readmes_python_entry_point_runs_as_written(tmp_path):
    """The README's Python block (one configuration from Python, its metrics read) runs as pasted."""
    import re

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    code = next(b for b in blocks if "from kgreason.runner.run import run" in b)
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "KGREASON_PROGRESS": "off", "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0, p.stderr
    hits, n, out = p.stdout.split()
    assert 0.0 <= float(hits) <= 1.0 and int(n) == 20
    assert (tmp_path / out / "metrics.json").is_file()


def test_show_and_report_draw_the_funnel_in_stage_order(tmp_path, monkeypatch):
    """Issue 72, item 3: ``kgreason show`` lists the stages the question passed in the reasoner's
    order (``metrics.json`` ``funnel/_stages``) and marks the first it did not reach; ``kgreason
    report`` has a funnel section with a column per stage."""
    from kgreason.report import main as report_main
    from kgreason.runner.run import run

    run_dir = tmp_path / "run"
    cfg = compose_cfg(["reasoner=tog", "llm=scripted", "dataset.limit=2", "tracking=none", "reasoner.depth=2",
                       "reports.hop_distribution=false", f"llm_cache.dir={tmp_path / 'cache'}"], run_dir)
    cfg.llm.rules = TOG_RULES  # {No} at every depth: no {Yes}, answered without knowledge at depth 2
    run(cfg, run_dir)
    row = json.loads((run_dir / "predictions.jsonl").read_text().splitlines()[0])
    stages = json.loads((run_dir / "metrics.json").read_text())["funnel/_stages"]
    monkeypatch.chdir(tmp_path)
    assert show_main([str(run_dir), row["id"]]) == 0
    doc = _parse((run_dir / "questions" / f"question_{row['id']}.html").read_text(encoding="utf-8"))
    rows = [t for t in doc.tags if t[0] == "tr" and t[1].get("class") in ("yes", "no")]
    assert [t[1]["class"] for t in rows] == ["no" if row["extra"]["funnel"].get(s) in (None, False) else "yes"
                                            for s in stages]
    page = (run_dir / "questions" / f"question_{row['id']}.html").read_text(encoding="utf-8")
    order = [page.index(f"<td>{s}</td>") for s in stages]
    assert order == sorted(order)
    assert page.count("first stage not reached") == 1 and "<td>yes_depth1</td><td>not reached ← first stage" in page
    assert "<td>answered_by</td><td>= without_knowledge</td>" in page
    assert report_main([str(run_dir), "--questions", "0", "--ci", "none"]) == 0
    md = (run_dir / "report.md").read_text(encoding="utf-8")
    assert "## Funnel: where the questions were lost" in md
    header = next(x for x in md.split("## Funnel", 1)[1].splitlines() if x.startswith("|"))
    assert [c.strip() for c in header.strip("|").split("|")][2:9] == stages[:7]
