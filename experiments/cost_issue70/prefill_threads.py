"""What llama-cpp-python's default prompt threads cost beside another job (``llm.n_threads``).

    python experiments/cost_issue70/prefill_threads.py BUNDLE [--prompts 4] [--threads 1]   # needs: qwen; about 4 min

llama.cpp evaluates a prompt's tokens as a batch with ``n_threads_batch`` threads, which
llama-cpp-python sets to the machine's CPU count unless told; ``llm.n_threads`` set only the
single-token threads until 2026-12-07. This script takes the first prompt of each of the first
``--prompts`` questions of a bundled row (their ``messages`` in the traces), and evaluates each from
its first token (the context reset) under two loaded models, alternately, twice each: ``--threads``
threads for single tokens and for the prompt batch (what ``llm.n_threads`` sets now), and
``--threads`` for single tokens with the library's default for the batch (before). It prints CPU and
wall seconds per prompt token and whether the two greedy 16-token replies are the same text. Run it
beside another job on the other cores, as the validation rows run. Nothing is asserted; it prints.
"""

from __future__ import annotations

import argparse
import multiprocessing
import time

from bundle_prompts import first_prompts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundle")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    import llama_cpp

    from kgreason.llm.local import resolve_gguf

    prompts = first_prompts(a.bundle, a.prompts)
    if not prompts:
        raise SystemExit(f"{a.bundle}: no model prompt in its traces")
    gguf = str(resolve_gguf("qwen2.5-coder-1.5b-instruct"))
    cpus = multiprocessing.cpu_count()
    sides = {"batch threads = n_threads": a.threads, f"batch threads = {cpus} (library default)": cpus}
    llms = {k: llama_cpp.Llama(model_path=gguf, n_ctx=4096, n_threads=a.threads, n_threads_batch=tb, verbose=False)
            for k, tb in sides.items()}
    tot = {k: [0, 0.0, 0.0] for k in sides}
    for i, msgs in enumerate(prompts):
        texts = {}
        for k in list(sides) * 2:
            llm = llms[k]
            llm.reset()
            c0, t0 = time.process_time(), time.perf_counter()
            r = llm.create_chat_completion(messages=msgs, max_tokens=1, temperature=0)
            dt, wt = time.process_time() - c0, time.perf_counter() - t0
            pt = int(r["usage"]["prompt_tokens"])
            tot[k][0] += pt
            tot[k][1] += dt
            tot[k][2] += wt
            texts[k] = llm.create_chat_completion(messages=msgs, max_tokens=16, temperature=0)["choices"][0][
                "message"]["content"]
            print(f"prompt {i + 1} {k:38s} {pt:5d} tokens {dt:6.2f} CPU s {wt:6.2f} wall s", flush=True)
        print(f"prompt {i + 1}: same greedy reply both ways: {len(set(texts.values())) == 1}")
    (k1, k2) = sides
    for k in sides:
        print(f"{k}: {1000 * tot[k][1] / tot[k][0]:.1f} CPU ms and {1000 * tot[k][2] / tot[k][0]:.1f} wall ms a prompt token")
    print(f"the library default costs {tot[k2][1] / tot[k1][1]:.2f}x the CPU seconds and "
          f"{tot[k2][2] / tot[k1][2]:.2f}x the wall seconds of n_threads prompt threads")


if __name__ == "__main__":
    main()
