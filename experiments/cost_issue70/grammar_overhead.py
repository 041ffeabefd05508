"""What llm.structured_output's grammar costs per decoded token on the llama.cpp route.

    python experiments/cost_issue70/grammar_overhead.py BUNDLE [--prompts 3] [--threads 1]   # needs: qwen; about 3 min

Takes the first SGR §3.5 hypothesis prompt of each of the first ``--prompts`` questions of a
bundled SGR row (their ``messages`` in the traces), prefills each once (``max_tokens=1``; llama.cpp
then reuses it), and decodes it greedily, alternately with and without the hypothesis schema's
grammar (``kgreason/reasoners/prompts/sgr/hypothesis.schema.json``), twice each: CPU seconds per
completion token, and whether the two replies are the same text. Nothing is asserted; it prints.
"""

from __future__ import annotations

import argparse
import time

from bundle_prompts import first_prompts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundle")
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-tokens", type=int, default=160)
    a = ap.parse_args()
    import llama_cpp
    from llama_cpp import LlamaGrammar

    from kgreason.llm.local import resolve_gguf
    from kgreason.reasoners.base import load_schema

    prompts = first_prompts(a.bundle, a.prompts, "hypothesis")
    if not prompts:
        raise SystemExit(f"{a.bundle}: no SGR hypothesis prompt in its traces")
    llm = llama_cpp.Llama(model_path=str(resolve_gguf("qwen2.5-coder-1.5b-instruct")), n_ctx=4096,
                          n_threads=a.threads, verbose=False)
    grammar = LlamaGrammar.from_json_schema(load_schema("sgr", "hypothesis"), verbose=False)
    tot = {"grammar": [0, 0.0], "free": [0, 0.0]}
    for i, msgs in enumerate(prompts):
        texts = {}
        for mode in ("grammar", "free", "grammar", "free"):
            llm.create_chat_completion(messages=msgs, max_tokens=1, temperature=0)
            kw = dict(messages=msgs, max_tokens=a.max_tokens, temperature=0)
            if mode == "grammar":
                kw["grammar"] = grammar
            c0 = time.process_time()
            r = llm.create_chat_completion(**kw)
            dt = time.process_time() - c0
            ct = int(r["usage"]["completion_tokens"])
            texts[mode] = r["choices"][0]["message"]["content"]
            tot[mode][0] += ct
            tot[mode][1] += dt
            print(f"prompt {i + 1} {mode:7s} {ct:4d} tokens {dt:6.2f} CPU s  {dt / max(ct, 1):.4f} s/token", flush=True)
        print(f"prompt {i + 1}: same reply with and without the grammar: {texts['grammar'] == texts['free']}")
    g, f = (tot[m][1] / max(tot[m][0], 1) for m in ("grammar", "free"))
    print(f"grammar {g:.4f} s/token, free {f:.4f} s/token: the grammar costs {g / f:.2f}x per decoded token")


if __name__ == "__main__":
    main()
