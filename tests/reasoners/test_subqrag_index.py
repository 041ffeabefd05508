"""Offline indexing (subqrag.txt §2.1): resumable per-passage extraction, dedupe, provenance."""

from __future__ import annotations

import json

import pytest

from kgreason.reasoners.subqrag_index import grounded, index_corpus, load_index, parse_triples
from kgreason.llm.scripted import ScriptedLLM

PASSAGES = [
    ("p1", "Alpha", "Alpha is a film directed by Bob Stone. Alpha stars Carol Day."),
    ("p2", "Bob Stone", "Bob Stone was born in Riverton. Bob Stone directed Alpha."),
    ("p3", "Carol Day", "Carol Day was born in Riverton."),
    ("p4", "Riverton", "Riverton is a city in Eastland."),
]
REPLIES = {
    "Alpha": '[["Alpha", "directed by", "Bob Stone"], ["Alpha", "starring", "Carol Day"], ["Alpha", "set in", "Mars"]]',
    "Bob Stone": '```json\n[["Bob Stone", "born in", "Riverton"], ["alpha", "Directed  by", "bob stone"]]\n```',
    "Carol Day": '[{"head": "Carol Day", "relation": "born in", "tail": "Riverton"}, ["x", "y"]]',
    "Riverton": '[["Riverton", "contained by", "Eastland"]]',
}


class FailingLLM(ScriptedLLM):
    """Scripted extraction that raises after ``fail_after`` calls (a crash mid-run)."""

    def __init__(self, fail_after: int | None = None) -> None:
        super().__init__(rules=[{"pattern": f"Title: {t}\n", "reply": r} for t, r in REPLIES.items()], model="fake")
        self.fail_after = fail_after

    def generate(self, requests):
        if self.fail_after is not None and len(self.calls) >= self.fail_after:
            raise RuntimeError("connection lost")
        return super().generate(requests)


def test_parse_and_validate():
    t, bad = parse_triples('[["A", "r", "B"], ["A", "", "B"], ["A", "r"], ["Same", "r", "same"]]')
    assert t == [("A", "r", "B")] and bad == 3
    assert grounded(("Alpha", "x", "Bob Stone"), "Alpha is by Bob  Stone.".replace("  ", " "))
    assert not grounded(("Alpha", "x", "Mars"), "Alpha is by Bob Stone.")


def test_index_dedupes_with_provenance_and_cost(tmp_path):
    llm = FailingLLM()
    res = index_corpus(PASSAGES, llm, tmp_path)
    assert len(llm.calls) == 4 and res.calls_made == 4
    assert res.triples == [("Alpha", "directed by", "Bob Stone"), ("Alpha", "starring", "Carol Day"),
                           ("Bob Stone", "born in", "Riverton"), ("Carol Day", "born in", "Riverton"),
                           ("Riverton", "contained by", "Eastland")]
    assert res.provenance[("Alpha", "directed by", "Bob Stone")] == ["p1", "p2"]  # case/space dupes merged
    # each passage's own extraction, as the graph's canonical triples (what the online update reads)
    assert res.by_passage["p2"] == [("Bob Stone", "born in", "Riverton"), ("Alpha", "directed by", "Bob Stone")]
    assert res.by_passage["p1"] == [("Alpha", "directed by", "Bob Stone"), ("Alpha", "starring", "Carol Day")]
    assert res.rejected == 2  # ungrounded "Mars" + the 2-item list
    assert res.kg.n_triples == 5 and res.kg.n_entities == 5
    kg, prov = load_index(res.directory)
    assert kg.n_triples == 5 and prov == res.provenance
    cost = json.loads((res.directory / "cost.json").read_text())
    assert cost["calls"] == 4 and cost["prompt_tokens"] == sum(sum(len(m.content.split()) for m in c.messages) for c in llm.calls)


