"""Run ``python -m kgreason ...`` and count, from outside the code under test, every token llama.cpp
evaluates (each ``llama_decode`` batch, through ``llama_cpp._internals.LlamaContext.decode``, which
both ``Llama.eval`` and the route's own scoring call): a prompt's tokens that no reuse skipped, a
scoring call's tokens, and each decoded token. The counts are written to ``$KGREASON_COUNT_EVAL`` (JSON) as the run
ends, with the process's CPU seconds.

Why from outside: a pair's *before* side is a checkout of code that predates the route's own
``llm/prompt_tokens_computed`` (commit 0ce204e: llama.cpp's own reuse of the previous prompt only),
and the same counter on both sides measures both the same way. Prompt tokens computed are the
evaluated tokens less the decoded ones: ``evaluated - completion tokens`` (each call's last decoded
token is sampled, never evaluated, and a prompt found whole in the context evaluates its last token
again: a token or so a call either way).

    KGREASON_COUNT_EVAL=counts.json python experiments/cost_issue70/count_eval.py reasoner=sgr dataset=cwq ...

With ``hydra.run.dir=DIR`` among the arguments the counts also hold a row timeline (``rows``): at
the first ``llama_decode`` after each new row of ``DIR/predictions.jsonl``, the rows so far, the
tokens evaluated until then and the process's CPU seconds; ``first_decode_cpu_s`` is the CPU spent
before the first model call (start-up). A pair can so take a run's first K questions out of a longer
run: the tokens evaluated until its K-th row, exactly (no token of the next question is evaluated
before that snapshot), and the CPU seconds from the first model call until then, which also hold
the next question's work before its first model call (its linking), and for a run's last row, the
run's summing-up before it exits: seconds against the minutes a question's model calls take.
"""
from __future__ import annotations

import atexit
import json
import os
import resource
import runpy
import sys
from pathlib import Path


def cpu_s() -> float:
    """The process's CPU seconds so far, every thread's."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return round(ru.ru_utime + ru.ru_stime, 2)


def run_dir_rows(args: list[str]) -> Path | None:
    """``predictions.jsonl`` of the run dir named by ``hydra.run.dir=`` in ``args`` (None without one)."""
    for a in args:
        if a.startswith("hydra.run.dir="):
            return Path(a.split("=", 1)[1]) / "predictions.jsonl"
    return None


class Counter:
    """What ``count_eval.py`` counts: :meth:`decode` is called with each batch's token count before
    llama.cpp evaluates it; ``preds`` (a run's ``predictions.jsonl``, or None) gives the row timeline."""

    def __init__(self, preds: Path | None, clock=cpu_s) -> None:
        self.preds, self.clock = preds, clock
        self.counts: dict = {"decode_calls": 0, "evaluated_tokens": 0, "single_token_decodes": 0}
        self._size, self._rows = -1, 0

    def snapshot(self) -> None:
        """A new row since the last model call: the counts as its question left them."""
        if self.preds is None:
            return
        try:
            size = self.preds.stat().st_size
        except OSError:
            return
        if size == self._size:
            return
        self._size = size
        rows = self.preds.read_bytes().count(b"\n")
        if rows != self._rows:
            self._rows = rows
            self.counts.setdefault("rows", []).append(
                {"rows": rows, "evaluated_tokens": self.counts["evaluated_tokens"], "process_cpu_s": self.clock()})

    def decode(self, n: int) -> None:
        c = self.counts
        if "first_decode_cpu_s" not in c:
            c["first_decode_cpu_s"] = self.clock()
        self.snapshot()
        c["decode_calls"] += 1
        c["evaluated_tokens"] += n
        c["single_token_decodes"] += n == 1

    def final(self) -> dict:
        self.snapshot()  # the last row, written after the last model call
        self.counts["process_cpu_s"] = self.clock()
        return self.counts


def main() -> None:
    out = os.environ.get("KGREASON_COUNT_EVAL")
    if not out:
        sys.exit("count_eval.py: set KGREASON_COUNT_EVAL to the JSON file the counts go to")
    from llama_cpp import _internals

    counter = Counter(run_dir_rows(sys.argv[1:]))
    counts = counter.counts
    original = _internals.LlamaContext.decode

    def decode_counted(self, batch):
        counter.decode(int(batch.n_tokens()))
        return original(self, batch)

    _internals.LlamaContext.decode = decode_counted

    def write() -> None:
        with open(out, "w", encoding="utf-8") as f:
            json.dump(counter.final(), f, indent=1)

    atexit.register(write)
    sys.argv = ["kgreason", *sys.argv[1:]]
    sys.path[0] = os.getcwd()  # as ``python -m kgreason`` run here: the checkout in the working directory
    import subprocess

    import kgreason

    checkout = os.path.dirname(os.path.dirname(os.path.abspath(kgreason.__file__)))
    got = subprocess.run(["git", "-C", checkout, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
    counts["commit"] = got.stdout.strip() or None  # the code that ran (not its path: the file may be committed)
    runpy.run_module("kgreason", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
