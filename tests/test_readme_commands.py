"""The README is a tested document (issue 33): every fenced ```bash block of README.md and
docs/*.md is run as pasted, and a command that fails fails its block's test with file:line.

How a command line is treated (a line ending in ``\\`` joins the next; ``#`` outside quotes starts
a comment; comment-only lines are text):

* **Markers** (a trailing comment that *starts* with one): ``# needs: key``, ``# needs: network``,
  ``# needs: gpu``, ``# needs: qwen``, ``# needs: server``, ``# needs: slurm``, ``# needs: file`` (a
  file the user must bring, e.g. a licensed release) (several:
  ``# needs: gpu, network``) or ``# long``, optionally followed by ``;`` or ``(`` and free text.
  A marked line is not run; a marked ``kgreason`` run (the Hydra app) is still *composed*
  (``--cfg job --resolve``), which needs none of those and catches a renamed flag or config group.
* **Shell state**: ``cd DIR`` and ``export VAR=...`` lines (also chained with ``&&``) apply to the
  later lines of their block; ``export KGREASON_DATA=...`` is replaced by the test's data dir
  (``$KGREASON_DATA`` or ``../shared/data``, as in the other tests); ``source .venv/bin/activate``
  is a no-op here: the test puts ``kgreason`` and ``python`` (this interpreter, this checkout's
  package) first on ``PATH``.
* **Not run, automatically**: set-up and infrastructure (``make``, ``pip``, ``apt-get``, ``srun``,
  ``sbatch``, ``vllm``, ``papermill``) and the test suite itself (``pytest``, ``python -m pytest``).
* **The Hydra app** (``kgreason [overrides]``, ``python -m kgreason [overrides]``): first composed
  with ``--cfg job --resolve`` (a ``--multirun`` sweep: once per swept value, the sweeps zipped);
  then run with ``tracking=none dataset.limit=2 hydra.run.dir=<tmp>`` (``hydra.sweep.dir`` for a
  sweep) appended, and its ``metrics.json`` checked, unless it is *compose-only*: a paper preset
  (``experiment=``), a SLURM launcher, a reasoner or judge that calls an LLM other than
  ``llm=scripted`` (an API key, an endpoint, model weights, or the bundled SmolLM2's minutes), or
  a dataset / KG file under ``paths.data`` that is absent.
* **Tools** (every tool of ``kgreason/cli.py``): ``tables``, ``report``, ``score``, ``data`` run as
  written; ``serve`` is not started (a server that keeps running: its own tests run it); the retrieval bench gets
  ``queries=3 'hops=[1,2]'``; ``index`` gets ``llm=scripted`` (last group choice wins) over a
  one-passage ``corpus.jsonl``; ``sync`` gets ``--dry-run`` (an upload needs the network);
  ``bundle replay`` re-runs a run from its dataset, so it runs only where the shared data is found.
  Placeholders name the fixtures made once per session (a 4-job sweep of
  ``experiment=kgqa_baselines`` on the embedded world with a scripted LLM and offline W&B):
  ``outputs/multirun/<date>/<time>``, ``outputs/multirun/2026-…`` and ``SWEEP`` are that sweep;
  ``outputs/runs/<...>/predictions.jsonl``, ``PRED.jsonl`` and ``my_preds.jsonl`` a job's
  predictions; ``<repo>`` the working directory (a temp dir holding a copy of ``experiments/``).
* Any other command fails :func:`test_every_command_has_a_rule` until a rule or a marker covers it.

Commands run in a temp working directory, so nothing is written into the checkout.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from kgreason.cli import TOOLS as CLI_TOOLS

REPO = Path(__file__).resolve().parents[1]
DOC_FILES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

NEEDS = {"key", "network", "gpu", "qwen", "server", "slurm", "file"}
SETUP = {"make", "pip", "pip3", "apt-get", "apt", "srun", "sbatch", "vllm", "papermill"}
TOOLS = set(CLI_TOOLS)  # every `kgreason TOOL` of kgreason/cli.py
#: tools a test does not start from a doc line: they keep running (a server), with the test that covers them
NOT_STARTED = {"serve": "starts a long-running server; tests/llm/test_serve.py and the server tests run it"}
# python -m kgreason.<module> spellings of the tools
TOOL_MODULES = {"kgreason.tables": "tables", "kgreason.report": "report", "kgreason.score": "score",
                "kgreason.bench": "bench", "kgreason.bench.scale": "bench.scale",
                "kgreason.reasoners.subqrag_index": "index"}
LLM_FREE_TARGETS = ("kgreason.llm.scripted.",)
TIMEOUT = 300

_MARKER = re.compile(r"^\s*(?:needs:\s*(?P<needs>[a-z]+(?:\s*,\s*[a-z]+)*)|(?P<long>long))\s*(?:$|[;(:—-])")
_FENCE = re.compile(r"^(\s*)```(\S*)\s*$")


@dataclass
class Command:
    file: str           # path relative to the repo
    line: int           # first physical line
    text: str           # joined, comments removed
    comment: str = ""   # the trailing comment of the last physical line (markers live there)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    def marker(self) -> tuple[set[str], bool]:
        m = _MARKER.match(self.comment)
        if not m:
            return set(), False
        needs = {w.strip() for w in (m.group("needs") or "").split(",") if w.strip()}
        return needs, bool(m.group("long"))


@dataclass
class Block:
    file: str
    line: int
    commands: list[Command] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def split_comment(line: str) -> tuple[str, str]:
    """``(code, comment)``: ``#`` at the start or after whitespace, outside quotes, starts a comment."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1:].strip()
    return line.rstrip(), ""


