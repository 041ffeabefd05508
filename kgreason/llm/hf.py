"""HFCausalLM: a local transformers causal LM (any ``AutoModelForCausalLM`` directory).

* Prompts are rendered with the tokenizer's chat template (``add_generation_prompt=True``).
* ``generate`` groups requests with equal sampling settings (temperature, top_p, max_tokens,
  n, seed, logprobs) and runs each group in **left-padded** batches of ``batch_size``;
  results are returned in request order.
* Sampling is seeded per group (``torch.manual_seed(seed)`` before ``generate``) when the
  request has a seed; ``temperature == 0`` is greedy.
* ``logprobs=True`` → per generated token log-probabilities from ``output_scores`` via
  ``model.compute_transition_scores(..., normalize_logits=True)`` (log-softmax of the
  processed logits, so temperature-scaled when sampling).
* ``score(prompt, candidates)`` = Σ log P(candidate token | prompt, previous candidate
  tokens) — SGR's P_θ(a | q, ...) — from one right-padded forward pass per batch.
* ``stop`` strings truncate the decoded text (the first occurrence is cut).

Heavy imports (torch, transformers) happen in ``__init__``.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Sequence

from kgreason.llm.accounting import call_usage, split_usage
from kgreason.llm.base import backend_seed
from kgreason.types import ChatRequest, Completion, Message, Usage

log = logging.getLogger("kgreason.llm")


DTYPES = ("float32", "bfloat16", "float16", "int8", "auto")


def apply_dtype(net: Any, dtype: str) -> Any:
    """Cast a loaded (float32) model for CPU/GPU inference.

    ``bfloat16`` / ``float16``: ``net.to(dtype)``. ``int8``: dynamic quantisation of every
    ``nn.Linear`` (int8 weights, activations quantised per batch at run time;
    ``torch.ao.quantization.quantize_dynamic``, CPU only). ``float32`` / ``auto``: unchanged.
    """
    import torch

    if dtype not in DTYPES:
        raise ValueError(f"llm.dtype must be one of {DTYPES}, got {dtype!r}")
    if dtype in ("float32", "auto"):
        return net
    if dtype == "int8":
        import warnings

        from torch.ao.quantization import quantize_dynamic

        with warnings.catch_warnings():  # torch marks the eager API deprecated; it still works in 2.x
            warnings.simplefilter("ignore")
            return quantize_dynamic(net.float(), {torch.nn.Linear}, dtype=torch.qint8, inplace=True)
    return net.to(getattr(torch, dtype))


def cpu_has_native_bf16(cpuinfo: str | None = None) -> bool | None:
    """Whether this CPU computes in bfloat16 natively, read from ``/proc/cpuinfo`` (or the text
    given): the x86 flags ``avx512_bf16`` or ``amx_bf16``, or the Arm feature ``bf16``. ``None``
    when it cannot tell (no ``/proc/cpuinfo``: macOS, Windows).

    Without them torch converts bfloat16 to float32 around every matmul: on a 2-core AVX2 EPYC
    Qwen2.5-Coder-1.5B ran at 0.65× float32's tokens/s one request at a time and 0.36× in
    batches of 8 (docs/llm.md); the earlier measurements, on other machines, had given bfloat16
    1.8–4.3× float32."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            return None
    words: set[str] = set()
    for line in cpuinfo.splitlines():
        key, _, val = line.partition(":")
        if key.strip().lower() in ("flags", "features"):
            words.update(val.split())
    if not words:
        return None
    return bool(words & {"avx512_bf16", "amx_bf16", "bf16"})


def resolve_dtype(dtype: str, default: str, device: str = "cpu", cpuinfo: str | None = None) -> str:
    """The torch dtype ``llm.dtype`` asks for: itself unless ``auto``; ``auto`` = the model's
    measured ``default``, except that a bfloat16 default runs in float32 on a CPU known to lack
    native bfloat16 (:func:`cpu_has_native_bf16`), where bfloat16 is the slower of the two."""
    if dtype != "auto":
        return dtype
    if default == "bfloat16" and str(device) == "cpu" and cpu_has_native_bf16(cpuinfo) is False:
        log.info("llm.dtype=auto: float32, not bfloat16 (this CPU has no native bfloat16: no avx512_bf16, "
                 "amx_bf16 or bf16 flag; bfloat16 measured slower there). On such a CPU llm.route=llamacpp "
                 "(pip install 'kgreason[llamacpp]') measured about 5x faster than float32 (docs/llm.md)")
        return "float32"
    return default


def _truncate(text: str, stop: Sequence[str]) -> str:
    cut = min((i for i in (text.find(s) for s in stop if s) if i >= 0), default=-1)
    return text if cut < 0 else text[:cut]