def test_resume_after_interruption_repeats_no_call(tmp_path):
    crash = FailingLLM(fail_after=2)
    with pytest.raises(RuntimeError, match="connection lost"):
        index_corpus(PASSAGES, crash, tmp_path, batch_size=1)
    assert len(crash.calls) == 2
    resumed = FailingLLM()
    res = index_corpus(PASSAGES, resumed, tmp_path)
    titles = [c.messages[-1].content.split("Title: ")[1].split("\n")[0] for c in resumed.calls]
    assert titles == ["Carol Day", "Riverton"]  # only the unfinished passages
    assert res.passages_cached == 2 and res.calls_made == 2
    assert res.usage.calls == 4  # cost covers both invocations
    full = index_corpus(PASSAGES, FailingLLM(), tmp_path / "fresh")
    assert res.triples == full.triples and len(set(res.triples)) == len(res.triples)
    # a third run is fully cached: zero calls
    again = FailingLLM(fail_after=0)
    assert index_corpus(PASSAGES, again, tmp_path).calls_made == 0


def test_passages_are_extracted_in_batches_with_the_same_result(tmp_path):
    """Issue 21: a local model generates a batch of requests in one left-padded pass, so the
    offline index sends ``batch_size`` passages per generate call (before: one call each, which
    made a 20-question HotpotQA index (~200 passages) a multi-hour job on 2 CPU cores)."""
    sizes = []

    class Recording(FailingLLM):
        def generate(self, requests):
            sizes.append(len(requests))
            return super().generate(requests)

    batched = index_corpus(PASSAGES, Recording(), tmp_path / "b", batch_size=3)
    assert sizes == [3, 1] and batched.calls_made == 4
    single = index_corpus(PASSAGES, FailingLLM(), tmp_path / "s", batch_size=1)
    assert (batched.triples, batched.provenance, batched.rejected) == (single.triples, single.provenance, single.rejected)
    rows = lambda d: [json.loads(x)["id"] for x in (d / "extractions.jsonl").read_text().splitlines()]  # noqa: E731
    assert rows(batched.directory) == rows(single.directory) == ["p1", "p2", "p3", "p4"]


def test_duplicate_ids_rejected(tmp_path):
    with pytest.raises(ValueError, match="unique"):
        index_corpus([("a", "t", "x"), ("a", "u", "y")], FailingLLM(), tmp_path)


def test_a_triple_list_cut_off_at_the_token_limit_keeps_its_complete_items():
    """Qwen2.5-Coder-1.5B's extraction reply for the passage *Shirley Temple* ran into its 512
    tokens (outputs/validation/n3/hotpotqa_subqrag, shortened): the two whole triples are kept,
    the cut one is rejected; before, the whole reply was unreadable and nothing was written back."""
    reply = ('[["Shirley Temple", "born in", "April 23, 1928"], ["Shirley Temple", "died in", '
             '"February 10, 2014"], ["Shirl')
    assert parse_triples(reply) == ([("Shirley Temple", "born in", "April 23, 1928"),
                                     ("Shirley Temple", "died in", "February 10, 2014")], 1)
    assert parse_triples('[["Shirl') == ([], 1)
    # cut right after a comma (the SFWA passage looped on one triple until the limit): the cut-off
    # still counts as one rejection, and the repeats are parsed (the graph de-duplicates them)
    assert parse_triples('[["SFWA", "presents", "Andre Norton Award"], ["SFWA", "presents", "Andre Norton Award"],') == (
        [("SFWA", "presents", "Andre Norton Award")] * 2, 1)
    assert parse_triples("[]") == ([], 0) and parse_triples("no list") == ([], 1)


