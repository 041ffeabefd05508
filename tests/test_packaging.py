"""The front door: the ``kgreason`` command, an installed (non-editable) package that runs from
an empty directory, the ``paths`` group, and errors that say where a missing file was looked for."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import REPO, compose_cfg
from kgreason import cli, paths


# ----------------------------------------------------------------------------- the command
def test_help_lists_user_groups_and_tools_not_internal_ones(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    group_lines = [ln.split()[0] for ln in out.split("config groups")[1].splitlines()[1:] if ln.startswith("  ")]
    assert {"dataset", "kg", "retriever", "reasoner", "llm", "experiment"} <= set(group_lines)
    assert not {"bench", "pairing", "hydra", "paths"} & set(group_lines), group_lines
    for tool in ("tables", "score", "bench", "index", "serve", "sync"):
        assert f"  {tool} " in out


@pytest.mark.parametrize("tool", sorted(cli.TOOLS))
def test_every_tool_help_shows_an_example(tool, capsys):
    try:
        rc = cli.main([tool, "--help"])
    except SystemExit as e:  # argparse's --help exits 0
        rc = e.code
    out = capsys.readouterr().out
    assert rc in (0, None)
    assert "example:\n  kgreason " + tool in out, out[:400]


def test_a_bare_word_that_is_no_tool_is_refused(capsys):
    assert cli.main(["tabels"]) == 2
    assert "neither a tool" in capsys.readouterr().err


def test_sync_finds_every_offline_run_of_a_sweep(tmp_path, capsys):
    runs = [tmp_path / f"{i}_seed={i}" / "wandb" / f"offline-run-2026010{i}_120000-abc{i}" for i in range(3)]
    for r in runs:
        r.mkdir(parents=True)
    (tmp_path / "0_seed=0" / "wandb" / "latest-run").mkdir()  # not an offline run
    for r in runs[:2]:
        (r.parent.parent / "run.json").write_text("{}")  # the third job stopped before its first example
    assert cli.offline_runs(tmp_path) == sorted(runs)
    assert cli.offline_runs(tmp_path, started_only=True) == sorted(runs[:2])
    assert cli.main(["sync", str(tmp_path), "--dry-run"]) == 0
    cap = capsys.readouterr()
    assert "2 offline run(s)" in cap.out and all(str(r) in cap.out for r in runs[:2]) and str(runs[2]) not in cap.out
    assert "skipped 1 offline run(s)" in cap.err
    assert cli.main(["sync", str(tmp_path / "0_seed=0" / "nothing")]) == 2


# ----------------------------------------------------------------------------- paths
def test_paths_resolve_against_the_repo_not_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.delenv("KGREASON_DATA", raising=False)
    monkeypatch.chdir(tmp_path)
    cfg = compose_cfg(["dataset=metaqa"], tmp_path)
    shared = REPO.parent / "shared" / "data"
    data = shared if shared.is_dir() else REPO / "data"  # a clone without ../shared: its own data/
    assert cfg.paths.data == str(data)
    assert cfg.dataset.path.startswith(str(data) + "/metaqa/")
    monkeypatch.setenv("KGREASON_DATA", str(tmp_path / "d"))
    cfg = compose_cfg(["dataset=metaqa", "kg=metaqa"], tmp_path)
    assert cfg.dataset.path.startswith(str(tmp_path / "d") + "/metaqa/")
    assert cfg.kg.path == str(tmp_path / "d" / "metaqa" / "kb.txt")


def test_no_yaml_repeats_the_data_fallback():
    hits = [str(p.relative_to(REPO)) for p in (REPO / "conf").rglob("*.yaml")
            if "oc.env:KGREASON_DATA" in p.read_text() or "oc.env:KGREASON_CACHE_DIR" in p.read_text()]
    assert hits == [], f"use ${{paths.data}} instead of a literal fallback in {hits}"


def test_installed_layout_defaults(monkeypatch, tmp_path):
    """Without a clone around it the package uses its shipped configs and XDG defaults."""
    monkeypatch.setattr(paths, "repo_root", lambda: None)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "share"))
    monkeypatch.delenv("KGREASON_DATA", raising=False)
    assert paths.resolve("data") == str(tmp_path / "share" / "kgreason" / "data")
    monkeypatch.setenv("KGREASON_DATA", "/data")
    assert paths.resolve("data") == "/data"


def test_missing_data_file_names_the_setting_and_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("KGREASON_DATA", str(tmp_path / "nowhere"))
    env = {**os.environ, "KGREASON_PROGRESS": "off"}
    r = subprocess.run([sys.executable, "-m", "kgreason", "dataset=metaqa", "tracking=none",
                        f"hydra.run.dir={tmp_path / 'run'}"], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode != 0
    err = r.stderr
    assert "file not found" in err
    assert "(setting `dataset.path`)" in err and "paths.data" in err and "KGREASON_DATA" in err, err[-1500:]


# ----------------------------------------------------------------------------- Hub
def test_hub_offline_unless_source_hub(monkeypatch):
    from omegaconf import OmegaConf

    import kgreason.app as app

    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(app, "_USER_HUB_ENV", set())
    app.set_hub_mode(OmegaConf.create({"dataset": {"source": "hub"}}))
    assert os.environ["HF_HUB_OFFLINE"] == "0" and os.environ["TRANSFORMERS_OFFLINE"] == "0"
    app.set_hub_mode(OmegaConf.create({"dataset": {"_target_": "x"}}))  # next sweep job: offline again
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    monkeypatch.setattr(app, "_USER_HUB_ENV", {"HF_HUB_OFFLINE"})  # the user's explicit choice wins
    app.set_hub_mode(OmegaConf.create({"dataset": {"source": "hub"}}))
    assert os.environ["HF_HUB_OFFLINE"] == "1" and os.environ["TRANSFORMERS_OFFLINE"] == "0"


def test_importing_the_app_leaves_the_hub_setting_alone():
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    r = subprocess.run([sys.executable, "-c", "import os, kgreason.app, kgreason.cli; "
                        "print(os.environ.get('HF_HUB_OFFLINE'), os.environ.get('TRANSFORMERS_OFFLINE'))"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == "None None", r.stdout + r.stderr[-500:]


# ----------------------------------------------------------------------------- the wheel
def _project_files(dst: Path) -> None:
    """Copy what a fresh clone would hold (tracked + untracked-but-not-ignored files)."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split("\0")
    for f in filter(None, files):
        src = REPO / f
        if src.is_file():
            (dst / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / f)


