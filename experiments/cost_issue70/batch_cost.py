"""What llama.cpp charges per token by batch size, on this machine: whether evaluating several
tokens in one batch (speculative or prompt-lookup drafts, several sequences decoded together)
can make decoding cheaper here.

    python experiments/cost_issue70/batch_cost.py [--threads 1] [--rounds 2] [--out FILE]   # needs: qwen; about 2 min

Loads Qwen2.5-Coder-1.5B (``make qwen``), evaluates a 300-token context once, then times batches of
1, 2, 3, 4, 6, 8, 12, 16, 24, 32 and 64 new tokens after it (each with its logits row, as a draft's
check needs), and a 400-token prompt with only its last row (prefill): process CPU seconds per
token, the median over ``--rounds`` alternating passes. Nothing is asserted; it prints a table and,
with ``--out``, writes JSON with ``llama_cpp.llama_print_system_info()`` (the kernels the build has).
Run two builds side by side by putting another build's package first on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

BATCHES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64)
CONTEXT = 300
PREFILL = 400


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out")
    a = ap.parse_args()
    import llama_cpp

    from kgreason.llm.local import resolve_gguf

    llm = llama_cpp.Llama(model_path=str(resolve_gguf("qwen2.5-coder-1.5b-instruct")), n_ctx=2048, n_batch=512,
                          n_threads=a.threads, n_threads_batch=a.threads, verbose=False)
    ctx, mem = llm._ctx.ctx, llama_cpp.llama_get_memory(llm._ctx.ctx)
    ids = llm.tokenize(("The quick brown fox jumps over the lazy dog. " * 120).encode())[:CONTEXT + PREFILL]
    batch = llama_cpp.llama_batch_init(512, 0, 1)

    def decode(start: int, n: int, rows: bool) -> float:
        batch.n_tokens = n
        for i in range(n):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = ids[start + i], start + i, 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = rows or i == n - 1
        t = time.process_time()
        if llama_cpp.llama_decode(ctx, batch) != 0:
            raise SystemExit(f"llama_decode failed on a batch of {n}")
        return time.process_time() - t

    per: dict[str, list[float]] = {}
    for _ in range(a.rounds):
        llama_cpp.llama_memory_clear(mem, True)
        per.setdefault(f"prefill {PREFILL}", []).append(decode(0, PREFILL, rows=False) / PREFILL)
        llama_cpp.llama_memory_clear(mem, True)
        decode(0, CONTEXT, rows=False)
        for n in BATCHES:
            reps, spent = max(2, 48 // n), 0.0
            for _ in range(reps):
                llama_cpp.llama_memory_seq_rm(mem, 0, CONTEXT, -1)
                spent += decode(CONTEXT, n, rows=True)
            per.setdefault(f"batch {n}", []).append(spent / reps / n)
    llama_cpp.llama_batch_free(batch)
    ms = {k: round(1000 * statistics.median(v), 1) for k, v in per.items()}
    one = ms["batch 1"]
    print(f"threads={a.threads}  {llama_cpp.llama_print_system_info().decode().strip()}")
    print("| tokens in the batch | CPU ms a token | against one token at a time |\n|---|---|---|")
    for k, v in ms.items():
        print(f"| {k} | {v} | {one / v:.2f}x |")
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            json.dump({"threads": a.threads, "rounds": a.rounds, "context": CONTEXT,
                       "system_info": llama_cpp.llama_print_system_info().decode().strip(),
                       "cpu_ms_per_token": ms}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