def test_an_index_is_keyed_by_the_model_variant_that_built_it(tmp_path):
    """The config names one model for several variants (bfloat16, float32 ``…@float32``, llama.cpp
    ``…@llamacpp``); a run's LazyLLM reports the config's name until built. The index key uses the
    built variant's name, so one variant never reads back another's extractions."""
    from kgreason.llm.accounting import MeteredLLM
    from kgreason.llm.lazy import LazyLLM

    def lazy(variant: str):
        cfg = {"_target_": "kgreason.llm.scripted.ScriptedLLM", "model": variant,
               "rules": [{"pattern": f"Title: {t}\n", "reply": r} for t, r in REPLIES.items()]}
        llm = LazyLLM(cfg, None)
        llm.model = "qwen"  # what the config says for every variant
        return MeteredLLM(llm)

    a = index_corpus(PASSAGES, lazy("qwen@llamacpp"), tmp_path)
    b = index_corpus(PASSAGES, lazy("qwen"), tmp_path)
    assert a.directory != b.directory and a.calls_made == b.calls_made == 4
    assert index_corpus(PASSAGES, lazy("qwen@llamacpp"), tmp_path).directory == a.directory


def test_a_quote_left_unescaped_inside_a_string_loses_only_that_string():
    """Qwen2.5-Coder-1.5B (llama.cpp route) on *The Hork-Bajir Chronicles* (outputs/validation/
    n10_llamacpp/hotpotqa_subqrag, shortened): the passage's quotes were copied unescaped, so the
    list does not load. The triples whose three strings are whole are kept, the quote included
    where the passage has it (validation then checks it against the passage); the broken reply
    counts as one rejection. Before, all of them were lost, the *Animorphs* link among them."""
    reply = ('[["The Hork-Bajir Chronicles", "is the second companion book to the", "Animorphs" series"], '
             '["The Hork-Bajir Chronicles", "written by", "K. A. Applegate"], '
             '["The Hork-Bajir Chronicles", "alternating in similar fashion to the", "Megamorphs" books"]]')
    triples, bad = parse_triples(reply)
    assert triples == [("The Hork-Bajir Chronicles", "is the second companion book to the", 'Animorphs" series'),
                       ("The Hork-Bajir Chronicles", "written by", "K. A. Applegate"),
                       ("The Hork-Bajir Chronicles", "alternating in similar fashion to the", 'Megamorphs" books')]
    assert bad == 1
    passage = ('The Hork-Bajir Chronicles is the second companion book to the "Animorphs" series, written by '
               'K. A. Applegate.')
    assert grounded(triples[1], passage) and grounded(triples[0], passage)
    # a reply that is not a list of triples at all stays unreadable
    assert parse_triples('I cannot find "triples" here') == ([], 1)


def test_a_well_formed_reply_whose_every_triple_is_ungrounded_says_so():
    # Seen with Qwen2.5-Coder-1.5B on the HotpotQA passage "Douglas J. Bennet": a valid JSON list
    # whose six triples all spell the head "Douglas Joseph Bennett". The reply still fails (nothing
    # usable), but its message must name the grounding check, not claim the JSON was malformed.
    from kgreason.reasoners.subqrag_index import triple_parser
    passage = "Douglas Joseph Bennet, Jr. was the fifteenth president of Wesleyan University."
    parse = triple_parser("Douglas J. Bennet", passage)
    reply = json.dumps([["Douglas Joseph Bennett", "was the", "fifteenth president of Wesleyan University"]])
    res = parse(reply)
    assert not res.ok and res.value == ([], 1)
    assert "JSON" not in res.error and "Douglas Joseph Bennett" in res.error and "passage" in res.error
    # A reply that is not a triple list at all keeps the old message.
    bad = parse("I cannot extract triples from this passage.")
    assert not bad.ok and "JSON list" in bad.error


# ---------------------------------------------------------------------------- on-disk reliability (issue 57)
class _SlowLLM(FailingLLM):
    """The first indexer: inside its extraction call it waits until the second indexer is waiting
    for the index's lock (its log says so), then answers. It used to wait for the second to start
    and then one second more, which a loaded machine can outlast before the second reaches the
    lock (issue 74: a test that reads another process's state waits for it, with a deadline)."""

    def __init__(self, flags):
        super().__init__()
        self.flags = flags

    def generate(self, requests):
        import time

        (self.flags / "A_extracting").touch()
        log = self.flags / "B.log"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if log.is_file() and "is being built by" in log.read_text(errors="replace"):
                break
            time.sleep(0.05)
        return super().generate(requests)