class HFCausalLM:
    """Args:
        model: local directory (or anything ``from_pretrained`` accepts offline).
        device: ``cpu``, ``cuda``, ``cuda:1``, ``mps`` or ``auto`` (cuda when available).
        dtype: ``float32`` | ``bfloat16`` | ``float16`` | ``int8`` (dynamic quantisation, CPU) |
            ``auto`` (checkpoint dtype). With ``model_obj`` the object is cast by :func:`apply_dtype`.
        batch_size: requests per forward batch.
        max_input_tokens: prompts longer than this are left-truncated (keeps the question end).
        model_obj / tokenizer_obj: already-loaded objects (LocalLLM passes them).
        num_threads: ``torch.set_num_threads`` for CPU inference (``None`` = torch's default).
    """

    backend = "hf"

    def __init__(self, model: str, device: str = "cpu", dtype: str = "float32", batch_size: int = 8,
                 max_input_tokens: int = 4096, trust_remote_code: bool = False, gguf_file: str | None = None,
                 model_obj: Any = None, tokenizer_obj: Any = None, name: str | None = None,
                 num_threads: int | None = None) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        if num_threads:  # CPU: on an oversubscribed machine 1 thread beats OpenMP spin-waits (docs/llm.md)
            torch.set_num_threads(int(num_threads))
        self.model = str(name or model)
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        self.batch_size = max(1, int(batch_size))
        self.max_input_tokens = int(max_input_tokens)
        kw: dict[str, Any] = {"trust_remote_code": trust_remote_code}
        if gguf_file:
            kw["gguf_file"] = gguf_file
        if tokenizer_obj is None:
            if not Path(model).exists() and not gguf_file:
                log.info("HFCausalLM: %s is not a local path; loading from the HF cache (offline)", model)
            tokenizer_obj = AutoTokenizer.from_pretrained(model, **kw)
        if dtype not in DTYPES:
            raise ValueError(f"llm.dtype must be one of {DTYPES}, got {dtype!r}")
        if model_obj is None:
            load_dtype = {"auto": "auto", "int8": torch.float32}.get(dtype) or getattr(torch, str(dtype))
            model_obj = AutoModelForCausalLM.from_pretrained(model, dtype=load_dtype, **kw)
        model_obj = apply_dtype(model_obj, dtype)
        self.dtype = dtype
        self.tok = tokenizer_obj
        if self.tok.pad_token is None:
            self.tok.pad_token = self.tok.eos_token
        self.tok.padding_side = "left"
        self.tok.truncation_side = "left"  # over-long prompts lose their beginning, never the generation prompt
        self.net = model_obj.to(self.device).eval()
        if getattr(self.tok, "chat_template", None) is None:
            raise ValueError(f"{model}: tokenizer has no chat_template (needed to render chat messages)")

    # ------------------------------------------------------------------ prompts
    def render(self, messages: Sequence[Message]) -> str:
        """The chat-templated prompt text (generation prompt appended)."""
        return self.tok.apply_chat_template([{"role": m.role, "content": m.content} for m in messages],
                                            tokenize=False, add_generation_prompt=True)

    def _encode(self, prompts: list[str]):
        enc = self.tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False,
                       truncation=True, max_length=self.max_input_tokens)
        return {k: v.to(self.device) for k, v in enc.items()}

    # ------------------------------------------------------------------ generate
    @staticmethod
    def sampling_kwargs(req: ChatRequest) -> dict[str, Any]:
        """``model.generate`` kwargs of one request (greedy when temperature is 0)."""
        kw: dict[str, Any] = {"max_new_tokens": int(req.max_tokens), "num_return_sequences": int(req.n)}
        if req.temperature > 0:
            kw.update(do_sample=True, temperature=float(req.temperature), top_p=float(req.top_p))
        else:
            kw.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        return kw

    def generate(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        requests = list(requests)
        groups: "OrderedDict[tuple, list[int]]" = OrderedDict()
        for i, r in enumerate(requests):
            key = (r.temperature, r.top_p, r.max_tokens, r.n, r.seed, r.logprobs, r.sample_index)
            groups.setdefault(key, []).append(i)
        out: list[Completion | None] = [None] * len(requests)
        for idx in groups.values():
            for s in range(0, len(idx), self.batch_size):
                chunk = idx[s : s + self.batch_size]
                for i, c in zip(chunk, self._batch([requests[i] for i in chunk])):
                    out[i] = c
        return out  # type: ignore[return-value]

    def _batch(self, reqs: list[ChatRequest]) -> list[Completion]:
        torch = self.torch
        r0 = reqs[0]
        enc = self._encode([self.render(r.messages) for r in reqs])
        n_in = enc["input_ids"].shape[1]
        seed = backend_seed(r0)  # the group shares seed and sample_index (the grouping key)
        if seed is not None:
            torch.manual_seed(seed)
        t0 = time.perf_counter()
        with torch.no_grad():
            gen = self.net.generate(**enc, **self.sampling_kwargs(r0), output_scores=r0.logprobs,
                                    return_dict_in_generate=True, pad_token_id=self.tok.pad_token_id)
        latency = time.perf_counter() - t0
        seqs = gen.sequences[:, n_in:]  # (B·n, T_new)
        trans = None
        if r0.logprobs:
            trans = self.net.compute_transition_scores(gen.sequences, gen.scores, normalize_logits=True)
        eos = self.tok.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos]) - {None}
        gen_cfg_eos = getattr(self.net.generation_config, "eos_token_id", None)
        if gen_cfg_eos is not None:
            eos_ids |= set(gen_cfg_eos if isinstance(gen_cfg_eos, list) else [gen_cfg_eos])
        texts, lengths, lps = [], [], []
        for j in range(seqs.shape[0]):
            ids = seqs[j].tolist()
            L = len(ids)
            for k, t in enumerate(ids):
                if t in eos_ids:
                    L = k + 1
                    break
            lengths.append(L)
            texts.append(self.tok.decode(ids[:L], skip_special_tokens=True).strip())
            if trans is not None:
                lps.append(tuple(float(x) for x in trans[j, :L].tolist()))
        mask = enc["attention_mask"]
        n = r0.n
        comps = []
        shares = split_usage(Usage(calls=len(reqs), latency_s=latency), len(reqs))
        for b, r in enumerate(reqs):
            rows = range(b * n, (b + 1) * n)
            usage = call_usage(int(mask[b].sum()), sum(lengths[j] for j in rows), shares[b].latency_s)
            comps.append(Completion(texts=tuple(_truncate(texts[j], r.stop) for j in rows), usage=usage,
                                    token_logprobs=tuple(lps[j] for j in rows) if trans is not None else None))
        return comps

    # ------------------------------------------------------------------ score
    def score(self, prompt: Sequence[Message], candidates: Sequence[str]) -> list[float]:
        """Σ log P(candidate tokens | chat-templated prompt), one float per candidate."""
        torch = self.torch
        p_ids = self.tok(self.render(prompt), add_special_tokens=False)["input_ids"]
        out: list[float] = []
        for s in range(0, len(candidates), self.batch_size):
            cands = list(candidates[s : s + self.batch_size])
            c_ids = [self.tok(c, add_special_tokens=False)["input_ids"] for c in cands]
            seqs = [p_ids + c for c in c_ids]
            T = max(len(x) for x in seqs)
            pad = self.tok.pad_token_id
            ids = torch.full((len(seqs), T), pad, dtype=torch.long)
            att = torch.zeros((len(seqs), T), dtype=torch.long)
            for i, x in enumerate(seqs):  # right padding: real tokens keep positions 0..len-1
                ids[i, : len(x)] = torch.tensor(x)
                att[i, : len(x)] = 1
            with torch.no_grad():
                logits = self.net(input_ids=ids.to(self.device), attention_mask=att.to(self.device)).logits
            logp = torch.log_softmax(logits.float(), dim=-1)
            for i, c in enumerate(c_ids):
                start = len(p_ids)
                pos = torch.arange(start - 1, start - 1 + len(c), device=logp.device)
                tgt = torch.tensor(c, device=logp.device)
                out.append(float(logp[i, pos, tgt].sum()) if c else 0.0)
        return out


def build_tiny_model(directory: str | Path, seed: int = 0) -> str:
    """Save a tiny random-weight Llama + WordLevel tokenizer with a chat template to
    ``directory`` (for tests and ``kgreason.bench.llm``; nothing is downloaded). Returns the path."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = ("<pad> <s> </s> <unk> <|system|> <|user|> <|assistant|> the a of is what who which where "
             "capital france paris rome question number about knowledge graph answer yes no film directed "
             "by born in city country hello there sys q x y z 0 1 2 3 4 5 6 7 8 9 . , ? !").split()
    vocab = {w: i for i, w in enumerate(dict.fromkeys(words))}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    tk.decoder = decoders.WordPiece(prefix="##")  # joins tokens with spaces
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                  unk_token="<unk>")
    tok.chat_template = ("{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} {% endfor %}"
                         "{% if add_generation_prompt %}<|assistant|> {% endif %}")
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, initializer_range=0.5,
                      bos_token_id=vocab["<s>"], eos_token_id=vocab["</s>"], pad_token_id=vocab["<pad>"])
    LlamaForCausalLM(cfg).save_pretrained(str(directory))
    tok.save_pretrained(str(directory))
    return str(directory)
