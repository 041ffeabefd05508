"""The validation table's rows (issue 21): which method runs on which dataset, with which
overrides, and each row's command (one ``python -m kgreason`` run). Also what the tables show
of each dataset (its key metrics), which row a row is paired against, and the README's method
list."""

from __future__ import annotations

import os
import shlex
import sys

from validation_runner import places

METAQA = ["dataset=metaqa", "kg=metaqa"]

HOTPOT = ["dataset=hotpotqa", "kg=embedded"]

DDX = ["dataset=ddxplus", "kg=ddxplus"]

# the papers' own datasets (issue 43): Freebase KGQA over the FB15k-237 slice, multi-hop QA over documents
# the slice links 40 % of the held-out CWQ questions, below preflight.min_link_rate (0.5): these rows
# run anyway, on purpose, with the slice's coverage ceiling (`cwq_retrieval_only`) and
# retrieval/empty_rate beside them, as issue 43 asks (an unlinked question gets the IO prompt)
CWQ = ["dataset=cwq", "kg=freebase_slice", "preflight.min_link_rate=0"]

WEBQSP = ["dataset=webqsp", "kg=freebase_slice"]

MUSIQUE = ["dataset=musique", "kg=embedded"]

TWOWIKI = ["dataset=twowiki", "kg=embedded"]

# the llama.cpp context of rows whose prompts outgrow the route's default (ROUTES)
FULL_WINDOW = "llm.n_ctx=32768"

# SGR's settings on MetaQA, chosen on the dev split (issue 70; docs/llm.md, "Measured: before and
# after issue 70", pairs in experiments/cost_issue70/pairs.json): the reply cap per prompt that
# `kgreason bench caps` fitted (1.54x less CPU a question) and structured output (1.86x with the caps;
# no unparseable reply), Hits@1 unchanged on those questions. Neither is a default of the reasoner
# (the caps were fitted on MetaQA only; structured output is an option): every MetaQA SGR row, full
# and ablations alike, runs under both, so Table 2's arms are paired under one setting
METAQA_SGR_CAPS = "reasoner.max_tokens={hypothesis:512,step:80,refine:144,cypher:144,schema:112,structure:48,default:512}"
METAQA_SGR = [METAQA_SGR_CAPS, "llm.structured_output=true"]

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
    "metaqa_sgr": (METAQA, "sgr", [*METAQA_SGR]),
    "hotpotqa_subqrag": (HOTPOT, "subqrag", []),
    # every default row runs the paper's reading; the departures that were chosen on these
    # questions are ablations, each with its own row (docs/validation.md, "Departures from the
    # papers, now ablations")
    "metaqa_sgr_either_way_fallback": (METAQA, "sgr", ["ablation=sgr_schema_either_way_fallback", *METAQA_SGR]),
    "ddxplus_logoskg_dx_fuzzy_pick": (DDX, "logoskg_dx", ["ablation=dx_round2_fuzzy_pick"]),
    "hotpotqa_subqrag_require_grounded": (HOTPOT, "subqrag", ["ablation=subqrag_require_grounded"]),
    # not chosen on questions, but the rule before issue 29's held-out run (T_used_i after a fallback)
    "hotpotqa_subqrag_memory_answer_named": (HOTPOT, "subqrag", ["ablation=subqrag_memory_answer_named"]),
    # not chosen on questions either: the fallback's extraction read 2 of its 3 passages before
    # issue 57 (every SubQRAG row measured before then ran this way); the paper extracts from all
    "hotpotqa_subqrag_extract_top2": (HOTPOT, "subqrag", ["ablation=subqrag_extract_top2"]),
    # the paper tables' own ablations the model can exercise (reported on the held-out split, each
    # beside its full method with the paired difference): SubQRAG Table 2, SGR Table 2 / Fig. 2-3,
    # ReKnoS forward-only and no few-shot
    "hotpotqa_subqrag_no_decomposition": (HOTPOT, "subqrag", ["ablation=subqrag_no_decomposition"]),
    "hotpotqa_subqrag_no_rewriting": (HOTPOT, "subqrag", ["ablation=subqrag_no_rewriting"]),
    "hotpotqa_subqrag_no_update": (HOTPOT, "subqrag", ["ablation=subqrag_no_update"]),
    "metaqa_sgr_no_schema": (METAQA, "sgr", ["ablation=sgr_no_schema", *METAQA_SGR]),
    # Table 2's one-factor comparator for "Without Schema" (issue 72): the dataset's topics as V_q,
    # the schema kept, so no_schema against it reads the schema's effect with V_q held fixed
    "metaqa_sgr_dataset_topics": (METAQA, "sgr", ["ablation=sgr_dataset_topics", *METAQA_SGR]),
    "metaqa_sgr_no_refine": (METAQA, "sgr", ["ablation=sgr_no_refine", *METAQA_SGR]),
    "metaqa_sgr_no_cypher": (METAQA, "sgr", ["ablation=sgr_no_cypher", *METAQA_SGR]),
    "metaqa_reknos_forward_only": (METAQA, "reknos", ["ablation=reknos_forward_only"]),
    "metaqa_reknos_no_fewshot": (METAQA, "reknos", ["ablation=reknos_no_fewshot"]),
    # the papers' KGQA datasets on the Freebase slice (ToG, ReKnoS, SGR evaluate CWQ and WebQSP on
    # full Freebase; the slice holds a part of it). `*_retrieval_only` makes no LLM call: its
    # answer_coverage is the slice's ceiling on those questions (what k-hop retrieval can reach)
    "cwq_retrieval_only": (CWQ, "retrieval_only", []),
    "webqsp_retrieval_only": (WEBQSP, "retrieval_only", []),
    "cwq_io": (CWQ, "io", []),
    "cwq_rag": (CWQ, "rag", []),
    "webqsp_io": (WEBQSP, "io", []),
    "webqsp_rag": (WEBQSP, "rag", []),
    # SGR's Cypher prompt lists the relationship types of the topic's k-hop subgraph; on Freebase
    # that list reached 8,198 prompt tokens on a held-out WebQSP question (WebQTest-1669), past the
    # route's 4,096, so these rows open Qwen2.5's own 32,768-token window (llm.n_ctx only sizes the
    # llama.cpp context; it is not in the call-cache key)
    "cwq_sgr": (CWQ, "sgr", [FULL_WINDOW]),
    "webqsp_sgr": (WEBQSP, "sgr", [FULL_WINDOW]),
    "cwq_reknos": (CWQ, "reknos", []),
    "webqsp_reknos": (WEBQSP, "reknos", []),
    "cwq_tog": (CWQ, "tog", []),
    "webqsp_tog": (WEBQSP, "tog", []),
    "musique_io": (MUSIQUE, "io", []),
    "musique_rag_text": (MUSIQUE, "rag_text", []),
    "musique_subqrag": (MUSIQUE, "subqrag", []),
    "twowiki_io": (TWOWIKI, "io", []),
    "twowiki_rag_text": (TWOWIKI, "rag_text", []),
    "twowiki_subqrag": (TWOWIKI, "subqrag", []),
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
ROUTES = {"transformers": (["llm.route=transformers"], ""), "llamacpp": (["llm.route=llamacpp", "llm.n_ctx=4096"], "_llamacpp")}