def _indexer(root, tag):
    """One indexing process: its log and what it paid go to ``root/<tag>.*``."""
    import logging

    logging.basicConfig(filename=str(root / f"{tag}.log"), level=logging.INFO, force=True)
    if tag == "B":
        (root / "B_started").touch()
    llm = _SlowLLM(root) if tag == "A" else FailingLLM()
    res = index_corpus(PASSAGES, llm, root / "index")
    (root / f"{tag}.json").write_text(json.dumps({"calls": len(llm.calls), "made": res.calls_made,
                                                  "cached": res.passages_cached, "triples": len(res.triples)}))


def test_two_processes_indexing_one_corpus_pay_each_extraction_once(tmp_path):
    """Issue 57 M3: two runs indexing one corpus at once (a sweep over SubQRAG settings) each paid
    every extraction call, and extractions.jsonl held every passage twice. The index is locked per
    corpus: the second process waits (its log says for whom) and reads what the first wrote."""
    import multiprocessing as mp
    import time

    ctx = mp.get_context("fork")
    a = ctx.Process(target=_indexer, args=(tmp_path, "A"))
    a.start()
    t0 = time.monotonic()
    while not (tmp_path / "A_extracting").exists():
        assert a.is_alive() and time.monotonic() - t0 < 120
        time.sleep(0.05)
    b = ctx.Process(target=_indexer, args=(tmp_path, "B"))
    b.start()
    a.join(120)
    b.join(120)
    assert a.exitcode == 0 and b.exitcode == 0
    ra, rb = (json.loads((tmp_path / f"{t}.json").read_text()) for t in "AB")
    assert ra["calls"] == 4 and rb["calls"] == 0  # 4 passages, 4 calls in all
    assert rb["cached"] == 4 and rb["triples"] == ra["triples"] == 5
    (log,) = (tmp_path / "index").glob("*/extractions.jsonl")
    ids = [json.loads(line)["id"] for line in log.read_text().splitlines()]
    assert sorted(ids) == ["p1", "p2", "p3", "p4"]  # each passage once
    waited = (tmp_path / "B.log").read_text()
    assert "is being built by pid" in waited and "waiting" in waited


def test_a_torn_last_line_of_the_extraction_log_swallows_no_later_record(tmp_path, caplog):
    """Issue 57 L6: a crash mid-write left a last line without its newline; the next record was
    appended onto it, the joined line could not be read, and that passage was lost (paid again on
    every later run). The torn tail is cut off before anything is appended."""
    crash = FailingLLM(fail_after=2)
    with pytest.raises(RuntimeError):
        index_corpus(PASSAGES, crash, tmp_path, batch_size=1)
    (log,) = tmp_path.glob("*/extractions.jsonl")
    with log.open("a") as f:
        f.write('{"id": "p3", "triples": [["Carol Day", "bo')  # the write a crash stopped
    with caplog.at_level("WARNING", logger="kgreason.reasoners.subqrag_index"):
        res = index_corpus(PASSAGES, FailingLLM(), tmp_path, batch_size=1)
    assert res.calls_made == 2 and "torn" in caplog.text and str(log) in caplog.text
    assert [json.loads(x)["id"] for x in log.read_text().splitlines()] == ["p1", "p2", "p3", "p4"]
    assert index_corpus(PASSAGES, FailingLLM(fail_after=0), tmp_path).calls_made == 0  # nothing lost


def test_a_whole_last_record_without_its_newline_is_kept(tmp_path):
    """L6: a last record written whole but for its newline is kept (given the newline), not redone."""
    index_corpus(PASSAGES[:2], FailingLLM(), tmp_path)
    (log,) = tmp_path.glob("*/extractions.jsonl")
    log.write_bytes(log.read_bytes().rstrip(b"\n"))
    assert index_corpus(PASSAGES[:2], FailingLLM(fail_after=0), tmp_path).calls_made == 0
    assert log.read_bytes().endswith(b"\n") and len(log.read_text().splitlines()) == 2
