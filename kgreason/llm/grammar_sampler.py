"""Grammar-constrained sampling on the llama.cpp route that checks the grammar on the few tokens
that can be drawn, not on the whole vocabulary (issue 70; docs/llm.md, "Structured output").

llama-cpp-python builds, for a request with a grammar, the sampler chain
``penalties → grammar → top_k → typical → top_p → min_p → temp → dist`` (``greedy`` in place of
the last six at temperature 0) and applies it to all of the vocabulary's candidates at every
token. The grammar step tests each candidate's text against the grammar's stacks: for
Qwen2.5's 151,936 tokens that made a token cost 1.37 times its CPU time without the grammar on
one thread (docs/llm.md, "What the grammar costs per decoded token"). Only the highest logits can survive the steps after it, so :class:`TopGrammarSampler`
applies the same grammar sampler to the ``n_top`` highest logits and goes on with the same
remaining steps, and it does so only where that provably leaves the same candidates, in the
same order, with the same values, as the whole vocabulary would:

* temperature 0 (``greedy``): at least one of the ``n_top`` is allowed. Greedy takes the first
  highest logit in array order; the ``n_top`` are ordered by logit and then token id, as the
  whole vocabulary is by token id, so a tie goes the same way.
* temperature > 0: at least ``top_k`` of the ``n_top`` are allowed (``top_k`` keeps the same
  ``top_k`` allowed tokens), or every token outside the ``n_top`` lies below ``min_p``'s cut
  (``max allowed logit + ln(min_p)``), so whatever ``top_k`` would add from outside is removed by
  ``min_p`` before ``temp`` and ``dist``. ``typical`` and ``top_p`` must then be off (1.0), as they
  are in kgreason's requests; the chain is left to llama-cpp-python otherwise.

Where the ``n_top`` do not suffice, the same test is made on ``16 × n_top``, and where those do
not either, the grammar is applied to the whole vocabulary, as llama-cpp-python does. The
``dist`` step draws from its own generator seeded as llama-cpp-python seeds it, once a token in
both cases, so a seeded request gives the same reply token for token
(``tests/llm/test_grammar_sampler.py`` compares them on SGR's own JSON prompts at temperatures
0 and 0.7). ``llm.grammar_top=0`` turns it off.
"""
from __future__ import annotations

import ctypes
import math
from typing import Any

DEFAULT_TOP = 256