#: the two named question splits of every dataset sample (conf/config.yaml `questions`):
#: dev = the first 20 questions, the only ones prompts and settings were (and are) chosen on;
#: heldout = N questions drawn with HELDOUT_SEED from the rest, never looked at while tuning
SPLITS = ("dev", "heldout")

DEV_SIZE = 20

HELDOUT_SEED = 2026


def tag(split: str, n: int, route: str, skip: int = 0) -> str:
    """The name of a (split, N, route) table: its run-dir folder and its JSON file's stem suffix.
    The dev rows keep the names they were committed under (``n20``, ``n20_llamacpp``); a fresh
    held-out draw that skips the first ``skip`` questions of the order is ``heldout_n<N>_skip<K>``."""
    return (f"n{n}" if split == "dev" else f"heldout_n{n}") + (f"_skip{skip}" if skip else "") + ROUTES[route][1]


def command(row: str, n: int, cache: str, workers: int = 8, threads: int = 2, route: str = "transformers",
            split: str = "dev", skip: int = 0) -> list[str]:
    """One row's run. ``workers`` concurrent examples share one model through the cross-example
    batcher (kgreason/llm/batching.py); greedy replies may round slightly differently in a batch, and
    the call cache does not key on workers or threads, so sittings with other values replay.
    ``split=dev`` answers the first N questions of the sample (N <= 20: the dev split);
    ``split=heldout`` answers the held-out split's N questions (``questions.split=heldout``)."""
    data, reasoner, extra = ROWS[row]
    over, _ = ROUTES[route]
    if route != "llamacpp":  # llm.n_ctx sizes the llama.cpp context only
        extra = [x for x in extra if not x.startswith("llm.n_ctx=")]
    mine = {x.split("=", 1)[0] for x in extra}
    over = [x for x in over if x.split("=", 1)[0] not in mine]  # a row's own value wins, once
    pick = [f"dataset.limit={n}"] if split == "dev" else \
        ["questions.split=heldout", f"questions.dev_size={DEV_SIZE}", f"questions.heldout_n={n}",
         f"questions.seed={HELDOUT_SEED}", *([f"questions.heldout_skip={skip}"] if skip else [])]
    return [sys.executable, "-m", "kgreason", f"reasoner={reasoner}", *data, *COMMON, *over,
            f"llm.n_threads={threads}", f"example_workers={1 if reasoner in SEQUENTIAL else workers}", *extra,
            *pick, f"llm_cache.dir={cache}", f"hydra.run.dir=outputs/validation/{tag(split, n, route, skip)}/{row}"]


