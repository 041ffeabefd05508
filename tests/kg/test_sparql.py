"""SPARQL KG source (kgreason/kg/sparql.py) over the embedded pyoxigraph store behind a loopback
HTTP server: the same code path as a Virtuoso endpoint. The reference for every answer is the
in-memory store built by the slice loader from the same FB15k-237-format files."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("pyoxigraph")

from kgreason.kg.loaders import load_freebase_slice  # noqa: E402
from kgreason.kg.source import KGSource, NeedsInMemoryKG  # noqa: E402
from kgreason.kg.sparql import (  # noqa: E402
    InvalidIdentifier, SparqlEndpoint, SparqlError, SparqlKG, check_mid, check_relation,
    fb15k237_to_ntriples, freebase_sparql, string_literal,
)
from kgreason.kg.sparql_local import OxigraphServer, free_port  # noqa: E402
from kgreason.retrieval.scipy_engine import ScipyRetriever  # noqa: E402
from kgreason.retrieval.sparql import SparqlRetriever  # noqa: E402

# a Freebase-shaped toy: films, people, one CVT path relation, a hub (m.0us) and an isolated pair
FACTS = [
    ("/m/0f1", "/film/film/directed_by", "/m/0p1"),
    ("/m/0f1", "/film/film/starring./film/performance/actor", "/m/0p2"),
    ("/m/0f2", "/film/film/directed_by", "/m/0p1"),
    ("/m/0f2", "/film/film/country", "/m/0us"),
    ("/m/0p1", "/people/person/nationality", "/m/0us"),
    ("/m/0p2", "/people/person/nationality", "/m/0us"),
    ("/m/0p2", "/people/person/spouse_s./people/marriage/spouse", "/m/0p3"),
    ("/m/0p3", "/people/person/spouse_s./people/marriage/spouse", "/m/0p2"),
    ("/m/0p3", "/people/person/nationality", "/m/0uk"),
    ("/m/0us", "/location/country/capital", "/m/0dc"),
    ("/m/0x1", "/base/test/rel", "/m/0x2"),
]
NAMES = {"/m/0f1": "Heat", "/m/0f2": "Collateral", "/m/0p1": "Michael Mann", "/m/0p2": "Robert De Niro",
         "/m/0p3": "Grace Hightower", "/m/0us": "United States of America", "/m/0uk": "United Kingdom",
         "/m/0dc": "Washington, D.C.", "/m/0x1": "Say \"quoted\" \\ name", "/m/0x2": "Other"}
ALIASES = {"/m/0us": "USA", "/m/0p2": "Bobby_De_Niro"}


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    d = tmp_path_factory.mktemp("toy")
    (d / "train.txt").write_text("".join(f"{h}\t{r}\t{t}\n" for h, r, t in FACTS))
    (d / "names.txt").write_text("".join(f"{k}\t{v}\n" for k, v in NAMES.items()))
    (d / "aliases.txt").write_text("".join(f"{k}\t{v}\n" for k, v in ALIASES.items()))
    nt = d / "toy.nt"
    counts = fb15k237_to_ntriples([str(d / "train.txt")], nt, names=str(d / "names.txt"),
                                  aliases=str(d / "aliases.txt"))
    mem = load_freebase_slice([str(d / "train.txt")], names=str(d / "names.txt"), aliases=str(d / "aliases.txt"),
                              mid_style="dot", relation_style="dot")
    return dict(dir=d, nt=nt, counts=counts, mem=mem)


@pytest.fixture()
def server(toy):
    with OxigraphServer(toy["nt"]) as s:
        yield s


def _kg(url, tmp_path, **kw):
    return freebase_sparql(url, cache_dir=str(tmp_path / "sparql_cache"), backoff_s=0.01, **kw)


def _facts(kg, e, out=True):
    tids = kg.out_triples(e) if out else kg.in_triples(e)
    return sorted((kg.entity_names[int(kg.heads[t])], kg.relation_names[int(kg.rels[t])],
                   kg.entity_names[int(kg.tails[t])]) for t in tids)


def test_converter_counts_and_cvt_predicates(toy):
    assert toy["counts"] == {"facts": len(FACTS), "names": len(NAMES), "aliases": len(ALIASES)}
    text = toy["nt"].read_text()
    # a CVT path's '|' is not allowed in an IRI: written as '..'; the quote and backslash escaped
    assert "<http://rdf.freebase.com/ns/people.person.spouse_s..people.marriage.spouse>" in text
    assert '"Say \\"quoted\\" \\\\ name"@en' in text


def test_same_facts_names_and_lookup_as_in_memory(toy, server, tmp_path):
    mem = toy["mem"]
    kg = _kg(server.url, tmp_path)
    assert isinstance(kg, KGSource) and isinstance(mem, KGSource)
    assert kg.relation_names == sorted(mem.relation_names)
    for name in mem.entity_names:
        i, j = kg.find_entity(name), mem.find_entity(name)
        assert i >= 0 and kg.entity_names[i] == name
        assert kg.entity_label(i) == mem.entity_label(j)
        assert _facts(kg, i, True) == _facts(mem, j, True)
        assert _facts(kg, i, False) == _facts(mem, j, False)
    for mention in ["Heat", "michael mann", "Robert_De_Niro", "USA", "Bobby De Niro", 'Say "quoted" \\ name']:
        i, j = kg.find_entity(mention), mem.find_entity(mention)
        assert j >= 0 and kg.entity_names[i] == mem.entity_names[j], mention
    for missing in ["Nobody", "m.0zzz", "", "film.film.directed_by"]:
        assert kg.find_entity(missing) == -1 == mem.find_entity(missing)
    assert kg.relation_id("people.person.spouse_s|people.marriage.spouse") >= 0
    with pytest.raises(KeyError):
        kg.relation_id("people.person.height")
    with pytest.raises(KeyError, match="unknown entity"):
        kg.entity_id("m.0zzz")


def test_facts_of_an_entity_are_in_a_canonical_order(toy, server, tmp_path):
    kg = _kg(server.url, tmp_path)
    us = kg.find_entity("m.0us")
    got = [(kg.relation_names[int(kg.rels[t])], kg.entity_names[int(kg.heads[t])]) for t in kg.in_triples(us)]
    assert got == sorted(got)  # (relation, other end), whatever order the server used


@pytest.mark.parametrize("direction", ["out", "in", "both"])
@pytest.mark.parametrize("semantics", ["within", "exact", "walk"])
def test_khop_matches_the_matrix_engine(toy, server, tmp_path, direction, semantics):
    mem = toy["mem"]
    kg = _kg(server.url, tmp_path)
    ref = ScipyRetriever(mem, semantics=semantics, direction=direction, max_paths=100)
    got = SparqlRetriever(kg, semantics=semantics, direction=direction, max_paths=100)
    for seeds in (["m.0f1"], ["m.0p3", "m.0f2"], ["m.0x1"]):
        a = ref.retrieve([mem.entity_id(s) for s in seeds], 3)
        b = got.retrieve([kg.find_entity(s) for s in seeds], 3)
        assert [sorted(mem.entity_names[e] for e in layer) for layer in a.entities_by_hop] == \
               [sorted(kg.entity_names[e] for e in layer) for layer in b.entities_by_hop]
        assert [sorted(mem.verbalise(t) for t in tr) for tr in a.triples_by_hop] == \
               [sorted(kg.verbalise(t) for t in tr) for tr in b.triples_by_hop]

        def names(kg_, p):  # relation ids ≥ R are backward traversals
            R = kg_.n_relations
            return tuple(kg_.entity_names[x] if i % 2 == 0 else
                         kg_.relation_names[x % R] + ("~" if x >= R else "") for i, x in enumerate(p))
        assert sorted(names(mem, p) for p in a.paths) == sorted(names(kg, p) for p in b.paths)
    many = got.retrieve_many([[kg.find_entity("m.0f1")], [kg.find_entity("m.0p3")]], 2)
    one = got.retrieve([kg.find_entity("m.0p3")], 2)
    assert [x.tolist() for x in many[1].entities_by_hop] == [x.tolist() for x in one.entities_by_hop]


def test_expansion_is_batched_not_per_entity(toy, tmp_path):
    # 150 hub neighbours: one VALUES query per direction per block of batch_size entities
    lines = [f"<http://rdf.freebase.com/ns/m.0hub> <http://rdf.freebase.com/ns/base.t.r> "
             f"<http://rdf.freebase.com/ns/m.0n{i}> .\n" for i in range(150)]
    with OxigraphServer(data="".join(lines)) as s:
        kg = _kg(s.url, tmp_path, batch_size=40)
        hub = kg.find_entity("m.0hub")
        sub = SparqlRetriever(kg, direction="both").retrieve([hub], 2)
        assert len(sub.entities_by_hop[0]) == 150
        by = kg.endpoint.stats["by_kind"]
        # hop 1: 1 block × 2 directions; hop 2: ceil(150/40)=4 blocks × 2; names in blocks too.
        # The leaves have no outgoing facts and no names: each of those all-empty blocks is asked
        # a second time before it is believed (4 out-blocks, 4 names blocks)
        assert by["neighbourhood"] == 2 + 8 + 4 and by["names"] == 4 + 4
        assert kg.endpoint.stats["empty_rechecked"] == 8 and kg.endpoint.stats["empty_recovered"] == 0


def test_identifiers_are_validated_before_any_query(server, tmp_path):
    for bad in ["m.0x> } ; DROP ALL ; <x", "M.0X", "m.", "/m/0f1", "m.0f1 ", "?s"]:
        with pytest.raises(InvalidIdentifier):
            check_mid(bad)
    for bad in ["film.film.directed_by> ?x", "film", "film.film.", "a.b|"]:
        with pytest.raises(InvalidIdentifier):
            check_relation(bad)
    assert string_literal('a"b\\c\nd', "en") == '"a\\"b\\\\c\\nd"@en'
    kg = _kg(server.url, tmp_path)
    n_before = server.requests
    # an LLM-written mention only ever reaches a query as an escaped literal; injection text is a name
    assert kg.find_entity('Heat"@en } ?e ?p ?o . { ?e ?p "x') == -1
    assert kg.find_entity("x\x00y") == -1
    assert server.requests == n_before + 1  # the first one was asked as a literal; the second never left
    with pytest.raises(InvalidIdentifier):
        kg._intern("m.0x> <y")


def test_down_endpoint_names_endpoint_and_query_kind(tmp_path):
    url = f"http://127.0.0.1:{free_port()}/sparql"
    with pytest.raises(SparqlError) as ei:
        _kg(url, tmp_path, retries=2)
    msg = str(ei.value)
    assert url in msg and "relations query" in msg and "3 attempt(s)" in msg and "cannot reach" in msg


def test_flapping_endpoint_is_retried_and_counted(server, tmp_path):
    kg = _kg(server.url, tmp_path, retries=3)
    server.fail_next = 2
    e = kg.find_entity("m.0f1")
    assert len(kg.out_triples(e)) == 2
    assert kg.endpoint.stats["retries"] == 2 and kg.endpoint.stats["failures"] == 0
    other = kg.find_entity("m.0f2")
    server.fail_next = 10
    with pytest.raises(SparqlError, match=r"neighbourhood query failed after 4 attempt\(s\): HTTP 503"):
        kg.out_triples(other)
    assert kg.endpoint.stats["failures"] == 2  # both directions of the expansion gave up


def test_slow_endpoint_times_out_with_a_clear_error(server, tmp_path):
    kg = _kg(server.url, tmp_path, retries=1, timeout_s=0.3)
    server.delay_s = 1.0
    with pytest.raises(SparqlError, match=r"neighbourhood query failed after 2 attempt\(s\): no answer within "
                                          r"timeout_s=0.3s"):
        kg.prefetch([kg._intern("m.0f1")])


def test_malformed_results_are_an_error_not_an_empty_neighbourhood(server, tmp_path):
    kg = _kg(server.url, tmp_path)
    server.malformed = True
    with pytest.raises(SparqlError, match=rf"{server.url}: neighbourhood query returned a malformed result"):
        kg.out_triples(kg._intern("m.0f1"))
    server.malformed = False
    ep = SparqlEndpoint(server.url)
    with pytest.raises(SparqlError, match="bad_query query rejected, HTTP 400"):
        ep.select("bad_query", "SELECT WHERE {")


def test_an_answer_flagged_incomplete_is_retried_not_taken(server, tmp_path):
    """Virtuoso cuts an anytime query at its time limit and still answers 200/206 with the rows it
    had, flagged by ``X-SQL-State``; such an answer is a failed attempt, never a neighbourhood."""
    kg = _kg(server.url, tmp_path, retries=2)
    e = kg.find_entity("m.0f1")
    server.partial_next = 1
    assert _facts(kg, e) == [("m.0f1", "film.film.directed_by", "m.0p1"),
                             ("m.0f1", "film.film.starring|film.performance.actor", "m.0p2")]
    assert kg.endpoint.stats["retries"] == 1
    kg2 = _kg(server.url, tmp_path / "other", retries=0)
    server.partial_next = 1
    with pytest.raises(SparqlError, match=r"incomplete result \(HTTP 206, X-SQL-State S1TAT"):
        kg2.out_triples(kg2.find_entity("m.0f2"))


@pytest.mark.parametrize("what", ["names", "neighbourhood"])
def test_an_empty_answer_to_a_batched_block_is_asked_again(toy, server, tmp_path, what):
    """A loaded Virtuoso once answered a names block of ~100 MIDs with no rows (issue #32: those
    entities showed as bare MIDs on the SPARQL side only); such an answer is asked once more,
    past the cache, before it is believed."""
    kg = _kg(server.url, tmp_path)
    ids = [kg.find_entity(m) for m in ("m.0f1", "m.0f2")]
    server.empty_match = "type.object.name" if what == "names" else "VALUES ?s"
    server.empty_next = 1
    kg.prefetch(ids)
    assert server.empty_next == 0  # the fault was served
    assert kg.endpoint.stats["empty_recovered"] == 1  # (films have no incoming facts: that empty block is
    assert kg.endpoint.stats["empty_rechecked"] >= 1   # asked twice too, and believed)
    assert [kg.entity_label(i) for i in ids] == ["Heat", "Collateral"]
    assert kg.entity_label(kg.entity_id("m.0p1")) == "Michael Mann"
    assert _facts(kg, ids[1]) == [("m.0f2", "film.film.country", "m.0us"), ("m.0f2", "film.film.directed_by", "m.0p1")]
    again = _kg(server.url, tmp_path)  # the recovered answer is what the cache holds
    again.prefetch([again.find_entity("m.0f1"), again.find_entity("m.0f2")])
    assert again.endpoint.stats["requests"] == 0
    assert again.entity_label(again.entity_id("m.0p1")) == "Michael Mann"


def test_disk_cache_keyed_by_endpoint_and_query(toy, server, tmp_path):
    kg = _kg(server.url, tmp_path)
    SparqlRetriever(kg, direction="both").retrieve([kg.find_entity("m.0f1")], 2)
    sent = server.requests
    kg2 = _kg(server.url, tmp_path)  # same cache dir: nothing is asked twice
    SparqlRetriever(kg2, direction="both").retrieve([kg2.find_entity("m.0f1")], 2)
    assert server.requests == sent and kg2.endpoint.stats["requests"] == 0
    assert kg2.endpoint.stats["cache_hits"] == kg2.endpoint.stats["queries"] > 0
    # stored per entity: a new frontier {cached, new} asks only for the new entity, in one block
    kg3 = _kg(server.url, tmp_path, batch_size=10)
    kg3.prefetch([kg3._intern("m.0f1"), kg3._intern("m.0x1")])
    assert kg3.endpoint.stats["by_kind"]["neighbourhood"] == 2  # m.0x1 out + in; m.0f1 from the cache
    q = server.requests
    kg4 = _kg(server.url, tmp_path)
    kg4.prefetch([kg4._intern("m.0x1")])
    assert server.requests == q and kg4.endpoint.stats["requests"] == 0
    a, b = SparqlEndpoint("http://a.example/sparql"), SparqlEndpoint("http://b.example/sparql")
    assert a.key("ASK {}") != b.key("ASK {}") and a.key("ASK {}") != a.key("ASK { ?s ?p ?o }")


def test_matrix_engines_refuse_a_remote_kg_at_construction(server, tmp_path):
    kg = _kg(server.url, tmp_path)
    with pytest.raises(NeedsInMemoryKG, match="ScipyRetriever needs the whole graph in memory.*retriever=sparql"):
        ScipyRetriever(kg)
    with pytest.raises(NeedsInMemoryKG, match="LogosKG"):
        kg.SUB


def test_reasoners_run_unchanged_on_either_source(toy, server, tmp_path):
    """ToG (bm25 pruning: no LLM), ReKnoS and retrieval_only on the toy KG through both sources."""
    from kgreason.llm.scripted import ScriptedLLM
    from kgreason.reasoners.reknos import ReKnoS
    from kgreason.reasoners.retrieval_only import RetrievalOnly
    from kgreason.reasoners.tog import ToG
    from kgreason.types import Example

    ex = Example(id="q1", question="Who directed Heat?", answers=("Michael Mann",), topic_entities=("m.0f1",))
    mem = toy["mem"]
    outs = []
    for kg, retr in ((mem, ScipyRetriever(mem, direction="both")), (_kg(server.url, tmp_path), None)):
        retr = retr or SparqlRetriever(kg, direction="both")
        llm = ScriptedLLM(rules=[{"pattern": r"enough|sufficient", "reply": "Yes"}, {"pattern": r"answer", "reply": "{Michael Mann}"}],
                          default="film.film.directed_by: 1.0")
        row = {}
        row["tog"] = ToG(kg=kg, llm=llm, prune="bm25", width=2, depth=2).answer(ex)
        row["reknos"] = ReKnoS(kg=kg, llm=llm, width=2, depth=2).answer(ex)
        row["ro"] = RetrievalOnly(kg=kg, retriever=retr, hops=1).answer(ex)
        outs.append({k: (sorted(p.answers), sorted(p.extra.get("retrieved") or [])) for k, p in row.items()})
    assert outs[0] == outs[1]
    assert "Michael Mann" in outs[1]["ro"][0]
    json.dumps(outs)


def test_sgr_cypher_export_needs_an_in_memory_kg(server, tmp_path):
    from kgreason.llm.scripted import ScriptedLLM
    from kgreason.reasoners.sgr import SGR

    kg = _kg(server.url, tmp_path)
    with pytest.raises(NeedsInMemoryKG, match="SGR's Cypher database export"):
        SGR(kg=kg, retriever=SparqlRetriever(kg), llm=ScriptedLLM(), cypher=True)


def test_whole_graph_steps_stop_at_construction(server, tmp_path):
    from kgreason.kg.linking import EmbeddingLinker

    kg = _kg(server.url, tmp_path)
    with pytest.raises(NeedsInMemoryKG, match="EmbeddingLinker"):
        EmbeddingLinker(kg, embedder=object())
    with pytest.raises(NeedsInMemoryKG, match="entities_of_type"):
        kg.entities_of_type("people.person")


def test_a_trailing_newline_never_reaches_the_endpoint(toy, server, tmp_path):
    """Issue #32: ``re.match`` with ``$`` also matched before a final newline, so ``"m.0f1\\n"``
    passed ``check_mid`` and the endpoint answered HTTP 400 (the example failed on every resume)."""
    for bad in ["m.0f1\n", "g.11b\n", "m.0f1\n\n"]:
        with pytest.raises(InvalidIdentifier):
            check_mid(bad)
    with pytest.raises(InvalidIdentifier):
        check_relation("film.film.directed_by\n")
    kg = _kg(server.url, tmp_path)
    # surrounding whitespace is stripped: the id still links, to the same entity as the clean one
    for spaced in ["m.0f1\n", " m.0f1 ", "m.0f1\r\n"]:
        i = kg.find_entity(spaced)
        assert i >= 0 and kg.entity_names[i] == "m.0f1", spaced
        assert kg.entity_names[kg.entity_id(spaced)] == "m.0f1"
    # an id that is not a MID is "not linked", never an endpoint error
    for bad in ["m.0f1\nx", "m.0F1!"]:
        assert kg.find_entity(bad) == -1
        with pytest.raises(KeyError):
            kg.entity_id(bad)