def parse_block(file: str, start: int, body: list[str]) -> Block:
    block, pending, first, comment = Block(file, start), [], 0, ""
    for n, raw in enumerate(body, start + 1):
        code, comment_here = split_comment(raw)
        if not pending:
            first = n
        if code.endswith("\\"):
            pending.append(code[:-1].strip())
            continue
        pending.append(code.strip())
        text = " ".join(p for p in pending if p)
        if text:
            block.commands.append(Command(file, first, text, comment_here))
        pending = []
    return block


def extract_blocks(path: Path) -> list[Block]:
    lines, out, i = path.read_text().splitlines(), [], 0
    rel = path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else path.name
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang, start, body = len(m.group(1)), m.group(2), i + 1, []
        i += 1
        while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
            body.append(lines[i][indent:] if lines[i][:indent].isspace() else lines[i].lstrip())
            i += 1
        i += 1
        if lang == "bash":
            out.append(parse_block(rel, start, body))
    return out


BLOCKS = [b for f in DOC_FILES for b in extract_blocks(f)]


# --------------------------------------------------------------------------- classification

def _words(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def _program(words: list[str]) -> tuple[list[str], list[str]]:
    """``(env assignments, the rest)``."""
    i = 0
    while i < len(words) and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[i]):
        i += 1
    return words[:i], words[i:]


def classify(cmd: Command) -> tuple[str, str]:
    """``(kind, detail)``; kind: state, skip, app, tool, script, unknown."""
    text = cmd.text
    parts = [p.strip() for p in text.split("&&")]
    if all(re.match(r"^(cd|export|source|\.)\s", p) for p in parts):
        return "state", ""
    _, words = _program(_words(text))
    if not words:
        return "unknown", "empty"
    prog = words[0]
    if prog in SETUP:
        return "skip", f"set-up ({prog})"
    if prog == "pytest" or words[:3] == ["python", "-m", "pytest"]:
        return "skip", "the test suite itself (CI runs it)"
    if prog == "kgreason":
        rest = words[1:]
    elif prog == "python" and words[1:2] == ["-m"] and len(words) > 2:
        mod = words[2]
        if mod == "kgreason":
            rest = words[3:]
        elif mod in TOOL_MODULES:
            return "tool", TOOL_MODULES[mod]
        else:
            return "unknown", f"python -m {mod}"
    elif prog == "python" and len(words) > 1 and words[1].endswith(".py"):
        return "script", words[1]
    else:
        return "unknown", prog
    if rest and rest[0] in TOOLS:
        return "tool", rest[0]
    return "app", ""


