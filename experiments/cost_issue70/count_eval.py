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
"""
from __future__ import annotations

import atexit
import json
import os
import resource
import runpy
import sys


def main() -> None:
    out = os.environ.get("KGREASON_COUNT_EVAL")
    if not out:
        sys.exit("count_eval.py: set KGREASON_COUNT_EVAL to the JSON file the counts go to")
    from llama_cpp import _internals

    counts = {"decode_calls": 0, "evaluated_tokens": 0, "single_token_decodes": 0}
    original = _internals.LlamaContext.decode

    def decode_counted(self, batch):
        n = int(batch.n_tokens())
        counts["decode_calls"] += 1
        counts["evaluated_tokens"] += n
        counts["single_token_decodes"] += n == 1
        return original(self, batch)

    _internals.LlamaContext.decode = decode_counted

    def write() -> None:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        counts["process_cpu_s"] = round(ru.ru_utime + ru.ru_stime, 1)
        with open(out, "w", encoding="utf-8") as f:
            json.dump(counts, f, indent=1)

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