def shown_command(cmd: list[str], cache: str) -> str:
    """The row's command as stored in the committed JSON: no path of this machine in it. The data
    directory is the documented relative default (``../shared/data`` from the clone's root; set
    ``KGREASON_DATA`` to yours), the call cache is ``~/.cache/kgreason/validation`` when it is the
    default, else ``<cache>``."""
    text = shlex.join(cmd[1:])
    default = os.path.expanduser(places.DEFAULT_CACHE)
    for arg in cmd:  # the cache as it appears in the command (quoted when it holds a space)
        if arg.startswith("llm_cache.dir="):
            shown_cache = places.DEFAULT_CACHE if os.path.abspath(cache) == os.path.abspath(default) else "<cache>"
            text = text.replace(shlex.quote(arg), f"llm_cache.dir={shown_cache}")
    return "KGREASON_DATA=../shared/data python " + text


KEY_METRICS = {"metaqa": ["hits_at_1", "answer_set_f1", "answer_coverage"], "hotpotqa": ["em", "f1"],
               "cwq": ["hits_at_1", "answer_set_f1", "answer_coverage"],
               "webqsp": ["hits_at_1", "answer_set_f1", "answer_coverage"],
               "musique": ["em", "f1"], "twowiki": ["em", "f1"],
               "ddxplus": ["hits_at_1", "dx_f1", "dx_baseline_f1", "dx_round1_f1", "dx_round2_f1"]}


#: per-question counts kept in a row beside its key metrics (not scores: no interval, no pairing)
COUNTS_PER_QUESTION = ["triples_written"]

#: metrics of one row compared question by question (later stage − earlier stage): LogosKG-Dx's
#: rounds against its no-KG baseline and against each other (logoskg.txt Table 5's comparison)
WITHIN_ROW = {"ddxplus_logoskg_dx": [("dx_round1_f1", "dx_baseline_f1"), ("dx_round2_f1", "dx_baseline_f1"),
                                     ("dx_round2_f1", "dx_round1_f1")]}


#: the row each row's paired difference is taken against: an ablation against its full method,
#: a method against IO on the same dataset
PAIRED_WITH = {row: f"{row.split('_')[0]}_{ROWS[row][1]}" for row, (_, _, extra) in ROWS.items()
               if any(x.startswith("ablation=") for x in extra)}
# one factor at a time (issue 72): every SGR ablation row, "Without Schema" included (it keeps the
# model's own Eq. 2 V_q since ee10034), is paired with full SGR; tests/test_validation_runner.py
# checks that each ablation row differs from its baseline by its own preset only


def baseline_of(row: str) -> str | None:
    if row in PAIRED_WITH:
        return PAIRED_WITH[row]
    ds = row.split("_")[0]
    if row == f"{ds}_io" or ds == "ddxplus" or ROWS.get(row, ([], "", []))[1] == "retrieval_only":
        return None
    return f"{ds}_io"


#: the README's method table: (reasoner, the paper or source it follows, its validation row, the
#: dataset overrides of the row's command, the metric shown, that metric's name in the table)
METHODS = [
    ("io", "baseline: the question alone", "metaqa_io", "dataset=metaqa kg=metaqa", "hits_at_1", "Hits@1"),
    ("cot", "baseline: chain of thought", "metaqa_cot", "dataset=metaqa kg=metaqa", "hits_at_1", "Hits@1"),
    ("rag", "baseline: k-hop facts ranked by MiniLM", "metaqa_rag", "dataset=metaqa kg=metaqa", "hits_at_1",
     "Hits@1"),
    ("tog", "Think-on-Graph (IDEA-FinAI/ToG release)", "metaqa_tog", "dataset=metaqa kg=metaqa", "hits_at_1",
     "Hits@1"),
    ("reknos", "ReKnoS (reknos.txt)", "metaqa_reknos", "dataset=metaqa kg=metaqa", "hits_at_1", "Hits@1"),
    ("sgr", "SGR (sgr.txt)", "metaqa_sgr", "dataset=metaqa kg=metaqa", "hits_at_1", "Hits@1"),
    ("rag_text", "baseline: top passages by MiniLM", "hotpotqa_rag_text", "dataset=hotpotqa", "em", "EM"),
    ("subqrag", "SubQRAG (subqrag.txt)", "hotpotqa_subqrag", "dataset=hotpotqa", "em", "EM"),
    ("logoskg_dx", "LogosKG diagnosis study (logoskg.txt)", "ddxplus_logoskg_dx", "dataset=ddxplus kg=ddxplus",
     "dx_round2_f1", "Round 2 dx F1"),
    ("kg_dx", "KG-only diagnosis ranking (no LLM)", "ddxplus_kg_dx", "dataset=ddxplus kg=ddxplus", "hits_at_1",
     "Hits@1"),
]

#: rows whose score is not a method's: what they measure instead (the README says so beside them)
NOT_A_METHOD_SCORE = {
    "ddxplus_kg_dx": ("a structural ceiling, not a method score: every gold pathology is one hop from its "
                      "evidences in DDXPlus's own KG, so ranking the one-hop neighbours by KG evidence finds it"),
}