# --------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="session")
def world_dirs(tmp_path_factory):
    """The working dir, the PATH shim, the env, and the fixture sweep the placeholders name."""
    root = tmp_path_factory.mktemp("readme")
    cwd, shim = root / "cwd", root / "bin"
    cwd.mkdir()
    shim.mkdir()
    shutil.copytree(REPO / "experiments", cwd / "experiments")  # a copy: nothing writes into the checkout
    (cwd / "corpus.jsonl").write_text('{"title": "Paris", "text": "Paris is the capital of France."}\n')
    for name, body in {"kgreason": f'exec "{sys.executable}" -m kgreason "$@"',
                       "python": f'exec "{sys.executable}" "$@"'}.items():
        (shim / name).write_text(f"#!/bin/sh\n{body}\n")
        (shim / name).chmod(0o755)
    data = Path(os.environ.get("KGREASON_DATA", REPO.parent / "shared" / "data"))
    env = {**os.environ, "PATH": f"{shim}:{os.environ.get('PATH', '')}", "KGREASON_PROGRESS": "off",
           "PYTHONPATH": str(REPO), "KGREASON_CACHE_DIR": str(root / "cache"),
           "KGREASON_OUTPUT": str(root / "outputs"), "WANDB_MODE": "offline", "WANDB_SILENT": "true",
           "WANDB_DIR": str(root / "wandb"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("HYDRA_FULL_ERROR", None)
    if data.is_dir():
        env["KGREASON_DATA"] = str(data)
    sweep = root / "sweep"
    r = subprocess.run([sys.executable, "-m", "kgreason", "--multirun", "experiment=kgqa_baselines",
                        "dataset=embedded", "kg=embedded", "dataset.limit=4", "llm=scripted", "tracking=wandb",
                        "reasoner=retrieval_only,io", "seed=0,1", f"hydra.sweep.dir={sweep}"],
                       cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, f"fixture sweep failed:\n{r.stderr[-3000:]}"
    preds = sorted(sweep.glob("*/predictions.jsonl"))[0]
    return {"root": root, "cwd": cwd, "env": env, "sweep": sweep, "preds": preds, "n": [0]}


def substitute(text: str, w: dict) -> str:
    text = re.sub(r"outputs/runs/\S*/predictions\.jsonl", str(w["preds"]), text)
    text = re.sub(r"(?<![\w/])(PRED|my_preds)\.jsonl\b", str(w["preds"]), text)
    text = re.sub(r"outputs/multirun/(<date>/<time>|\d{4}-\d\d-\d\d/\d\d-\d\d-\d\d)", str(w["sweep"]), text)
    text = re.sub(r"(?<![\w/])SWEEP(?![\w/])", str(w["sweep"]), text)
    return text.replace("<repo>", str(w["cwd"]))


def state_line(text: str, w: dict) -> str:
    out = []
    for p in (p.strip() for p in text.split("&&")):
        if re.match(r"^(source|\.)\s", p):
            continue  # the venv's activation: the PATH shim stands in for it
        if p.startswith("export KGREASON_DATA="):
            data = w["env"].get("KGREASON_DATA")
            p = f"export KGREASON_DATA={shlex.quote(data)}" if data else "unset KGREASON_DATA"
        out.append(p)
    return " && ".join(out)


def sh(cmd: Command, prelude: list[str], text: str, w: dict) -> subprocess.CompletedProcess:
    script = "set -e\n" + "".join(f"{p}\n" for p in prelude) + text + "\n"
    return subprocess.run(["bash", "-c", script], cwd=w["cwd"], env=w["env"], capture_output=True, text=True,
                          timeout=TIMEOUT)


def _fail(cmd: Command, what: str, text: str, r: subprocess.CompletedProcess) -> str:
    return (f"{cmd.where}: {what} failed (exit {r.returncode})\n  as pasted: {cmd.text}\n  ran: {text}\n"
            f"--- stderr (tail) ---\n{r.stderr[-2500:]}\n--- stdout (tail) ---\n{r.stdout[-800:]}")


# --------------------------------------------------------------------------- the Hydra app

def _is_sweep(override: str) -> bool:
    if "=" not in override or override.startswith("-"):
        return False
    value = override.split("=", 1)[1]
    return "," in value and value[:1] not in "[{'\"" and not value.startswith(("range(", "choice("))


def compose_variants(words: list[str]) -> list[list[str]]:
    """The app's arguments without ``--multirun``, one list per swept value (sweeps zipped)."""
    args = [a for a in words if a not in ("--multirun", "-m")]
    sweeps = {i: a.split("=", 1)[1].split(",") for i, a in enumerate(args) if _is_sweep(a)}
    n = max((len(v) for v in sweeps.values()), default=1)
    out = []
    for k in range(n):
        v = list(args)
        for i, values in sweeps.items():
            v[i] = f"{args[i].split('=', 1)[0]}={values[k % len(values)]}"
        out.append(v)
    return out


def _uses_llm(cfg: dict) -> bool:
    import importlib

    target = str((cfg.get("reasoner") or {}).get("_target_", ""))
    try:
        mod, _, name = target.rpartition(".")
        uses = bool(getattr(getattr(importlib.import_module(mod), name), "uses_llm", True))
    except Exception:  # noqa: BLE001 - an unknown reasoner: assume it calls an LLM
        uses = True
    judge = cfg.get("judge") or {}
    uses = uses or bool(judge.get("_target_"))
    llm_target = str((cfg.get("llm") or {}).get("_target_", ""))
    return uses and not llm_target.startswith(LLM_FREE_TARGETS)


def _missing_data(cfg: dict) -> list[str]:
    root = str((cfg.get("paths") or {}).get("data", "")).rstrip("/")
    found = []

    def walk(x):
        if isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
        elif isinstance(x, str) and root and x.startswith(root + "/") and not Path(x).exists():
            found.append(x)

    walk({"dataset": cfg.get("dataset"), "kg": cfg.get("kg")})
    return found


def run_app(cmd: Command, prelude: list[str], text: str, w: dict, log: list[str]) -> None:
    env_words, words = _program(_words(text))
    prog = words[: words.index("kgreason") + 1]
    args = words[len(prog):]
    if any(a in ("-h", "--help") for a in args):
        r = sh(cmd, prelude, text, w)
        assert r.returncode == 0, _fail(cmd, "help", text, r)
        log.append(f"{cmd.where}: ran")
        return
    needs, long_ = cmd.marker()
    reasons = [f"needs: {', '.join(sorted(needs))}"] if needs else (["long"] if long_ else [])
    if any(a.startswith("experiment=") for a in args):
        reasons.append("a paper preset")
    if any(a.startswith("hydra/launcher=slurm") for a in args):
        reasons.append("a SLURM launcher")
    for variant in compose_variants(args):
        ctext = shlex.join([*env_words, *prog, *variant, "--cfg", "job", "--resolve"])
        r = sh(cmd, prelude, ctext, w)
        assert r.returncode == 0, _fail(cmd, "composing", ctext, r)
        cfg = yaml.safe_load(r.stdout) or {}
        if _uses_llm(cfg):
            reasons.append(f"calls an LLM ({(cfg.get('llm') or {}).get('_target_')})")
        if missing := _missing_data(cfg):
            reasons.append(f"data absent: {missing[0]}")
    if reasons:
        log.append(f"{cmd.where}: composed only ({'; '.join(dict.fromkeys(reasons))})")
        return
    w["n"][0] += 1
    out = w["root"] / f"app{w['n'][0]}"
    multirun = any(a in ("--multirun", "-m") for a in args)
    dir_key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    rtext = f"{text} tracking=none dataset.limit=2 {dir_key}={shlex.quote(str(out))}"
    r = sh(cmd, prelude, rtext, w)
    assert r.returncode == 0, _fail(cmd, "running", rtext, r)
    metrics = list(out.glob("*/metrics.json")) if multirun else [out / "metrics.json"]
    assert metrics and all(m.is_file() for m in metrics), f"{cmd.where}: the run wrote no metrics.json under {out}"
    log.append(f"{cmd.where}: ran ({len(metrics)} run dir(s))")


def run_tool(cmd: Command, tool: str, prelude: list[str], text: str, w: dict, log: list[str]) -> None:
    words = _words(text)
    if tool in NOT_STARTED:
        log.append(f"{cmd.where}: not run ({NOT_STARTED[tool]})")
        return
    if tool == "bench" and not any(a in ("-h", "--help") for a in words) and "scale" not in words:
        text += " queries=3 'hops=[1,2]'"
    elif tool == "index":
        text += " llm=scripted"
    elif tool == "sync" and "--dry-run" not in words:
        text += " --dry-run"
    elif tool == "bundle" and "replay" in words and "KGREASON_DATA" not in w["env"]:
        log.append(f"{cmd.where}: not run (a replay re-reads its dataset; shared data not found)")
        return
    r = sh(cmd, prelude, text, w)
    assert r.returncode == 0, _fail(cmd, f"kgreason {tool}", text, r)
    log.append(f"{cmd.where}: ran ({tool})")


@pytest.mark.slow
@pytest.mark.parametrize("block", BLOCKS, ids=[b.where for b in BLOCKS])
def test_block_runs_as_pasted(block: Block, world_dirs):
    w, prelude, log = world_dirs, [], []
    for cmd in block.commands:
        kind, detail = classify(cmd)
        text = substitute(cmd.text, w)
        if kind == "state":
            prelude.append(state_line(text, w))
            continue
        needs, long_ = cmd.marker()
        if kind == "skip":
            log.append(f"{cmd.where}: not run ({detail})")
        elif kind == "app":
            run_app(cmd, prelude, text, w, log)
        elif needs or long_:
            log.append(f"{cmd.where}: not run (marker: {cmd.comment})")
        elif kind == "tool":
            run_tool(cmd, detail, prelude, text, w, log)
        elif kind == "script":
            r = sh(cmd, prelude, text, w)
            assert r.returncode == 0, _fail(cmd, detail, text, r)
            log.append(f"{cmd.where}: ran")
        else:
            pytest.fail(f"{cmd.where}: no rule for {detail!r}: {cmd.text}")
    print("\n".join(log))


# --------------------------------------------------------------------------- fast checks

def test_blocks_found():
    files = {b.file for b in BLOCKS}
    assert "README.md" in files and len(BLOCKS) >= 15, sorted(files)
    readme_cmds = [c for b in BLOCKS if b.file == "README.md" for c in b.commands]
    assert any(c.text.startswith("kgreason tables") for c in readme_cmds)


def test_every_command_has_a_rule():
    """A new command block either fits a rule above or carries a marker; markers use the known words."""
    problems = []
    for b in BLOCKS:
        for c in b.commands:
            kind, detail = classify(c)
            needs, long_ = c.marker()
            if needs - NEEDS:
                problems.append(f"{c.where}: unknown `# needs:` word(s) {sorted(needs - NEEDS)} (known: {sorted(NEEDS)})")
            if kind == "unknown" and not (needs or long_):
                problems.append(f"{c.where}: no rule runs {detail!r} and no `# needs:`/`# long` marker: {c.text}")
    assert not problems, "\n".join(problems)


def test_readme_activates_the_venv_before_bare_kgreason():
    """After `make run` the command is .venv/bin/kgreason: the README says once to activate the venv
    before its first block that types a bare `kgreason`."""
    blocks = [b for b in BLOCKS if b.file == "README.md"]
    first = next(b for b in blocks if any(classify(c)[0] in ("app", "tool") for c in b.commands))
    texts = [c.text for c in first.commands]
    assert texts[0].startswith("source .venv/bin/activate"), texts[:2]


def test_parsing_rules():
    b = parse_block("x.md", 1, [
        "# a comment line",
        "kgreason a=1 \\",
        "    b='x # y'    # needs: key, network (an endpoint)",
        "kgreason bench large=true   # long; minutes",
        "kgreason c=2   # or joblib",
    ])
    assert [(c.line, c.text) for c in b.commands] == [(3, "kgreason a=1 b='x # y'"),
                                                      (5, "kgreason bench large=true"), (6, "kgreason c=2")]
    assert b.commands[0].marker() == ({"key", "network"}, False)
    assert b.commands[1].marker() == (set(), True)
    assert b.commands[2].marker() == (set(), False)
    assert compose_variants(["--multirun", "reasoner=io,cot,rag", "seed=0,1", "'backends=[a,b]'", "x=1"]) == [
        ["reasoner=io", "seed=0", "'backends=[a,b]'", "x=1"],
        ["reasoner=cot", "seed=1", "'backends=[a,b]'", "x=1"],
        ["reasoner=rag", "seed=0", "'backends=[a,b]'", "x=1"]]
    assert classify(Command("x", 1, "OPENAI_API_KEY=... python -m kgreason reasoner=io")) == ("app", "")
    assert classify(Command("x", 1, "cd <repo> && export KGREASON_DATA=../shared/data")) == ("state", "")
    assert classify(Command("x", 1, "python -m kgreason.score p.jsonl")) == ("tool", "score")
    assert classify(Command("x", 1, "make run")) == ("skip", "set-up (make)")


# --------------------------------------------------------------------------- LLM lines (issue 45)

#: reasoners that call the LLM (retrieval_only and kg_dx do not)
LLM_REASONERS = {"io", "cot", "rag", "rag_text", "tog", "reknos", "sgr", "subqrag", "logoskg_dx"}
#: a stated time: "about 3 min", "≈ 15 s per question", "2 h"
_TIME = re.compile(r"\b\d[\d,.]*\s*(?:s|sec|seconds?|min|minutes?|h|hours?)\b")
#: markers of a line whose speed is another machine's: it says so ("time set by the endpoint") or gives a time
_ELSEWHERE = {"key", "network", "server", "gpu", "slurm", "file"}


def _preset_uses_llm(name: str) -> bool:
    text = (REPO / "conf" / "experiment" / f"{name}.yaml").read_text()
    return any(re.search(rf"\b{r}\b", text) for r in LLM_REASONERS)


def _llm_line(text: str) -> bool:
    words = text.split()
    reasoners = {r for w in words if w.startswith("reasoner=") for r in w.split("=", 1)[1].split(",")}
    presets = [w.split("=", 1)[1] for w in words if w.startswith("experiment=")]
    llms = {v for w in words if w.startswith("llm=") for v in w.split("=", 1)[1].split(",")}
    if llms == {"scripted"}:
        return False
    return bool(reasoners & LLM_REASONERS) or any(map(_preset_uses_llm, presets)) or "judge=pdsqi" in words


def test_every_llm_line_states_its_time_and_a_model_that_can_read():
    """Every example line that calls an LLM (README.md, docs/*.md) states how long it takes (a time
    in its comment, or "time set by ..." where the speed is an endpoint's, a GPU's or a cluster's,
    marked `# needs:`), and uses a model that can read: never the bundled SmolLM2 (`llm=local`,
    also the default when a line names no `llm=` and no preset)."""
    problems = []
    for b in BLOCKS:
        for c in b.commands:
            if classify(c)[0] != "app" or not _llm_line(c.text):
                continue
            needs, _ = c.marker()
            words = c.text.split()
            if not (_TIME.search(c.comment) or (needs & _ELSEWHERE and "time set by" in c.comment)):
                problems.append(f"{c.where}: states no time: {c.text}")
            named = [w for w in words if w.startswith(("llm=", "experiment="))]
            smol = "llm=local" in words and not any(w.startswith(("llm.model=", "llm.gguf_path=")) for w in words)
            if smol or not named:
                problems.append(f"{c.where}: runs SmolLM2 (llm=local, the default), which cannot read: {c.text}")
    assert not problems, "\n".join(problems)
