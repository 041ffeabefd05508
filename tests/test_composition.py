"""Composition you can trust (issue 41 item 2, item 7): every preset × ablation pair, each of
the preset's sweep jobs included, either runs with the ablation's values in force or is refused
before the first example with one line naming the key (kgreason/runner/compose.py); a sweep that
cannot start stops before creating anything, with one or two lines and exit status 2.

The pairs come from conf/ (every file of conf/experiment × conf/ablation), not from a list.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys

import pytest
import yaml
from omegaconf import OmegaConf

from conftest import REPO

from kgreason.runner.compose import ablation_problems, ablation_settings, sweep_jobs

CONF = REPO / "conf"
PRESETS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
ABLATIONS = sorted(p.stem for p in (CONF / "ablation").glob("*.yaml"))
#: config groups an ablation sets a value in (all reasoner today)
GROUPS = {"reasoner", *(k.split(".")[0] for a in ABLATIONS for k in ablation_settings(a))}


class _Composer:
    """Hydra's compose API on the real conf/, one initialisation for the whole module; composing
    is slow (a tenth of a second or more), so each distinct override list is composed once."""

    def __init__(self) -> None:
        from hydra import initialize_config_dir
        from hydra.core.global_hydra import GlobalHydra

        import kgreason  # noqa: F401 - registers the path resolver conf/paths uses

        GlobalHydra.instance().clear()
        self._ctx = initialize_config_dir(version_base="1.3", config_dir=str(CONF))
        self._ctx.__enter__()
        self.loader = GlobalHydra.instance().config_loader()
        self._memo: dict[tuple, object] = {}

    def __call__(self, overrides):
        from hydra import compose

        key = tuple(overrides)
        if key not in self._memo:
            self._memo[key] = compose(config_name="config", overrides=list(overrides), return_hydra_config=True)
        return self._memo[key]

    def jobs(self, task, preset=None):
        """The override lists of the jobs ``kgreason <task>`` launches (one: a single run); with
        ``preset``, the sweep is read from the preset alone (an ablation sets no hydra.* key)."""
        cfg = self([f"experiment={preset}", "ablation=none"] if preset else task)
        if str(cfg.hydra.mode) != "RunMode.MULTIRUN":
            return [list(task)]
        return sweep_jobs(_planned(cfg, task), self.loader)

    def job(self, overrides):
        """A job's composed config, the cheap way: Hydra composes the job's group overrides that
        can touch what the ablation sets (reasoner, and any group an ablation names) with
        ``ablation=none``; then the ablation's file is merged and the job's dotted overrides set,
        which is what Hydra does with an ablation placed after ``experiment`` in the defaults list
        (test_the_shortcut_is_what_hydra_composes checks it against Hydra for every pair)."""
        groups = GROUPS
        chosen = "none"
        base = []
        for o in overrides:
            k = _key(o)
            if k == "ablation":
                chosen = o.split("=", 1)[1]
            elif "." not in k and (k in groups or k == "experiment"):
                base.append(o)
        full = self(base + ["ablation=none"])
        keep = {g for g in (*groups, "paths", "seed") if g in full}
        cfg = OmegaConf.create({g: OmegaConf.to_container(full[g], resolve=False) if OmegaConf.is_config(full[g])
                                else full[g] for g in keep})
        cfg.hydra = {"runtime": {"choices": {**OmegaConf.to_container(full.hydra.runtime.choices), "ablation": chosen}}}
        cfg = OmegaConf.merge(cfg, OmegaConf.create(_ablation_file(chosen)))
        for o in overrides:
            k = _key(o)
            if "." in k and not k.startswith("hydra."):
                OmegaConf.update(cfg, k, yaml.safe_load(o.split("=", 1)[1]), force_add=True)
        return cfg

    def close(self) -> None:
        from hydra.core.global_hydra import GlobalHydra

        self._ctx.__exit__(None, None, None)
        GlobalHydra.instance().clear()


def _ablation_file(name):
    return yaml.safe_load((CONF / "ablation" / f"{name}.yaml").read_text()) or {}


def _planned(cfg, task):
    """What sweep_jobs reads of a composed multirun config: its sweep axes, and ``task`` as the command line."""
    params = OmegaConf.to_container(cfg.hydra.sweeper.params or {}, resolve=False)
    return OmegaConf.create({"hydra": {"sweeper": {"params": params}, "overrides": {"task": list(task)}}})


@pytest.fixture(scope="module")
def composer():
    c = _Composer()
    yield c
    c.close()


def _key(o: str) -> str:
    return o.lstrip("+~").split("=", 1)[0]


def _values(cfg, keys):
    out = {}
    for key in keys:
        got = OmegaConf.select(cfg, key)
        out[key] = OmegaConf.to_container(got, resolve=True) if OmegaConf.is_config(got) else got
    return out


def test_ablations_declare_settings_only():
    """An ablation is a bundle of settings (its file's leaves); none touches hydra.* (sweep axes
    are the presets'), so a preset's jobs are the same whatever ablation is added."""
    for a in ABLATIONS:
        keys = ablation_settings(a)
        assert all(not k.startswith("hydra") for k in keys), a
        assert a == "none" or keys, f"ablation={a} sets nothing"


def test_the_ablation_comes_after_the_presets():
    """conf/config.yaml: ``ablation`` is after ``experiment`` in the defaults list (only the
    git-ignored ``local`` machine settings come later), so no preset value beats an ablation."""
    names = [next(iter(d)) if isinstance(d, dict) else d for d in yaml.safe_load((CONF / "config.yaml").read_text())["defaults"]]
    assert names.index("ablation") > names.index("experiment")
    assert names[names.index("ablation") + 1:] == ["optional local"]


def _pairs(composer):
    """(preset, ablation, job overrides) for every pair from conf/ and every job of its sweep;
    jobs that differ only in settings the ablation does not touch (dataset, seed, hops...) once."""
    for preset in PRESETS:
        for ablation in ABLATIONS:
            task = [f"experiment={preset}", f"ablation={ablation}"]
            declared = set(ablation_settings(ablation))
            shapes = {}
            for job in composer.jobs(task, preset):
                shape = tuple(o for o in job if _key(o) in {"experiment", "reasoner", "ablation", *declared})
                shapes.setdefault(shape, job)
            yield from ((preset, ablation, list(shape)) for shape in shapes)


def test_every_preset_ablation_pair_runs_the_ablation_or_is_refused(composer):
    """All pairs from conf/, each sweep job of the preset: the job holds every value its ablation
    declares, or the check refuses it with one line naming such a key."""
    checked = refused = 0
    for preset, ablation, job in _pairs(composer):
        cfg = composer.job(job)
        chosen = cfg.hydra.runtime.choices.ablation
        problems = ablation_problems(cfg, chosen, cfg.hydra.runtime.choices.reasoner, job)
        where = f"experiment={preset} ablation={ablation} job {job}"
        declared = ablation_settings(chosen)
        if problems:
            refused += 1
            for p in problems:
                assert "\n" not in p and any(k in p for k in declared), f"{where}: {p}"
            continue
        checked += 1
        assert _values(cfg, declared) == declared, where
    assert checked > 12 and refused > 12


def _leaves(d, prefix=""):
    for k, v in (d or {}).items():
        if isinstance(v, dict):
            yield from _leaves(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}"


def _shortcut_classes(composer):
    """One (preset, ablation, job) of each way the shortcut could differ from Hydra: the job's
    reasoner config the ablation is merged into, the ablation, the ablation keys the preset's own
    file also sets (which one wins), and the job's overrides of those keys; plus every preset's
    every job shape with ``ablation=none``. Every pair composed by Hydra took 85 s of CI's budget;
    pairs in one class take the same path through both compositions."""
    seen = set()
    for preset, ablation, job in _pairs(composer):
        declared = set(ablation_settings(ablation))
        own = yaml.safe_load((CONF / "experiment" / f"{preset}.yaml").read_text()) or {}
        preset_keys = {k for k in _leaves({k: v for k, v in own.items() if k not in ("defaults", "hydra")})}
        reasoner = next((o.split("=", 1)[1] for o in job if _key(o) == "reasoner"),
                        composer([f"experiment={preset}", "ablation=none"]).hydra.runtime.choices.reasoner)
        cls = (reasoner, ablation, frozenset(declared & preset_keys), tuple(o for o in job if _key(o) in declared))
        if ablation == "none" or cls not in seen:
            seen.add(cls)
            yield preset, ablation, job


@pytest.mark.slow
def test_the_shortcut_is_what_hydra_composes(composer):
    """The cheap job composition of the pair test equals Hydra's own, for one pair and job shape of
    each class (``_shortcut_classes``)."""
    for preset, ablation, job in _shortcut_classes(composer):
        full = composer(job if any(_key(o) == "ablation" for o in job) else job + [f"ablation={ablation}"])
        cheap = composer.job(job + ([] if any(_key(o) == "ablation" for o in job) else [f"ablation={ablation}"]))
        for group in GROUPS:  # the groups the pair test reads
            assert OmegaConf.to_container(full[group]) == OmegaConf.to_container(cheap[group]), (job, group)


def test_preset_value_never_beats_the_ablation(composer):
    """`experiment=subqrag_table2 ablation=subqrag_topk`: the preset sets top_k 5, the ablation 10;
    the ablation comes after the preset in the defaults list, so 10 is in force (it used to be 5)."""
    task = ["experiment=subqrag_table2", "ablation=subqrag_topk"]
    cfg = composer(task)
    assert cfg.reasoner.top_k == 10
    jobs = composer.jobs(task)
    assert jobs == [["ablation=subqrag_topk", "experiment=subqrag_table2"]]  # the command line's ablation replaces the axis
    assert ablation_problems(cfg, "subqrag_topk", "subqrag", jobs[0]) == []


def test_a_sweep_axis_that_cancels_the_ablation_is_named(composer):
    """`experiment=logoskg_dx_hops` sweeps reasoner.rounds 1,2: with a "Round 1 only" ablation, the
    rounds=2 jobs would not be that ablation; the check names reasoner.rounds for exactly those."""
    for ablation in ("dx_round1_only", "dx_tau_0_8", "dx_topn_20"):
        task = ["experiment=logoskg_dx_hops", f"ablation={ablation}"]
        jobs = composer.jobs(task)
        assert len(jobs) == 10
        for job in jobs:
            problems = ablation_problems(composer.job(job), ablation, "logoskg_dx", job)
            if "reasoner.rounds=2" in job:
                assert len(problems) == 1 and "reasoner.rounds" in problems[0], problems
            else:
                assert problems == []
        # what the README offers instead: the rounds axis fixed to the ablation's value
        jobs = composer.jobs(task + ["reasoner.rounds=1"])
        assert len(jobs) == 5 and all(ablation_problems(composer.job(j), ablation, "logoskg_dx", j) == [] for j in jobs)
    # Hydra's own composition of one refused job: the sweep value wins over the ablation's
    job = ["reasoner.hops=1", "reasoner.rounds=2", "experiment=logoskg_dx_hops", "ablation=dx_round1_only"]
    assert composer(job).reasoner.rounds == 2


def test_an_ablation_of_another_method_is_refused(composer):
    cfg = composer(["reasoner=io", "ablation=tog_bm25"])
    (p,) = ablation_problems(cfg, "tog_bm25", "io", [])
    assert "reasoner.prune" in p and "reasoner=io" in p


def test_a_command_line_override_of_an_ablation_key_is_refused(composer):
    cfg = composer(["reasoner=subqrag", "ablation=subqrag_topk", "reasoner.top_k=3"])
    (p,) = ablation_problems(cfg, "subqrag_topk", "subqrag", ["reasoner.top_k=3"])
    assert "reasoner.top_k" in p and "reasoner.top_k=3" in p
    cfg = composer(["reasoner=subqrag", "ablation=subqrag_topk", "reasoner.top_k=10"])  # agrees: runs
    assert ablation_problems(cfg, "subqrag_topk", "subqrag", ["reasoner.top_k=10"]) == []


# --------------------------------------------------------------- preset READMEs list rows that run

_CMD = re.compile(r"python -m kgreason ((?:experiment=\S+)(?: [^\s#`]+)*)")


def _readme_commands():
    out = []
    for readme in sorted((REPO / "experiments").glob("*/README.md")):
        text = readme.read_text(encoding="utf-8").replace("\\\n", " ")
        for m in _CMD.finditer(text):
            args = [a.strip("'\"") for a in m.group(1).split() if "=" in a and not a.startswith(("<", "$"))]
            out.append((readme.parent.name, args))
    return out


def test_preset_readme_commands_run_their_ablations(composer):
    """Every `python -m kgreason experiment=...` line of experiments/*/README.md, each sweep job:
    its ablation is in force (no line offers a row the composition check refuses)."""
    commands = _readme_commands()
    assert len(commands) > 15
    for where, args in commands:
        args = [a for a in args if not a.startswith(("hydra.mode", "kg.path", "judge", "llm", "tracking"))]
        for job in composer.jobs(args):
            cfg = composer.job(job)
            ch = cfg.hydra.runtime.choices
            assert ablation_problems(cfg, ch.ablation, ch.reasoner, job) == [], (where, job)


# ------------------------------------------------------------------ a sweep that cannot start


def _kgreason(args, tmp_path, **env):
    e = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "HYDRA_FULL_ERROR")}
    e.update(env)
    return subprocess.run([sys.executable, "-m", "kgreason", *args], cwd=REPO, env=e, capture_output=True,
                          text=True, timeout=600)


def _problem_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip() and not line.startswith("[")]


def test_sweep_without_data_stops_before_any_job(tmp_path):
    """`kgreason experiment=sgr_table1` on a clone without its data (and without an API key): one or
    two lines, exit 2, and no sweep dir at all (it used to be a 29-line traceback, exit 1, and 9
    empty job dirs)."""
    sweep = tmp_path / "sweep"
    r = _kgreason(["experiment=sgr_table1", f"hydra.sweep.dir={sweep}"], tmp_path,
                  KGREASON_DATA=str(tmp_path / "nonexistent"))
    lines = _problem_lines(r.stderr)
    assert r.returncode == 2, r.stderr
    assert 1 <= len(lines) <= 2 and lines[0].startswith("kgreason: error: the sweep cannot start"), r.stderr
    assert "Traceback" not in r.stderr and "paths.data" in r.stderr
    assert not sweep.exists()


def test_sweep_refused_for_an_ablation_a_sweep_axis_cancels(tmp_path, shared_data):  # its preset reads DDXPlus
    sweep = tmp_path / "sweep"
    r = _kgreason(["experiment=logoskg_dx_hops_ddxplus_kg", "ablation=dx_round1_only", f"hydra.sweep.dir={sweep}"],
                  tmp_path, OPENAI_API_KEY="x")
    lines = _problem_lines(r.stderr)
    assert r.returncode == 2 and 1 <= len(lines) <= 2, r.stderr
    assert "reasoner.rounds" in lines[0] and "sweep axis" in lines[0], lines
    assert not sweep.exists()


@pytest.mark.slow
def test_a_job_that_fails_at_startup_is_marked_and_the_sweep_exits_2(tmp_path, shared_data):  # needs the shared samples
    """A start-up check that needs the built components (here the link rate of CWQ on the embedded
    KG) fails in the job: the job dir gets failed.json (INTERFACE: status, reason, stage), the
    sweep's other jobs still run, and the sweep ends with exit status 2 naming it."""
    sweep = tmp_path / "sweep"
    r = _kgreason(["--multirun", "reasoner=retrieval_only", "dataset=cwq,embedded", "dataset.limit=3", "tracking=none",
                   f"hydra.sweep.dir={sweep}"], tmp_path)
    assert r.returncode == 2, r.stderr
    (marker,) = sweep.rglob("failed.json")
    data = json.loads(marker.read_text())
    assert data["status"] == "failed" and data["stage"] == "startup" and "min_link_rate" in data["reason"]
    assert "dataset=cwq" in (marker.parent / ".hydra" / "overrides.yaml").read_text()  # job dirs: <sweep>/<num>
    done = [p for p in sweep.glob("*/metrics.json")]
    assert len(done) == 1 and "dataset=embedded" in (done[0].parent / ".hydra" / "overrides.yaml").read_text()
    assert "Traceback" not in r.stderr and "1 job(s) of the sweep failed" in r.stderr


def test_jobs_in_launch_order():
    """sweep_jobs expands like Hydra's basic sweeper (axes in order, the command line last)."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        loader = GlobalHydra.instance().config_loader()
        plan = OmegaConf.create({"hydra": {"sweeper": {"params": {"a": "1,2", "b": "x,y"}},
                                           "overrides": {"task": ["b=z", "c=0,1"]}}})
        jobs = sweep_jobs(plan, loader)
    GlobalHydra.instance().clear()
    assert jobs == [[*p] for p in itertools.product(["a=1", "a=2"], ["b=z"], ["c=0", "c=1"])]
