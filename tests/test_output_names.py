"""Issue 44 (4): output names are checked before anything is written: ``report --name``, sweep
values and ``hydra.sweep.subdir`` pass the same path-component check as ``kg.name`` (byte length
included), and a refused sweep leaves nothing behind (not even a typed API key)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from test_tables import _run

from kgreason.paths import safe_component, safe_relative

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("bad", ["é" * 128, "日" * 70, "x\udcffy", "a\x85b"])
def test_the_name_check_counts_bytes_and_refuses_what_the_file_system_cannot_hold(bad):
    with pytest.raises(ValueError, match=r"kg\.name="):
        safe_component(bad, "kg.name")


def test_a_kg_name_too_long_in_bytes_is_refused_by_preflight_naming_the_setting():
    from kgreason.preflight import check_settings

    problems = check_settings({"kg": {"name": "é" * 128}})
    assert any(p.startswith("kg.name=") and "bytes long in UTF-8" in p for p in problems), problems


@pytest.mark.parametrize("good", ["é" * 100, "MetaQA 3-hop", "kg@v1.2"])
def test_ordinary_and_non_ascii_names_pass(good):
    assert safe_component(good, "kg.name") == good


@pytest.mark.parametrize("bad", ["../x", "a/../../b", "/abs", "~/x", "a/./b", "a/.hidden", "", "x" * 256,
                                 "0_k=" + "é" * 126])
def test_a_sweep_subdir_must_be_relative_safe_parts(bad):
    with pytest.raises(ValueError, match="hydra.sweep.subdir"):
        safe_relative(bad, "hydra.sweep.subdir")


@pytest.mark.parametrize("good", ["0_seed=1", "0_dataset.path=${paths.data}/x.jsonl",
                                  "3_llm.base_url=http://127.0.0.1:8000/v1,seed=2",
                                  "0_llm.base_url=http\\://127.0.0.1\\:8000/v1"])
def test_ordinary_sweep_subdirs_pass(good):
    assert safe_relative(good, "hydra.sweep.subdir") == good


@pytest.mark.parametrize("name", ["../escaped", "/tmp/kgreason-abs-escape", "a/b", "é" * 128])
def test_report_name_is_checked_before_anything_is_written(tmp_path, name):
    from kgreason.report import main

    root = tmp_path / "m"
    _run(root, 0, "io", 0, [1, 0])
    out = tmp_path / "out" / "deeper"
    before = sorted(p for p in tmp_path.rglob("*"))
    assert main([str(root), "--out", str(out), "--name", name, "--ci", "none"]) == 2
    assert sorted(p for p in tmp_path.rglob("*")) == before
    assert not Path("/tmp/kgreason-abs-escape.md").exists()


def _sweep(tmp_path, *overrides):
    return subprocess.run([sys.executable, "-m", "kgreason", "--multirun", "dataset.limit=1", "tracking=none",
                           f"hydra.sweep.dir={tmp_path / 'a' / 'sweep'}", *overrides],
                          cwd=REPO, capture_output=True, text=True, timeout=300)


#: Hydra's own job folder name, made of the override values (kgreason's default was this until
#: issue 71 made it the job number; a user may still choose it): the guard checks what it makes
OVERRIDE_NAMED = "hydra.sweep.subdir=${hydra.job.num}_${hydra.job.override_dirname}"


@pytest.mark.parametrize("overrides", [
    ["+tag=ok,../../escaped", "+llm.api_key=sk-SECRET-4242424242", OVERRIDE_NAMED],
    ["+tag=a,b", "+llm.api_key=sk-SECRET-4242424242", OVERRIDE_NAMED],  # the key would be in each folder name
    ["hydra.sweep.subdir=../.."],
    ["hydra.sweep.subdir=/tmp/kgreason-sweep-escape"],
    ["+tag='" + "é" * 130 + "'", OVERRIDE_NAMED],
])
def test_a_sweep_with_an_unsafe_job_folder_writes_nothing(tmp_path, overrides):
    r = _sweep(tmp_path, *overrides)
    assert r.returncode == 2, r.stderr[-2000:]
    err = r.stderr.strip()
    assert err.startswith("kgreason: error: hydra.sweep.subdir") and "nothing was written" in err
    assert "sk-SECRET-4242424242" not in r.stderr + r.stdout
    assert list(tmp_path.iterdir()) == []  # not the sweep dir, not a job dir, nothing outside either
    assert not Path("/tmp/kgreason-sweep-escape").exists()


def test_the_sweep_guard_reads_a_presets_own_sweeper_params(tmp_path):
    """Presets sweep through ``hydra.sweeper.params`` (experiment=kgqa_baselines): those values
    are checked like command-line ones."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import open_dict, read_write

    from kgreason.runner.sweepguard import SweepRefused, check_sweep

    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(REPO / "conf")):
        cfg = compose(config_name="config", return_hydra_config=True,
                      overrides=["experiment=kgqa_baselines", f"hydra.sweep.dir={tmp_path / 's'}"])
    assert check_sweep(cfg) == 5
    with read_write(cfg), open_dict(cfg):
        cfg.hydra.sweeper.params["+tag"] = "a,../../x"
        cfg.hydra.sweep.subdir = "${hydra.job.num}_${hydra.job.override_dirname}"  # folders named by the values
    with pytest.raises(SweepRefused, match=r"its part '\.\.' .*job 1's folder"):
        check_sweep(cfg)
    assert list(tmp_path.iterdir()) == []


def test_the_default_job_folder_holds_no_override_value(tmp_path):
    """Issue 71: a job's folder is its number, so a value with ``../``, a typed key or a long value
    never reaches a folder name; the sweep runs, each job one level below the sweep dir."""
    r = _sweep(tmp_path, "+tag=ok,../../escaped", "reports.hop_distribution=false")
    assert r.returncode == 0, r.stderr[-2000:]
    sweep = tmp_path / "a" / "sweep"
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["0", "1"]
    assert not (tmp_path / "escaped").exists()
