"""Fact ranking at question time: per-text encoding (the former path) against the KG embedding
store (kgreason/storage/embedstore.py), side by side in one process (issue 42; docs/retrieval.md).

``python -m kgreason.bench rank [--datasets cwq metaqa] [--questions 20] [--before 3] [--out FILE]``

For each dataset (CWQ over the Freebase slice; MetaQA 2-hop over its KB), with a scripted LLM
(no model time):

* **rag's non-LLM time per linked question**, ``before`` (``embedder.kg_store: null``: every
  candidate fact embedded at question time, empty text cache, as the first run on a machine)
  and ``after`` (the float32 store, built once beforehand; the question is the only text
  embedded). Both run on the full KG with its retriever; the after path reads a store of the
  full KG's shape whose rows are filled, by the build's own forward pass, at the triples these
  questions rank (embedding all 310k triples here would take the bench past an hour on a
  shared 2-core machine). The rankings of the two paths are compared (top-k identical, order
  identical where scores do not tie to 1e-5) and the float16 store's top-k overlap is reported.
* **the store build**: the full KG's store size (exact) and build time, extrapolated from the
  measured build throughput (``kgreason index kg kg=freebase_slice`` measures it outright).
* **throughput of the forward pass**: texts/s for question-time batches (64, in the order the
  candidates come) and build batches (``build_batch_size``, length-sorted) in float32 and in
  bfloat16 (``embedder.build_precision``: the speed-up and the cosine to the float32 vectors), token lengths (the
  batch pads to its longest text, not to 256), torch's thread count, and the per-text cost of the
  former one-``.npy``-file-per-text cache against the SQLite text cache.
* **ranking time against the number of candidates** (10^2 … 10^6): gather + matrix-vector
  product + top-k on a store the size of FB15k-237's, and the floor: the bytes of embeddings
  read per question against the measured memory bandwidth.

Timings depend on the machine and its load; the JSON records the torch thread count and the
load average at the start.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from kgreason.paths import resolve as resolve_path


def _kg_and_questions(name: str, data: Path, cache: Path, n: int):
    from kgreason.kg.compiled import load_cached

    if name == "cwq":
        from kgreason.data.kgqa import load_cwq

        fb = data / "freebase_fb15k237"
        kg = load_cached("kgreason.kg.loaders.load_freebase_slice",
                         [str(fb / f"{s}.txt.gz") for s in ("train", "valid", "test")], str(cache / "kg"),
                         names=str(fb / "entity2text.txt"), aliases=str(fb / "FB15k_mid2name.txt"),
                         mid_style="dot", relation_style="dot", strict_names=True)
        examples = list(load_cwq(path=str(data / "cwq" / "tog_cwq.json")))
        hops = 2
    elif name == "metaqa":
        from kgreason.data.metaqa import load_metaqa

        kg = load_cached("kgreason.kg.loaders.load_metaqa_kb", str(data / "metaqa" / "kb.txt"), str(cache / "kg"))
        examples = list(load_metaqa(path=str(data / "metaqa" / "2hop_test_sample1000.jsonl")))
        hops = 2
    else:
        raise SystemExit(f"bench rank: unknown dataset {name!r}; expected cwq or metaqa")
    from kgreason.kg.linking import link_example

    linked = []
    for ex in examples:
        if len(linked) >= n:
            break
        if link_example(kg, ex).ids:
            linked.append(ex)
    return kg, linked, hops


def _cut(kg, tids: np.ndarray):
    """``kg`` with only the triples ``tids`` (same entity and relation ids, names and labels)."""
    from kgreason.kg.store import KG

    return KG(kg.heads[tids], kg.rels[tids], kg.tails[tids], kg.entity_names, kg.relation_names,
              aliases=kg.aliases, labels=kg.labels, name=f"{kg.name}-cut", validate=False)


def _rag(kg, emb, hops: int):
    from kgreason.llm.scripted import ScriptedLLM
    from kgreason.reasoners.rag import RAG
    from kgreason.retrieval.scipy_engine import ScipyRetriever

    retr = ScipyRetriever(kg, semantics="within", direction="both", max_paths=2000)
    llm = ScriptedLLM(default="Answer: none")
    return RAG(kg=kg, retriever=retr, llm=llm, embedder=emb, hops=hops, top_k=30)


def _kept(pred) -> list[tuple[str, float]]:
    return [tuple(x) for x in next(s for s in pred.trace if s.kind == "rank").data["kept"]]


def _compare(a: list, b: list, tol: float = 1e-5) -> dict:
    same_set = {t for t, _ in a} == {t for t, _ in b}
    order_ok = len(a) == len(b) and all(ta == tb or abs(sa - sb) < tol for (ta, sa), (tb, sb) in zip(a, b))
    return {"same_topk": same_set, "same_order_where_untied": order_ok,
            "overlap": len({t for t, _ in a} & {t for t, _ in b}) / max(len({t for t, _ in a}), 1)}


def bench_dataset(name: str, data: Path, work: Path, n: int, n_before: int, model) -> dict:
    """Before/after on the full KG and its retriever. The after path reads a store of the KG's
    full shape whose rows are filled (by the build's own forward pass) at the triples these
    questions rank; the full build's time is extrapolated from the measured build throughput."""
    from kgreason.embed import Embedder
    from kgreason.storage.embedstore import KGStore, form_texts, texts_digest, top_k  # noqa: F401

    t0 = time.perf_counter()
    kg, qs, hops = _kg_and_questions(name, data, work, n)
    load_s = time.perf_counter() - t0

    def emb(**kw):
        e = Embedder(**kw)
        e._model = model  # one loaded model for every variant (load time is not ranking time)
        return e

    probe = _rag(kg, emb(kg_store=None), hops)
    need: list[np.ndarray] = []
    for q in qs:
        _, sub, _ = probe.retrieve(q)
        need.append(probe.candidate_triples(sub)[0])
    index = KGStore("triple", np.zeros((kg.n_triples, 1), np.float32), "", None, built_here=False, build_s=0)
    rows = np.unique(np.concatenate([index.triple_rows(kg, c) for c in need])) if need else np.zeros(0, np.int64)
    rows = rows[rows >= 0]
    e_build = emb()
    t = time.perf_counter()
    vecs = np.zeros((len(rows), 384), np.float32)
    order = sorted(range(len(rows)), key=lambda i: len(kg.verbalise(kg.triples[rows[i]])))
    texts = [kg.verbalise(kg.triples[rows[i]]) for i in order]
    for s in range(0, len(texts), 2048):
        vecs[np.asarray(order[s:s + 2048])] = e_build._forward_build(texts[s:s + 2048])
    fill_s = time.perf_counter() - t
    out: dict = {"dataset": name, "kg": kg.name, "kg_triples": int(kg.n_triples), "questions_linked": len(qs),
                 "hops": hops, "kg_load_s": round(load_s, 2), "store_rows_filled": int(len(rows)),
                 "store_fill_s": round(fill_s, 1), "build_texts_per_s": round(len(rows) / fill_s, 1) if len(rows) else None}
    # ---- before: per-text encoding, empty cache (every first question pays)
    before = _rag(kg, emb(kg_store=None), hops)
    b_times, b_kept = [], []
    for q in qs[:n_before]:
        t = time.perf_counter()
        b_kept.append(_kept(before.answer(q)))
        b_times.append(time.perf_counter() - t)
    # ---- after: the store (float32, then float16), every question
    results = {}
    for dtype in ("float32", "float16"):
        mat = np.zeros((kg.n_triples, 384), dtype=dtype)
        mat[rows] = vecs.astype(dtype)
        e = emb(kg_store=dtype)
        after = _rag(kg, e, hops)
        after._store = KGStore("triple", mat, f"bench-{dtype}", None, built_here=True, build_s=fill_s)
        a_times, a_kept = [], []
        for q in qs:
            t = time.perf_counter()
            a_kept.append(_kept(after.answer(q)))
            a_times.append(time.perf_counter() - t)
        cmp = [_compare(x, y) for x, y in zip(b_kept, a_kept)]
        tm = e.timing()
        results[dtype] = {
            "store_bytes_full_kg": int(mat.nbytes),
            "non_llm_s_per_question": round(float(np.mean(a_times)), 5),
            "non_llm_s_per_question_on_the_before_questions": round(float(np.mean(a_times[:n_before])), 5)
            if n_before else None,
            "rank_ms_per_question": tm["rank_ms_per_call"], "candidates_per_question": tm["rank_candidates_per_call"],
            "texts_embedded_at_question_time": tm["texts_forward"],
            "rankings_vs_before": {"questions": len(cmp), "same_topk": sum(c["same_topk"] for c in cmp),
                                   "same_order_where_untied": sum(c["same_order_where_untied"] for c in cmp),
                                   "mean_topk_overlap": round(float(np.mean([c["overlap"] for c in cmp])), 4)
                                   if cmp else None}}
        del mat
    bt = float(np.mean(b_times)) if b_times else None
    out["before"] = {"non_llm_s_per_question": round(bt, 3) if bt else None, "questions": len(b_times),
                     "texts_embedded_per_question": round(float(np.mean([len(c) for c in need[:n_before]])), 1)
                     if need else None}
    out["after"] = results
    if bt:
        out["speedup_non_llm_per_question"] = round(
            bt / results["float32"]["non_llm_s_per_question_on_the_before_questions"], 1)
    out["store_full_kg"] = {"rows": int(kg.n_triples), "dim": 384,
                            "bytes_float32": int(kg.n_triples) * 384 * 4, "bytes_float16": int(kg.n_triples) * 384 * 2,
                            "build_s_extrapolated_from_fill": round(kg.n_triples / (len(rows) / fill_s), 0)
                            if len(rows) else None}
    return out


def throughput(kg_name: str, data: Path, work: Path, model, n: int) -> dict:
    """Forward-pass throughput on ``n`` verbalised FB15k-237 triples, and the per-text file cost."""
    import torch

    from kgreason.embed import Embedder
    from kgreason.storage.textcache import TextCache
    from kgreason.storage.embedstore import form_texts

    kg, _, _ = _kg_and_questions("cwq", data, work, 0)
    rng = np.random.default_rng(0)
    texts = form_texts(kg, "triple")
    sample = [texts[i] for i in rng.choice(len(texts), n, replace=False)]
    tok = model.tokenizer(sample)["input_ids"]
    lens = np.array([len(x) for x in tok])
    out = {"torch_threads": torch.get_num_threads(), "texts": n,
           "tokens_mean": round(float(lens.mean()), 1), "tokens_max": int(lens.max())}
    t = time.perf_counter()
    for s in range(0, n, 100):  # sentence-transformers sorts within one call; per-question calls of ~100 texts
        model.encode(sample[s:s + 100], batch_size=64, normalize_embeddings=True, show_progress_bar=False)
    out["question_time_batch64_unsorted_chunks_texts_per_s"] = round(n / (time.perf_counter() - t), 1)
    # the store build's own forward pass, length-sorted, in each build precision (side by side)
    xs = sorted(sample, key=len)
    vecs = {}
    for precision in ("float32", "bfloat16"):
        e = Embedder(build_precision=precision)
        e._model = model
        out["build_batch_size"] = e.build_batch_size
        t = time.perf_counter()
        vecs[precision] = e._forward_build(xs)
        out[f"build_{precision}_length_sorted_texts_per_s"] = round(n / (time.perf_counter() - t), 1)
    cos = (vecs["float32"] * vecs["bfloat16"]).sum(axis=1)
    out["bfloat16_build_cosine_to_float32"] = {"min": round(float(cos.min()), 6), "mean": round(float(cos.mean()), 6)}
    out["bfloat16_build_speedup"] = round(out["build_bfloat16_length_sorted_texts_per_s"]
                                          / out["build_float32_length_sorted_texts_per_s"], 2)
    # the former cache: one .npy per text (write + os.replace, then read back) vs one SQLite file
    vecs = np.random.default_rng(1).standard_normal((n, 384)).astype(np.float32)
    d = Path(tempfile.mkdtemp(dir=work))
    t = time.perf_counter()
    for i, v in enumerate(vecs):
        p = d / f"{i % 256:02x}" / f"{i}.npy"
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(p.name + ".tmp.npy")
        np.save(tmp, v)
        os.replace(tmp, p)
    w = time.perf_counter() - t
    t = time.perf_counter()
    for i in range(n):
        np.load(d / f"{i % 256:02x}" / f"{i}.npy")
    r = time.perf_counter() - t
    c = TextCache(Path(tempfile.mkdtemp(dir=work)) / "t.sqlite")
    keys = [Embedder._key(f"text {i}") for i in range(n)]
    t = time.perf_counter()
    c.put(list(zip(keys, vecs)))
    sw = time.perf_counter() - t
    t = time.perf_counter()
    c.get(keys)
    sr = time.perf_counter() - t
    c.close()
    out["npy_per_text_write_ms"] = round(1000 * w / n, 4)
    out["npy_per_text_read_ms"] = round(1000 * r / n, 4)
    out["sqlite_per_text_write_ms"] = round(1000 * sw / n, 4)
    out["sqlite_per_text_read_ms"] = round(1000 * sr / n, 4)
    return out


def precision_overlap(name: str, data: Path, work: Path, n: int, model, store_dir: Path) -> dict:
    """rag's top-30 over the whole KG's store built in float32 against the one built in bfloat16
    (``embedder.build_precision``), on ``n`` linked questions; both stores are opened from
    ``store_dir`` (built there first if absent: the full KG, so minutes). Also the whole-KG top-30
    of each question (every triple ranked), the stricter comparison."""
    from kgreason.embed import Embedder
    from kgreason.storage.embedstore import open_store

    kg, qs, hops = _kg_and_questions(name, data, work, n)
    out: dict = {"dataset": name, "kg_triples": int(kg.n_triples), "questions_linked": len(qs), "k": 30}
    rags, mats = {}, {}
    for precision in ("float32", "bfloat16"):
        e = Embedder(kg_store="float32", build_precision=precision, cache_dir=str(work / f"texts-{precision}"),
                     store_dir=str(store_dir))
        e._model = model
        st = open_store(kg, "triple", e, store_dir, "float32")
        out[f"{precision}_store"] = {"built_here": st.built_here, "build_s": round(st.build_s, 1), "key": st.key[:16]}
        mats[precision] = np.asarray(st.matrix)
        rags[precision] = _rag(kg, e, hops)
        rags[precision]._store = st
    cmp, whole = [], []
    for q in qs:
        cmp.append(_compare(_kept(rags["float32"].answer(q)), _kept(rags["bfloat16"].answer(q))))
        v = rags["float32"].embedder.encode([q.question])[0]
        a, b = (set(np.argpartition(-(mats[p] @ v), 30)[:30].tolist()) for p in ("float32", "bfloat16"))
        whole.append(len(a & b) / 30)
    out["rag_top30"] = {"same_topk": sum(c["same_topk"] for c in cmp), "questions": len(cmp),
                        "mean_overlap": round(float(np.mean([c["overlap"] for c in cmp])), 4) if cmp else None,
                        "min_overlap": round(float(min(c["overlap"] for c in cmp)), 4) if cmp else None}
    out["whole_kg_top30"] = {"mean_overlap": round(float(np.mean(whole)), 4) if whole else None,
                             "min_overlap": round(float(min(whole)), 4) if whole else None}
    return out


def ranking_curve(rows: int, sizes: list[int], reps: int = 3) -> dict:
    """Gather + matvec + top-30 over ``m`` random candidate rows of a ``rows``-row store."""
    from kgreason.storage.embedstore import KGStore, top_k

    rng = np.random.default_rng(0)
    mat = rng.standard_normal((rows, 384), dtype=np.float32)
    mat /= np.linalg.norm(mat, axis=1, keepdims=True)
    q = mat[0].copy()
    t = time.perf_counter()
    big = np.empty_like(mat)
    for _ in range(3):
        np.copyto(big, mat)
    bw = 3 * 2 * mat.nbytes / (time.perf_counter() - t)  # read + write
    del big
    out = {"store_rows": rows, "memory_bandwidth_GBps_copy": round(bw / 1e9, 2), "points": []}
    for dtype in ("float32", "float16"):
        st = KGStore("triple", mat.astype(dtype), "", None, built_here=False, build_s=0)
        for m in sizes:
            ids = rng.integers(0, rows, size=m)
            best = float("inf")
            for _ in range(reps):
                t = time.perf_counter()
                sims = st.scores(q, ids)
                top_k(sims, 30)
                best = min(best, time.perf_counter() - t)
            read = m * 384 * np.dtype(dtype).itemsize
            out["points"].append({"dtype": dtype, "candidates": m, "rank_ms": round(1000 * best, 3),
                                  "bytes_read": read, "floor_ms": round(1000 * read / bw * 2, 3)})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kgreason bench rank", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=None, help="data root (default: paths.data)")
    ap.add_argument("--datasets", nargs="+", default=["cwq", "metaqa"])
    ap.add_argument("--questions", type=int, default=20, help="linked questions per dataset (after)")
    ap.add_argument("--before", type=int, default=3, help="of those, answered on the former path too")
    ap.add_argument("--throughput-texts", type=int, default=1024)
    ap.add_argument("--sizes", nargs="+", type=int, default=[100, 1000, 10000, 100000, 1000000])
    ap.add_argument("--store-rows", type=int, default=310116, help="rows of the synthetic store (FB15k-237's)")
    ap.add_argument("--precision-overlap", type=int, default=0, metavar="N",
                    help="also compare rag's top-30 with the float32-built and the bfloat16-built store of the "
                         "Freebase slice on N linked CWQ questions (builds a missing store: minutes)")
    ap.add_argument("--store-dir", default=None, help="where --precision-overlap finds or builds the stores "
                                                       "(default: the embedder's, paths.cache/embeddings)")
    ap.add_argument("--out", default="outputs/bench/rank.json")
    a = ap.parse_args(argv)
    data = Path(a.data or resolve_path("data"))
    from kgreason.embed import Embedder

    model = Embedder()._load()
    work = Path(tempfile.mkdtemp(prefix="bench_rank_"))
    res: dict = {"bench": "rank", "load_avg_at_start": list(os.getloadavg()), "cpus": os.cpu_count(),
                 "datasets": []}
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    def save(section: str) -> None:  # after each section, so a long run keeps what it measured
        print(f"{section}: {json.dumps(res[section] if section in res else res['datasets'][-1])}", flush=True)
        out.write_text(json.dumps(res, indent=1))

    for name in a.datasets if a.questions > 0 else ():
        res["datasets"].append(bench_dataset(name, data, work, a.questions, a.before, model))
        save(name)
    if a.throughput_texts > 0:
        res["throughput"] = throughput("cwq", data, work, model, a.throughput_texts)
        fb = next((d for d in res["datasets"] if d["dataset"] == "cwq"), None)
        if fb:
            for precision in ("float32", "bfloat16"):
                rate = res["throughput"][f"build_{precision}_length_sorted_texts_per_s"]
                fb["store_full_kg"][f"build_s_{precision}_extrapolated_from_throughput"] = round(fb["kg_triples"] / rate, 0)
        save("throughput")
    if a.precision_overlap > 0:
        store_dir = Path(a.store_dir) if a.store_dir else Path(resolve_path("cache")) / "embeddings"
        res["precision_overlap"] = precision_overlap("cwq", data, work, a.precision_overlap, model, store_dir)
        save("precision_overlap")
    res["ranking_curve"] = ranking_curve(a.store_rows, a.sizes)
    save("ranking_curve")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
