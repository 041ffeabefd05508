"""The validation table of issue 21: every method on the same N shared-sample questions with
Qwen2.5-Coder-1.5B-Instruct (``llm=qwen_coder_1_5b``), one row per (dataset, reasoner).

    KGREASON_DATA=../shared/data python experiments/validation/run_validation.py --n 3 --rows metaqa_io,metaqa_rag
    KGREASON_DATA=../shared/data python experiments/validation/run_validation.py --n 20          # every row
    python experiments/validation/run_validation.py --print                                        # the commands only

Each row is one ``python -m kgreason`` run (printed, and stored in the JSON as ``command``) with
``dataset.limit=N``, so every row of a dataset sees the same first N questions of the shared
sample. Run dirs are ``outputs/validation/n<N>/<row>`` (resumable: a killed row restarts where it
stopped) and every LLM call goes through one call cache (``--cache``, default
``~/.cache/kgreason/validation``), so re-running a finished row costs no model call; the table can
be built over several sittings. The row's ``wall_s`` is the run's own ``timing.json`` wall time
(model load included) of the sitting that made the model calls; a later sitting that only
replayed the cache (``backend_calls`` 0, ``replayed_from_cache``) keeps that figure.

Results are merged into ``experiments/validation/validation_n<N>.json`` (one entry per row: the
command, N, the dataset's metrics, unparseable replies, LLM calls per question, wall time).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

METAQA = ["dataset=metaqa", "kg=metaqa"]
HOTPOT = ["dataset=hotpotqa", "kg=embedded"]
DDX = ["dataset=ddxplus", "kg=ddxplus"]

# row name -> (dataset overrides, reasoner, extra overrides). Order = the order rows run in
# (cheap single-call rows first, so a short sitting still fills most of the table).
ROWS: dict[str, tuple[list[str], str, list[str]]] = {
    "metaqa_io": (METAQA, "io", []),
    "metaqa_rag": (METAQA, "rag", []),
    "metaqa_cot": (METAQA, "cot", []),
    "hotpotqa_io": (HOTPOT, "io", []),
    "hotpotqa_rag_text": (HOTPOT, "rag_text", []),
    "ddxplus_kg_dx": (DDX, "kg_dx", []),
    "ddxplus_logoskg_dx": (DDX, "logoskg_dx", []),
    "metaqa_tog": (METAQA, "tog", []),
    "metaqa_reknos": (METAQA, "reknos", []),
    "metaqa_sgr": (METAQA, "sgr", []),
    "hotpotqa_subqrag": (HOTPOT, "subqrag", []),
    # ablations that measure a deviation from the literal paper reading (docs/sgr.md)
    "metaqa_sgr_strict": (METAQA, "sgr", ["reasoner.schema_direction=strict"]),
    # SubQRAG Table 2 "w/o Decomposition": measures how much the model's sub-questions help
    "hotpotqa_subqrag_no_decomposition": (HOTPOT, "subqrag", ["ablation=subqrag_no_decomposition"]),
}

# legacy_batched_keys: the table's cache was filled by batched runs before 2026-11-24, when the
# batcher hid the model's route from the cache key (docs/llm.md); harmless on a fresh cache.
# llm.dtype=bfloat16: every row's replies were made in bfloat16; `auto` picks float32 on a CPU
# without native bfloat16 (docs/llm.md), whose replies are keyed apart and would not replay
COMMON = ["llm=qwen_coder_1_5b", "llm.dtype=bfloat16", "tracking=none", "llm_cache.legacy_batched_keys=true"]
# reasoners that answer examples in order (thread_safe=False): SubQRAG's graph updates must reach
# later questions in dataset order, so its rows (ablations included) run one example at a time
SEQUENTIAL = {"subqrag"}


# --route llamacpp: the same GGUF through llama.cpp (Q4_K_M kernels, one request at a time), the
# fast route on a CPU without native bfloat16 (docs/llm.md); its replies are keyed apart, its rows
# go to validation_n<N>_llamacpp.json. n_ctx 4096: SubQRAG's passage prompts plus 512 new tokens.
ROUTES = {"transformers": ([], ""), "llamacpp": (["llm.route=llamacpp", "llm.n_ctx=4096"], "_llamacpp")}


def command(row: str, n: int, cache: str, workers: int = 8, threads: int = 2, route: str = "transformers") -> list[str]:
    """One row's run. ``workers`` concurrent examples share one model through the cross-example
    batcher (kgreason/llm/batching.py); greedy replies may round slightly differently in a batch, and
    the call cache does not key on workers or threads, so sittings with other values replay."""
    data, reasoner, extra = ROWS[row]
    over, suffix = ROUTES[route]
    return [sys.executable, "-m", "kgreason", f"reasoner={reasoner}", *data, *COMMON, *over,
            f"llm.n_threads={threads}", f"example_workers={1 if reasoner in SEQUENTIAL else workers}", *extra,
            f"dataset.limit={n}", f"llm_cache.dir={cache}", f"hydra.run.dir=outputs/validation/n{n}{suffix}/{row}"]


def summarise(run_dir: Path) -> dict:
    m = json.loads((run_dir / "metrics.json").read_text())
    t = json.loads((run_dir / "timing.json").read_text()) if (run_dir / "timing.json").exists() else {}
    n_ex = m.get("run/n_examples") or 0
    return {
        "n_examples": n_ex,
        "metrics": {k.removeprefix("metric/"): v for k, v in m.items() if k.startswith("metric/")},
        "unparseable_replies": m.get("llm/parse_failures"),
        "reasks": m.get("llm/reasks"),
        # the method's calls (answer, score, index purposes), answered by the model or the cache:
        # llm/calls_per_question counts only this sitting's model calls, 0 on a replay
        "llm_calls_per_question": (sum(m.get(f"llm/{p}/{k}", 0) or 0 for p in ("answer", "score", "index")
                                       for k in ("calls", "cache_hits")) / n_ex) if n_ex else None,
        "tokens_per_question": m.get("llm/tokens_per_question"),
        "backend_calls": m.get("llm/calls"),
        "cache_hits": m.get("llm/cache_hits"),
        "errors": m.get("run/errors"),
        "wall_s": t.get("wall_s"),
    }


KEY_METRICS = {"metaqa": ["hits_at_1", "answer_set_f1", "answer_coverage"], "hotpotqa": ["em", "f1"],
               "ddxplus": ["hits_at_1", "dx_f1", "dx_baseline_f1", "dx_round1_f1", "dx_round2_f1"]}


def markdown() -> str:
    """Every row of every ``validation_n*.json`` as one markdown table (for the docs)."""
    lines = ["| row | N | metrics | unparseable replies | LLM calls / question | wall s |", "|---|---|---|---|---|---|"]
    for f in sorted(HERE.glob("validation_n*.json")):
        route = " (llama.cpp)" if f.stem.endswith("_llamacpp") else ""
        for row, e in json.loads(f.read_text()).items():
            row = row + route
            if "metrics" not in e:
                lines.append(f"| {row} | {e.get('n')} | {e.get('status')} | | | |")
                continue
            keys = KEY_METRICS[row.split("_")[0]]
            ms = ", ".join(f"{k} {e['metrics'][k]:.3f}" if isinstance(e["metrics"].get(k), (int, float))
                           else f"{k} –" for k in keys)
            wall = f"{e['wall_s']:.0f}" if isinstance(e.get("wall_s"), (int, float)) else "–"
            lines.append(f"| {row} | {e['n_examples']} | {ms} | {e['unparseable_replies']} | "
                         f"{e['llm_calls_per_question']:.1f} | {wall} |")
    return "\n".join(lines)


DEFAULT_CACHE = "~/.cache/kgreason/validation"


def shown_command(cmd: list[str], cache: str) -> str:
    """The row's command as stored in the committed JSON: no path of this machine in it. The data
    directory is the documented relative default (``../shared/data`` from the clone's root; set
    ``KGREASON_DATA`` to yours), the call cache is ``~/.cache/kgreason/validation`` when it is the
    default, else ``<cache>``."""
    text = shlex.join(cmd[1:])
    default = os.path.expanduser(DEFAULT_CACHE)
    for arg in cmd:  # the cache as it appears in the command (quoted when it holds a space)
        if arg.startswith("llm_cache.dir="):
            shown_cache = DEFAULT_CACHE if os.path.abspath(cache) == os.path.abspath(default) else "<cache>"
            text = text.replace(shlex.quote(arg), f"llm_cache.dir={shown_cache}")
    return "KGREASON_DATA=../shared/data python " + text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20, help="questions per row (dataset.limit)")
    ap.add_argument("--rows", default=",".join(ROWS), help="comma-separated row names")
    ap.add_argument("--cache", default=os.path.expanduser(DEFAULT_CACHE))
    ap.add_argument("--workers", type=int, default=8, help="example_workers (batched on the local model)")
    ap.add_argument("--threads", type=int, default=2, help="llm.n_threads (torch CPU threads)")
    ap.add_argument("--route", choices=sorted(ROUTES), default="transformers",
                    help="the model's route; llamacpp rows go to validation_n<N>_llamacpp.json")
    ap.add_argument("--print", action="store_true", help="print the commands and exit")
    ap.add_argument("--fresh", action="store_true",
                    help="delete each row's run dir first (re-parse every cached reply, e.g. after a parser fix)")
    ap.add_argument("--table", action="store_true", help="print the committed rows as markdown and exit")
    args = ap.parse_args(argv)
    if args.table:
        print(markdown())
        return 0
    rows = [r for r in args.rows.split(",") if r]
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        ap.error(f"--rows: unknown {unknown}; expected some of {list(ROWS)}")
    suffix = ROUTES[args.route][1]
    out = HERE / f"validation_n{args.n}{suffix}.json"
    for row in rows:
        cmd = command(row, args.n, args.cache, args.workers, args.threads, args.route)
        shown = shown_command(cmd, args.cache)
        print(shown, flush=True)
        if args.print:
            continue
        run_dir = ROOT / "outputs" / "validation" / f"n{args.n}{suffix}" / row
        if args.fresh and run_dir.exists():
            shutil.rmtree(run_dir)
        t0 = time.time()
        rc = subprocess.call(cmd, cwd=ROOT)
        table = json.loads(out.read_text()) if out.exists() else {}  # re-read: other sittings may have written
        if rc != 0 or not (run_dir / "metrics.json").exists():
            print(f"row {row}: exit status {rc}, no metrics (see {run_dir}/run.log)", file=sys.stderr, flush=True)
            prev = table.get(row, {})
            if "metrics" in prev:  # a killed or failed later sitting never erases a measured row
                table[row] = {**prev, "last_sitting": f"failed (exit {rc})"}
            else:
                table[row] = {**prev, "command": shown, "n": args.n, "status": f"failed (exit {rc})"}
        else:
            entry = summarise(run_dir)
            prev = table.get(row, {})
            if entry["backend_calls"] == 0 and entry.get("cache_hits"):  # a replay: its wall time is not the method's cost
                entry["wall_s"], entry["replayed_from_cache"] = prev.get("wall_s"), True
                if prev.get("wall_note"):
                    entry["wall_note"] = prev["wall_note"]
            table[row] = {"command": shown, "n": args.n, **entry, "sitting_s": round(time.time() - t0, 1)}
        out.write_text(json.dumps(table, indent=2, sort_keys=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
