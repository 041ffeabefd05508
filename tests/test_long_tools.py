"""Long tools show progress (issue 74, item 5): ``kgreason ask``, ``show``, ``bundle replay`` and
``bundle verify`` print the run's progress lines (every ``KGREASON_PROGRESS_INTERVAL``, 30 s by
default) while they work, so hung and working no longer look the same; ``ask`` ends with the gold
answer, the score and the calls when its question is a dataset example; the drawing marks the gold
answers, its legend names only what it shows, and every label lies inside the picture.

The scripted model is a test double for control flow: it answers the README's ``ask`` example
wrongly ("The Hollow Orchard", the topic entity itself), as the issue saw ToG do with Qwen."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_QUESTION = "Which company produced The Hollow Orchard?"
WRONG_TOG = ("llm.rules=[{pattern:'^TASK: score',reply:'" + " ".join(f"{0.99 - i / 100:.2f}" for i in range(30))
             + "'},{pattern:'^TASK: decide',reply:'{No}'},{pattern:'^TASK: answer',reply:'Answer: The Hollow Orchard'}]")


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "KGREASON_OUTPUT": str(tmp / "outputs"), "KGREASON_PROGRESS": "log",
           "KGREASON_PROGRESS_INTERVAL": "0.3",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])), **extra}
    env.pop("HYDRA_FULL_ERROR", None)
    return env


def _stamps(lines: list[str]) -> list[int]:
    """Seconds of the day of ``[HH:MM:SS]`` log lines."""
    out = []
    for ln in lines:
        m = re.match(r"\[(\d\d):(\d\d):(\d\d)\]", ln)
        if m:
            h, mi, s = map(int, m.groups())
            out.append(h * 3600 + mi * 60 + s)
    return out


def test_ask_on_the_readmes_example_prints_progress_and_ends_with_gold_score_and_calls(tmp_path):
    out = tmp_path / "page.html"
    p = subprocess.run([sys.executable, "-m", "kgreason", "ask", README_QUESTION, "reasoner=tog", "llm=scripted",
                        "llm.delay_s=0.15", WRONG_TOG, "--out", str(out)], cwd=ROOT, env=_env(tmp_path),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    beats = [ln for ln in p.stderr.splitlines() if "answering example" in ln and "still running after" in ln]
    assert len(beats) >= 2, p.stderr[-3000:]  # a line each interval while the method answers
    assert re.search(r"\(\d+ LLM calls answered", beats[-1]), beats[-1]
    stamps = _stamps([ln for ln in p.stderr.splitlines() if "answering example" in ln])
    assert stamps and max(b - a for a, b in zip(stamps, stamps[1:])) <= 30  # never 30 s without a line
    lines = p.stdout.splitlines()
    row = json.loads(out.with_suffix(".json").read_text())["row"]
    calls = sum(u.get("calls", 0) for u in row["llm_usage"].values() if isinstance(u, dict))
    assert lines == ["answer: The Hollow Orchard",
                     "gold: Favark Pictures   (example emb-1hop-000 of the dataset)",
                     "score: Hits@1 0.000 · All answers 0.000 · Answer F1 0.000 · Coverage 0.000",
                     f"calls: {calls} model call(s), {sum(u.get('prompt_tokens', 0) + u.get('completion_tokens', 0) for u in row['llm_usage'].values() if isinstance(u, dict)):,} tokens",
                     f"page: {out}"], lines
    assert calls > 10
    page = out.read_text(encoding="utf-8")
    assert "gold answers ringed" in page
    drawn = "Favark Pictures" in re.findall(r"<text[^>]*>.*?</text>", page, re.S).__str__()
    assert drawn or "gold answer(s) not in the drawn subgraph: Favark Pictures" in page


def test_ask_without_progress_lines_when_the_terminal_has_none(tmp_path):
    """KGREASON_PROGRESS=off keeps stderr empty of progress: the end lines alone."""
    p = subprocess.run([sys.executable, "-m", "kgreason", "ask", README_QUESTION, "reasoner=io", "llm=scripted",
                        "--out", str(tmp_path / "p.html")], cwd=ROOT,
                       env=_env(tmp_path, KGREASON_PROGRESS="off"), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "still running" not in p.stderr and "answering" not in p.stderr
    assert p.stdout.splitlines()[1].startswith("gold: Favark Pictures")


def _figure_texts_inside(fig) -> list[str]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    r = FigureCanvasAgg(fig).get_renderer()
    box = fig.bbox
    out = []
    for ax in fig.axes:
        for t in ax.texts:
            if not t.get_text():
                continue
            b = t.get_window_extent(r)
            if b.x0 < box.x0 - 0.5 or b.y0 < box.y0 - 0.5 or b.x1 > box.x1 + 0.5 or b.y1 > box.y1 + 0.5:
                out.append(t.get_text())
    return out


LONG = "The Hollow Orchard: Director's Extended Cut"


def _tog_sub():
    return {"edges": [(LONG, "produced_by", "Favark Pictures", "beam, depth 1"),
                      (LONG, "genre", "fantasy", "beam, depth 1"),
                      ("Favark Pictures", "founded_in", "Republic of a Very Long Name Indeed", "beam, depth 2")],
            "topic": [LONG], "layer": {LONG: 0, "Favark Pictures": 1, "fantasy": 1,
                                       "Republic of a Very Long Name Indeed": 2}, "what": []}


def test_the_drawing_rings_the_gold_answer_and_keeps_every_label_inside():
    from kgreason.tables.question import GOLD_RING, figure

    fig = figure(_tog_sub(), [LONG], gold=["Favark Pictures"])
    assert _figure_texts_inside(fig) == []  # the topic's long name at the left edge is not cut
    ax = fig.axes[0]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[-3:] == ["topic entity", "predicted answer", "gold answer"], legend
    import matplotlib.colors as mc

    ringed = [c for c in ax.collections if hasattr(c, "get_linewidths") and len(c.get_offsets()) == 1
              and max(c.get_linewidths()) >= 2.5 and mc.to_hex(c.get_edgecolors()[0]) == GOLD_RING]
    assert len(ringed) == 1


def test_the_legend_names_only_what_the_drawing_shows():
    """The issue's page offered a green "predicted answer" no node showed (ToG answered with the
    topic entity) and did not mark the gold answer."""
    from kgreason.tables.question import figure

    fig = figure(_tog_sub(), ["Somewhere Else"], gold=["Nobody Drawn"])
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "predicted answer" not in legend and "gold answer" not in legend and "topic entity" in legend


def test_a_page_says_when_the_gold_answer_is_not_drawn():
    from kgreason.tables.question import question_page

    row = {"id": "q1", "question": "q?", "prediction": LONG, "answers": ["Zed"], "metrics": {"hits_at_1": 0.0},
           "trace": [{"kind": "beam", "name": "d1", "data": {"depth": 1, "kept": ["Favark Pictures"],
                                                              "triples": [[LONG, "produced_by", "Favark Pictures"]]}}]}
    page = question_page(row)
    assert "gold answer(s) not in the drawn subgraph: Zed" in page


def test_show_prints_progress_while_a_slow_page_is_made(tmp_path, monkeypatch, caplog):
    from kgreason.tables import question

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "predictions.jsonl").write_text(json.dumps({"id": "q1", "question": "q?", "prediction": "a",
                                                           "answers": ["a"], "metrics": {}, "trace": []}) + "\n")
    real = question.question_page

    def slow(*a, **k):
        time.sleep(0.4)
        return real(*a, **k)

    monkeypatch.setattr(question, "question_page", slow)
    monkeypatch.setenv("KGREASON_PROGRESS", "log")
    monkeypatch.setenv("KGREASON_PROGRESS_INTERVAL", "0.1")
    with caplog.at_level(logging.INFO, logger="kgreason"):
        assert question.show_main([str(run_dir), "q1"]) == 0
    msgs = [r.getMessage() for r in caplog.records if r.name.startswith("kgreason")]
    assert any("kgreason show: the page of q1: still running after" in m for m in msgs), msgs


def test_a_quick_show_prints_no_progress_line(tmp_path, monkeypatch, caplog):
    from kgreason.tables import question

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "predictions.jsonl").write_text(json.dumps({"id": "q1", "question": "q?", "prediction": "a",
                                                           "answers": ["a"], "metrics": {}, "trace": []}) + "\n")
    monkeypatch.setenv("KGREASON_PROGRESS", "log")
    with caplog.at_level(logging.INFO, logger="kgreason"):
        assert question.show_main([str(run_dir), "q1"]) == 0
    assert not [r for r in caplog.records if "kgreason show" in r.getMessage()]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    """A one-run bundle of a 6-question io run with the scripted model."""
    tmp = tmp_path_factory.mktemp("bundle")
    env = _env(tmp, KGREASON_PROGRESS="off")
    r = subprocess.run([sys.executable, "-m", "kgreason", "--multirun", "reasoner=io", "llm=scripted",
                        "llm.default=x", "dataset.limit=6", "tracking=none", "reports.hop_distribution=false",
                        f"llm_cache.dir={tmp / 'cache'}", f"hydra.sweep.dir={tmp / 'sweep'}"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    b = tmp / "b.tar.gz"
    r = subprocess.run([sys.executable, "-m", "kgreason", "bundle", "export", str(tmp / "sweep"), "-o", str(b)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return b


def test_bundle_replay_prints_each_runs_progress(bundle, tmp_path):
    r = subprocess.run([sys.executable, "-m", "kgreason", "bundle", "replay", str(bundle), "--out", str(tmp_path / "r")],
                       cwd=ROOT, env=_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    assert "replaying run 0 (1 of 1)" in r.stderr, r.stderr[-2000:]
    assert re.search(r"examples: 6/6 ex .*\(done\)", r.stderr), r.stderr[-2000:]  # the run's own progress
    assert "HTTP Request" not in r.stderr and "0: identical" in r.stdout


def test_bundle_verify_prints_progress_while_it_works(bundle, monkeypatch, caplog, capsys):
    from kgreason.runner import replay

    real = replay.verify

    def slow(opened):
        time.sleep(0.4)
        return real(opened)

    monkeypatch.setattr(replay, "verify", slow)
    monkeypatch.setenv("KGREASON_PROGRESS", "log")
    monkeypatch.setenv("KGREASON_PROGRESS_INTERVAL", "0.1")
    with caplog.at_level(logging.INFO, logger="kgreason"):
        assert replay.main(["verify", str(bundle)]) == 0
    msgs = [r.getMessage() for r in caplog.records]
    assert any(re.search(r"verifying 1 run\(s\) of .*: still running after", m) for m in msgs), msgs
    assert "1 of 1 runs verified" in capsys.readouterr().out