@pytest.mark.slow
def test_wheel_installs_and_runs_from_an_empty_directory(tmp_path):
    """Build the wheel, install it (not editable) into a fresh venv, run from an empty directory.

    To avoid downloading torch & co. again, the fresh venv (``--without-pip``) reaches the project
    venv's third-party packages through a ``.pth`` line that appends that venv's site-packages to
    ``sys.path`` (a ``.pth`` line only adds a path: the project's own editable-install hook there
    is not run). kgreason itself comes only from the wheel, which pip installs with ``--no-deps``
    into the fresh venv's own site-packages (searched first); the test checks that.
    """
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs a git checkout to know which files a clone holds")
    src, dist, venv, empty = (tmp_path / n for n in ("src", "dist", "venv", "empty"))
    for d in (src, dist, empty):
        d.mkdir()
    _project_files(src)
    pip = [sys.executable, "-m", "pip"]
    r = subprocess.run([*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist), str(src)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    wheel = next(dist.glob("kgreason-*.whl"))
    import zipfile

    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {n for n in names if n.startswith("kgreason/conf/")}
    expected = {"kgreason/conf/" + str(p.relative_to(REPO / "conf")) for p in (REPO / "conf").rglob("*.yaml")
                if "local" not in p.relative_to(REPO / "conf").parts}
    assert shipped == expected, sorted(expected ^ shipped)[:10]
    assert not any(n.startswith("conf/") for n in names)

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    vpy = venv / "bin" / "python"
    purelib = subprocess.run([str(vpy), "-c", "import sysconfig;print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    Path(purelib, "zz_project_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    r = subprocess.run([*pip, "--python", str(vpy), "install", "-q", "--no-deps", str(wheel)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KGREASON_DATA")}
    env.update(KGREASON_PROGRESS="log", HOME=str(tmp_path / "home"))
    kg_cmd = str(venv / "bin" / "kgreason")
    where = subprocess.run([str(vpy), "-c", "import kgreason, kgreason.paths as p; print(kgreason.__file__); "
                            "print(p.config_dir()); print(p.repo_root())"],
                           cwd=empty, env=env, capture_output=True, text=True, check=True).stdout.split("\n")
    assert where[0].startswith(purelib), where  # the wheel's copy, not the clone
    assert where[1] == str(Path(purelib) / "kgreason" / "conf") and where[2] == "None", where

    r = subprocess.run([kg_cmd, "--help"], cwd=empty, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "tools:" in r.stdout and "experiment" in r.stdout, r.stderr[-2000:]

    r = subprocess.run([kg_cmd, "dataset.limit=4", "tracking=none"], cwd=empty, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "\nHits@1 " in r.stdout and "run dir: " in r.stdout  # the end-of-run results table
    run_dirs = list((empty / "outputs" / "runs").glob("*/*"))
    assert len(run_dirs) == 1 and (run_dirs[0] / "metrics.json").is_file() and (run_dirs[0] / "run.log").is_file()

    # every experiment preset composes (and resolves) from the packaged configs
    script = (
        "import kgreason, kgreason.paths as p\n"
        "from hydra import compose, initialize_config_dir\n"
        "from omegaconf import OmegaConf\n"
        "names = sorted(x.stem for x in (p.config_dir() / 'experiment').glob('*.yaml'))\n"
        "with initialize_config_dir(version_base='1.3', config_dir=str(p.config_dir())):\n"
        "    for n in names:\n"
        "        c = compose(config_name='config', overrides=[f'experiment={n}'])\n"
        "        OmegaConf.to_container(c, resolve=True)\n"
        "print(len(names), 'presets')\n"
    )
    r = subprocess.run([str(vpy), "-c", script], cwd=empty, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == f"{len(list((REPO / 'conf' / 'experiment').glob('*.yaml')))} presets"
    assert sorted(p.name for p in empty.iterdir()) == ["outputs"]  # nothing else written to the cwd


# ----------------------------------------------------------------------------- small things
def test_hops_figure_has_integer_ticks_and_the_given_title():
    from kgreason.tables import hops_figure

    fig = hops_figure({"1": 3, "2": 1, "3": 0, "unreachable": 2}, "hop distribution: embedded-kgqa on KG embedded")
    ax = fig.axes[0]
    fig.canvas.draw()
    ticks = [t for t in ax.get_yticks() if ax.get_ylim()[0] <= t <= ax.get_ylim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks
    assert ax.get_title() == "hop distribution: embedded-kgqa on KG embedded"


def test_run_log_is_named_run_log():
    from omegaconf import OmegaConf

    hydra_cfg = OmegaConf.load(REPO / "conf" / "hydra" / "default.yaml")
    assert hydra_cfg.job.name == "run"  # Hydra names the log <job.name>.log