class TopGrammarSampler:
    """A drop-in for llama-cpp-python's ``LlamaSampler`` chain (only ``sample(ctx, idx)`` is used by
    ``Llama.sample``), for a request with a grammar and the default penalties. Counts how its
    tokens were drawn in ``stats`` (``top``: from the ``n_top`` only; ``wide``: from ``16 × n_top``;
    ``full``: the whole vocabulary)."""

    def __init__(self, llama: Any, grammar: Any, *, top_k: int, typical_p: float, top_p: float, min_p: float,
                 temp: float, seed: int, n_top: int = DEFAULT_TOP, stats: dict | None = None) -> None:
        import llama_cpp
        import numpy as np
        from llama_cpp import _internals

        self.lc, self.np = llama_cpp, np
        self.n_vocab = int(llama.n_vocab())
        self.n_top = max(1, min(int(n_top), self.n_vocab))
        self.greedy = temp == 0.0
        self.k = 1 if self.greedy else int(top_k)
        self.log_min_p = math.log(min_p) if (not self.greedy and min_p > 0.0) else None
        self.grammar = llama_cpp.llama_sampler_init_grammar(
            llama._model.vocab, grammar._grammar.encode("utf-8"), grammar._root.encode("utf-8"))
        rest = _internals.LlamaSampler()  # the chain llama-cpp-python builds after the grammar
        if self.greedy:
            rest.add_greedy()
        else:
            rest.add_top_k(top_k)
            rest.add_typical(typical_p, 1)
            rest.add_top_p(top_p, 1)
            rest.add_min_p(min_p, 1)
            rest.add_temp(temp)
            rest.add_dist(seed)
        self.rest = rest
        self.buf = (llama_cpp.llama_token_data * self.n_vocab)()
        self.view = np.ctypeslib.as_array(self.buf).view(
            np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)]))
        self.ids = np.arange(self.n_vocab, dtype=np.int32)
        self.stats = stats if stats is not None else {}

    def __del__(self) -> None:
        g, self.grammar = getattr(self, "grammar", None), None
        if g is not None:
            self.lc.llama_sampler_free(g)

    @staticmethod
    def applies(*, temp: float, top_k: int, typical_p: float, top_p: float, repeat_penalty: float,
                frequency_penalty: float, presence_penalty: float, mirostat_mode: int,
                logits_processor: Any) -> bool:
        """Whether the chain llama-cpp-python would build is one this sampler reproduces exactly."""
        neutral = repeat_penalty == 1.0 and frequency_penalty == 0.0 and presence_penalty == 0.0
        rest = temp == 0.0 or (mirostat_mode == 0 and top_k > 0 and typical_p >= 1.0 and top_p >= 1.0)
        return neutral and rest and temp >= 0.0 and logits_processor is None

    def _array(self, n: int) -> Any:
        return self.lc.llama_token_data_array(data=ctypes.cast(self.buf, self.lc.llama_token_data_p), size=n,
                                              selected=-1, sorted=False)

    def _top(self, logits: Any, n: int) -> Any:
        """The ``n`` highest logits' token ids, by logit and then token id (the vocabulary's order),
        written to the candidate array; returns the ids."""
        np, v = self.np, self.view
        top = np.argpartition(logits, self.n_vocab - n)[self.n_vocab - n:]
        top = top[np.lexsort((top, -logits[top]))]
        v["id"][:n], v["logit"][:n], v["p"][:n] = top, logits[top], 0.0
        return top

    def _exact(self, logits: Any, top: Any, n_ok: int, arr: Any) -> bool:
        """Whether the allowed tokens among ``top`` leave the chain's steps after the grammar the
        candidates the whole vocabulary would (the module's docstring says why)."""
        if n_ok >= self.k:
            return True
        if not n_ok or self.log_min_p is None:
            return False
        v = self.view["logit"][: arr.size]
        cut = float(v[self.np.isfinite(v)].max()) + self.log_min_p
        # every token outside ``top`` is below min_p's cut (with room for llama.cpp's float32 sum)
        return float(logits[top[-1]]) < cut - 1e-3

    def sample(self, ctx: Any, idx: int = -1) -> int:
        np, lc, v = self.np, self.lc, self.view
        logits = np.ctypeslib.as_array(lc.llama_get_logits_ith(ctx.ctx, idx), shape=(self.n_vocab,))
        arr = None
        for stage, n in (("top", self.n_top), ("wide", 16 * self.n_top)):  # applying a grammar changes no state
            if n >= self.n_vocab:
                break
            top = self._top(logits, n)
            arr = self._array(n)
            lc.llama_sampler_apply(self.grammar, ctypes.byref(arr))
            if self._exact(logits, top, int(np.isfinite(v["logit"][: arr.size]).sum()), arr):
                break
            arr = None
        if arr is None:
            stage = "full"
            v["id"], v["logit"], v["p"] = self.ids, logits, 0.0
            arr = self._array(self.n_vocab)
            lc.llama_sampler_apply(self.grammar, ctypes.byref(arr))
        self.stats[stage] = self.stats.get(stage, 0) + 1
        lc.llama_sampler_apply(self.rest.sampler, ctypes.byref(arr))
        if not 0 <= arr.selected < arr.size:
            raise RuntimeError("the grammar allows no token here")
        token = int(arr.data[arr.selected].id)
        lc.llama_sampler_accept(self.grammar, token)
        self.rest.accept(token)
        return token
