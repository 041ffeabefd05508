"""kgreason report: one self-contained Markdown + HTML page from a sweep's run dirs."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from pathlib import Path

from test_tables import _run

from kgreason.report import build_report, markdown_to_html

REPO = Path(__file__).resolve().parents[1]


def _sweep(tmp_path):
    root = tmp_path / "m"
    for k, (reasoner, hits, wall) in enumerate([("io", [1, 0, 0, 1, 0, 0], 3.5), ("sgr", [1, 1, 0, 1, 1, 0], 9.25)]):
        d = _run(root, k, reasoner, 0, hits)
        m = json.loads((d / "metrics.json").read_text())
        m.update({"llm/calls": 6 * (k + 1), "llm/prompt_tokens": 1000 * (k + 1), "llm/completion_tokens": 50})
        (d / "metrics.json").write_text(json.dumps(m))
        (d / "timing.json").write_text(json.dumps({"wall_s": wall}))
    return root


def test_report_is_one_self_contained_page(tmp_path):
    root = _sweep(tmp_path)
    r = subprocess.run([sys.executable, "-m", "kgreason", "report", str(root), "--metrics", "hits_at_1,f1",
                        "--baseline", "reasoner=io", "--boot", "300"], cwd=REPO, capture_output=True, text=True,
                       timeout=180)
    assert r.returncode == 0, r.stderr
    md = (root / "report.md").read_text()
    page = (root / "report.html").read_text()
    for section in ("## Results", "## Paired comparisons", "## Cost per row", "## Figures"):
        assert section in md
    assert "bootstrap interval of the mean over the cell's 6 questions (B = 300" in md
    paired = md.split("## Paired comparisons")[1]
    assert paired.index("| reasoner=sgr | cwq / hits_at_1 | +0.333 |") < paired.index("| reasoner=sgr | cwq / f1 |")
    cost = md.split("## Cost per row")[1].split("##")[0]
    assert "LLM calls" in cost and "Wall time (s)" in cost
    sgr = next(ln for ln in cost.splitlines() if ln.startswith("| sgr"))
    # counts are whole and seconds have one decimal (issue 56 notes: "12.000" calls read as a fraction)
    assert "| 12 |" in sgr and "| 2000 |" in sgr and "| 9.2 |" in sgr and ".000" not in cost
    assert "**" not in cost  # costs are not scores: no row is "best" (issue 59: the longer wall time was bold)
    # figures are embedded, nothing is fetched
    pngs = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(pngs) == 2 and all(base64.b64decode(p)[:4] == b"\x89PNG" for p in pngs)
    assert not re.search(r'(src|href)="(https?:)?//', page) and "<script" not in page and "<link" not in page
    assert "<table>" in page and "<strong>" in page


def test_report_refuses_like_tables(tmp_path):
    root = tmp_path / "m"
    _run(root, 0, "io", 0, [1, 0], ids=["a", "b"])
    _run(root, 1, "sgr", 0, [1, 0], ids=["a", "c"])
    r = subprocess.run([sys.executable, "-m", "kgreason", "report", str(root), "--baseline", "reasoner=io"],
                       cwd=REPO, capture_output=True, text=True, timeout=180)
    assert r.returncode == 2 and "did not answer the same questions" in r.stderr
    md, page = build_report(root, ci=None)
    assert "## Paired comparisons" not in md and page.startswith("<!DOCTYPE html>")


def test_markdown_to_html_escapes():
    page = markdown_to_html("# t\n\n| a | b |\n|---|---|\n| <x> | **1** |\n")
    assert "<td>&lt;x&gt;</td>" in page and "<td><strong>1</strong></td>" in page


def _report(*args):
    return subprocess.run([sys.executable, "-m", "kgreason", "report", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=180)


def test_partial_seed_is_refused_then_drawn_without_a_crash(tmp_path):
    """Issue 41: a SIGTERM'd seed averaged with a complete one put the cell's mean below its
    interval, and the figure crashed ("'xerr' must not contain negative values")."""
    from test_tables import _metrics

    root = tmp_path / "m"
    _run(root, 0, "io", 0, [1, 1, 1, 1, 1, 1, 1, 1])
    part = _run(root, 1, "io", 1, [0])
    _metrics(part, run__partial=True, run__n_expected=8)
    r = _report(root, "--boot", "300")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and part.name in r.stderr
    assert "--allow-partial" in r.stderr and "Traceback" not in r.stderr
    r = _report(root, "--boot", "300", "--allow-partial")
    assert r.returncode == 0, r.stderr
    md = (root / "report.md").read_text()
    assert "1 partial" in md.splitlines()[2] and f"{part.name} (1/8 examples)" in md
    assert "(partial)" in md and "data:image/png;base64," in md


def test_non_finite_metrics_and_failed_runs_are_named(tmp_path):
    root = tmp_path / "m"
    d = _run(root, 0, "io", 0, [1, 0, 1])
    (d / "metrics.json").write_text('{"metric/hits_at_1": Infinity, "metric/f1": 0.5, "run/n_examples": 3}')
    _run(root, 1, "sgr", 0, [1, 1, 1])
    bad = root / "2_reasoner=tog"
    bad.mkdir()
    (bad / "failed.json").write_text(json.dumps({"status": "failed", "reason": "no API key", "stage": "startup"}))
    r = _report(root, "--boot", "300")
    assert r.returncode == 0, r.stderr
    md = (root / "report.md").read_text()
    assert f"{d.name}/metrics.json: metric/hits_at_1 is inf" in md
    assert "- 2_reasoner=tog: failed (startup): no API key" in md
    assert "1 failed" in md.splitlines()[2]


def test_report_takes_the_resampling_seed_like_tables(tmp_path):
    """``report --ci-seed`` reaches the bootstrap, as ``tables --ci-seed`` does: the same seed
    gives the same page, another seed other interval ends (the means stay)."""
    from kgreason.report import main

    root = _sweep(tmp_path)
    pages = {}
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        assert main([str(root), "--metrics", "hits_at_1", "--boot", "200", "--ci-seed", str(seed),
                     "--name", name]) == 0
        page = (root / f"{name}.md").read_text().split("## Figures")[0]
        # the page's time stamp (to the minute) can roll over between two builds on a loaded machine
        pages[name] = re.sub(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC", "<stamp>", page)
    assert pages["a"] == pages["b"]
    assert pages["a"] != pages["c"]
    assert "0.333" in pages["c"] and "0.667" in pages["c"]


def test_a_replayed_run_is_marked_and_never_ranked_cheap(tmp_path):
    """Issue 59: the same sweep launched twice; the second's io job is answered from the call
    cache (llm/calls 0). Its report marks the row (replayed), bolds no cost, and says that the
    answers came from the cache, where it lives and how to turn it off."""
    import os

    env = {**os.environ, "KGREASON_CACHE_DIR": str(tmp_path / "cache"), "KGREASON_PROGRESS": "off"}
    for name in ("first", "again"):
        r = subprocess.run([sys.executable, "-m", "kgreason", "--multirun", "reasoner=io,retrieval_only",
                            "llm=scripted", "llm.default=x", "tracking=none", "dataset.limit=6",
                            f"hydra.sweep.dir={tmp_path / name}"], cwd=REPO, env=env, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
    r = _report(tmp_path / "again", "--boot", "200")
    assert r.returncode == 0, r.stderr
    md = (tmp_path / "again" / "report.md").read_text()
    cost = md.split("## Cost per row")[1].split("\n## ")[0]
    io = next(ln for ln in cost.splitlines() if ln.startswith("| io"))
    assert io.startswith("| io (replayed) |") and "**" not in cost
    assert "| retrieval_only |" in cost  # no LLM request at all: nothing replayed
    cache = md.split("## Answers from the call cache")[1]
    assert "6 of 6 answers replayed from the call cache (6 of 6 LLM requests)" in cache
    assert str(tmp_path / "cache" / "llm_calls") in cache and "llm_cache.mode=off" in cache
    first = _report(tmp_path / "first", "--boot", "200")
    fresh = (tmp_path / "first" / "report.md").read_text()
    assert first.returncode == 0 and "(replayed)" not in fresh and "## Answers from the call cache" not in fresh


def test_an_out_dir_that_cannot_be_written_is_one_line(tmp_path, capsys):
    """--out under a file: the question pages (written while the report is built) and the report
    itself stop in one line naming the path, exit 2, not a traceback."""
    from kgreason.report import main

    root = _sweep(tmp_path)
    (tmp_path / "afile").write_text("")
    assert main([str(root), "--out", str(tmp_path / "afile" / "rep"), "--ci", "none"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "afile" in err[0], err


def test_a_count_whose_mean_over_seeds_is_not_whole_keeps_one_decimal(tmp_path):
    """Counts are printed whole (12, not 12.000), but a mean over seeds of 11 and 12 calls is 11.5,
    never rounded to a whole number that no run made."""
    root = tmp_path / "m"
    for k, calls in enumerate([11, 12]):
        d = _run(root, k, "sgr", k, [1, 0])
        m = json.loads((d / "metrics.json").read_text())
        m.update({"llm/calls": calls})
        (d / "metrics.json").write_text(json.dumps(m))
    md, _ = build_report(root, ci=None)
    cost = md.split("## Cost per row")[1].split("\n## ")[0]
    sgr = next(ln for ln in cost.splitlines() if ln.startswith("| sgr"))
    assert "11.5" in sgr and "11.500" not in sgr, cost
