"""KG loaders: hand-made files in the official formats, the shared samples, and every error path."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from kgreason.kg.loaders import (
    KGFormatError, load_freebase_slice, load_metaqa_kb, load_pkg, load_primekg,
    load_pykeen, load_rog_subgraphs, load_triples, load_umls_rrf, read_rog_graphs,
)

ASSETS = Path(__file__).resolve().parents[1] / "assets"


def _triples(kg):
    return {(kg.entity_names[h], kg.relation_names[r], kg.entity_names[t]) for h, r, t in kg.triples}


def write(p: Path, text: str) -> Path:
    p.write_text(text, encoding="utf-8")
    return p


# ----------------------------------------------------------------------------- generic TSV


def test_load_triples_tsv_csv_header_and_gz(tmp_path):
    tsv = write(tmp_path / "a.tsv", "A\tr\tB\nB\ts\tC\n\nA\tr\tB\n")
    kg = load_triples(tsv)
    assert _triples(kg) == {("A", "r", "B"), ("B", "s", "C")}
    assert kg.n_triples == 2  # duplicate dropped
    csvp = write(tmp_path / "a.csv", "head,rel,tail\nA,r,B\n")
    assert _triples(load_triples(csvp, delimiter="comma", header=True)) == {("A", "r", "B")}
    gz = tmp_path / "a.tsv.gz"
    with gzip.open(gz, "wt") as f:
        f.write("X\tr\tY\n")
    assert _triples(load_triples([tsv, gz])) == {("A", "r", "B"), ("B", "s", "C"), ("X", "r", "Y")}


def test_load_triples_name_map_links_names(tmp_path):
    tsv = write(tmp_path / "t.tsv", "/m/1\t/people/person/nationality\t/m/2\n")
    names = write(tmp_path / "n.txt", "/m/1\tAda Lovelace\n/m/2\tUnited Kingdom\n")
    kg = load_triples(tsv, names=names, strict_names=True)
    assert kg.entity_label(kg.entity_id("/m/1")) == "Ada Lovelace"
    assert kg.find_entity("ada lovelace") == kg.entity_id("/m/1")


@pytest.mark.parametrize(
    "content,kw,match",
    [
        ("A\tr\n", {}, r":1: expected 3 '\\t'-separated columns"),
        ("A\tr\tB\nA\tr\tB\tC\n", {}, r":2: expected 3"),
        ("", {}, "empty file"),
        ("\n\n", {}, "empty file"),
        ("A\tr\tB\n", {"delimiter": "#"}, "unknown delimiter"),
        ("A\t\tB\n", {}, r":1: empty head, relation or tail"),
    ],
)
def test_load_triples_errors(tmp_path, content, kw, match):
    p = write(tmp_path / "bad.tsv", content)
    with pytest.raises(KGFormatError, match=match):
        load_triples(p, **kw)


def test_error_names_file_and_line(tmp_path):
    p = write(tmp_path / "bad.tsv", "A\tr\tB\nA|r|B\n")
    with pytest.raises(KGFormatError) as ei:
        load_triples(p)
    assert ei.value.path == str(p) and ei.value.line == 2
    assert str(ei.value).startswith(f"{p}:2:")
    assert isinstance(ei.value, ValueError)


def test_missing_file_and_unnamed_ids(tmp_path):
    with pytest.raises(KGFormatError, match="file not found"):
        load_triples(tmp_path / "nope.tsv")
    tsv = write(tmp_path / "t.tsv", "/m/1\tr\t/m/2\n")
    names = write(tmp_path / "n.txt", "/m/1\tAda\n")
    with pytest.raises(KGFormatError, match=r"'/m/2'.*no name"):
        load_triples(tsv, names=names, strict_names=True)
    assert load_triples(tsv, names=names).n_entities == 2  # not strict: allowed
    bad_names = write(tmp_path / "bn.txt", "/m/1\n")
    with pytest.raises(KGFormatError, match=r"bn.txt:1: expected 'id"):
        load_triples(tsv, names=bad_names)


def test_metaqa_format(tmp_path):
    p = write(tmp_path / "kb.txt", "Kismet|directed_by|William Dieterle\nKismet|release_year|1944\n")
    kg = load_metaqa_kb(p)
    assert _triples(kg) == {("Kismet", "directed_by", "William Dieterle"), ("Kismet", "release_year", "1944")}
    with pytest.raises(KGFormatError, match=":1: expected 3 '\\|'"):
        load_metaqa_kb(write(tmp_path / "bad.txt", "Kismet\tdirected_by\tX\n"))


# ----------------------------------------------------------------------------- Freebase / pykeen


def test_freebase_slice_mid_styles(tmp_path):
    tr = write(tmp_path / "train.txt", "/m/0a\t/people/person/spouse_s./people/marriage/spouse\t/m/0b\n"
                                       "/m/0a\t/people/person/nationality\t/m/0c\n")
    names = write(tmp_path / "entity2text.txt", "/m/0a\tLou Seal\n/m/0b\tB B\n/m/0c\tUSA\n/m/0z\tunused\n")
    al = write(tmp_path / "mid2name.txt", "/m/0a\tLou_Seal_-US\n")
    kg = load_freebase_slice(tr, names=names, aliases=al, relation_style="dot")
    assert kg.entity_id("m.0a") == kg.find_entity("Lou Seal") == kg.find_entity("lou seal -us")
    assert "people.person.spouse_s|people.marriage.spouse" in kg.relation_names
    kg2 = load_freebase_slice(tr, names=names, mid_style="slash")
    assert kg2.entity_id("/m/0a") >= 0 and "/people/person/nationality" in kg2.relation_names
    with pytest.raises(KGFormatError, match="no name"):
        load_freebase_slice(tr, names=write(tmp_path / "few.txt", "/m/0a\tX\n"))


def test_pykeen_umls_semnet_shared(shared_data):
    d = shared_data / "umls_semnet"
    kg = load_pykeen([d / "train.txt", d / "valid.txt", d / "test.txt"])
    # PROVENANCE: 135 entities, 46 relations over all splits; 5,216 + 652 + 661 triples
    assert (kg.n_entities, kg.n_relations) == (135, 46)
    assert kg.n_triples <= 5216 + 652 + 661
    assert kg.find_entity("Acquired Abnormality") == kg.entity_id("acquired_abnormality")


def test_freebase_slice_shared_and_cwq_link_rates(shared_data):
    d = shared_data / "freebase_fb15k237"
    kg = load_freebase_slice([d / f"{s}.txt.gz" for s in ("train", "valid", "test")], names=d / "entity2text.txt")
    assert (kg.n_entities, kg.n_relations, kg.n_triples) == (14541, 237, 310116)
    i = kg.entity_id("m.027rn")
    assert kg.entity_label(i) == "Dominican Republic"
    # same counts as the OpenKE id files (independent reference)
    n_ent = int((d / "openke_entity2id.txt").read_text().split("\n", 1)[0])
    assert kg.n_entities == n_ent
    # CWQ topic MIDs into the slice (PROVENANCE: 1,759 questions with a topic in the slice); the
    # name fallback only adds entities whose MID is absent
    from kgreason.data import load_cwq
    from kgreason.kg.linking import link_example, link_mentions, link_rates

    cwq = load_cwq(str(shared_data / "cwq" / "tog_cwq.json"))
    mids = link_rates(link_mentions(kg, list(e.topic_entities)) for e in cwq)
    assert mids["examples_linked"] == 1759
    full = link_rates(link_example(kg, e) for e in cwq)
    assert full["linked"] + full["failed"] == mids["linked"] + mids["failed"]
    assert full["by_method"]["exact"] == mids["linked"] and full["linked"] > mids["linked"]


def test_metaqa_shared(shared_data):
    kg = load_metaqa_kb(shared_data / "metaqa" / "kb.txt")
    assert kg.n_triples == 129235 and kg.n_relations == 9
    assert ("Kismet", "directed_by", "William Dieterle") in _triples(kg.subset(kg.out_triples(kg.entity_id("Kismet"))))


# ----------------------------------------------------------------------------- PrimeKG


PRIMEKG_HEADER = "relation,display_relation,x_index,x_id,x_type,x_name,x_source,y_index,y_id,y_type,y_name,y_source\n"


def test_primekg_kg_csv(tmp_path):
    p = write(tmp_path / "kg.csv", PRIMEKG_HEADER
              + "drug_protein,target,20215,DB01610,drug,valganciclovir,DrugBank,5,1234,gene/protein,POLB,NCBI\n"
              + "indication,indication,20215,DB01610,drug,valganciclovir,DrugBank,35871,5132,disease,CMV infection,MONDO\n")
    kg = load_primekg(p)
    assert _triples(kg) == {("valganciclovir", "drug_protein", "POLB"), ("valganciclovir", "indication", "CMV infection")}
    assert kg.type_of(kg.entity_id("POLB")) == "gene/protein"
    assert kg.type_of(kg.entity_id("CMV infection")) == "disease"
    kgi = load_primekg(p, entity_key="index", relation_column="display_relation")
    assert kgi.entity_label(kgi.entity_id("20215")) == "valganciclovir" and "target" in kgi.relation_names
    with pytest.raises(KGFormatError, match=":3: expected 12 columns"):
        load_primekg(write(tmp_path / "bad.csv", PRIMEKG_HEADER + "indication,indication,1,2,drug,a,s,3,4,disease,b,s\nx,y\n"))
    with pytest.raises(KGFormatError, match="expected a PrimeKG header"):
        load_primekg(write(tmp_path / "h.csv", "a,b,c\n1,2,3\n"))
    with pytest.raises(KGFormatError, match="empty"):
        load_primekg(write(tmp_path / "e.csv", ""))


def test_primekg_pathways_shared(shared_data):
    import csv

    p = shared_data / "primekg_drugmech_pathways" / "benchmark_pathways_edges.csv"
    kg = load_primekg(p)
    rows = list(csv.DictReader(open(p, encoding="utf-8")))
    assert len(rows) == 1113
    ref = {(r["source_node"], r["relation"], r["target_node"]) for r in rows}
    assert _triples(kg) == ref and kg.n_triples == len(ref)
    assert {"drug", "disease", "gene/protein"} <= set(kg.type_names)
    assert kg.type_of(kg.entity_id("valganciclovir")) == "drug"


# ----------------------------------------------------------------------------- UMLS RRF


def test_umls_rrf_official_format():
    d = ASSETS / "umls"
    kg = load_umls_rrf(d / "MRCONSO.RRF", d / "MRREL.RRF", d / "MRSTY.RRF")
    names = {kg.entity_label(i) for i in range(kg.n_entities)}
    assert names == {"Diabetes Mellitus", "Hypertension", "Disease", "Metformin"}
    # MRREL REL/RELA = relation of CUI2 to CUI1 → (CUI2, rel, CUI1)
    assert _triples(kg) == {("C0012634", "PAR", "C0011849"), ("C0012634", "inverse_isa", "C0020538"),
                            ("C0025598", "may_treat", "C0011849")}
    assert kg.find_entity("high blood pressure") == kg.entity_id("C0020538")  # alias
    assert kg.find_entity("Diabète") == -1  # FRE not kept by default
    assert kg.type_of(kg.entity_id("C0025598")) == "Pharmacologic Substance"
    only_msh = load_umls_rrf(d / "MRCONSO.RRF", d / "MRREL.RRF", sources=["MSH"], relation="REL")
    assert _triples(only_msh) == {("C0012634", "PAR", "C0011849"), ("C0012634", "PAR", "C0020538")}


def test_umls_rrf_errors(tmp_path):
    d = ASSETS / "umls"
    conso = (d / "MRCONSO.RRF").read_text()
    short = write(tmp_path / "MRCONSO.RRF", conso + "C0000001|ENG|P|L1|PF|S1|Y|A1|||MSH|MH|D1|X|0|N|256|\n")
    with pytest.raises(KGFormatError, match=r"MRCONSO.RRF:8: expected 18 '\|'-separated fields"):
        load_umls_rrf(short, d / "MRREL.RRF")
    no_trail = write(tmp_path / "c2.RRF", conso.replace("Metformin|0|N|256|", "Metformin|0|N|256"))
    with pytest.raises(KGFormatError, match=":7: expected the line to end with '\\|'"):
        load_umls_rrf(no_trail, d / "MRREL.RRF")
    rel = write(tmp_path / "MRREL.RRF", (d / "MRREL.RRF").read_text()
                + "C9999999|A9|AUI|RO|C0011849|A0039766|AUI||R9||MSH|MSH|||N||\n")
    with pytest.raises(KGFormatError, match=r"MRREL.RRF:4: dangling reference: CUI C9999999"):
        load_umls_rrf(d / "MRCONSO.RRF", rel)
    assert load_umls_rrf(d / "MRCONSO.RRF", rel, strict=False).n_triples == 3
    with pytest.raises(KGFormatError, match="empty file"):
        load_umls_rrf(write(tmp_path / "e.RRF", ""), d / "MRREL.RRF")


# ----------------------------------------------------------------------------- PubMed KG


def test_pkg_tables():
    d = ASSETS / "pkg"
    kg = load_pkg(d / "papers.tsv", authorship=d / "authorship.tsv", citations=d / "citations.tsv",
                  authors=d / "authors.tsv")
    t = _triples(kg)
    assert ("AUTHOR:9001", "authored", "PMID:101") in t and ("PMID:103", "cites", "PMID:102") in t
    assert ("PMID:101", "published_in", "YEAR:2001") in t
    assert kg.entity_label(kg.entity_id("AUTHOR:9002")) == "John Snow"
    assert kg.find_entity("hypertension guidelines") == kg.entity_id("PMID:102")
    assert kg.type_of(kg.entity_id("PMID:101")) == "paper" and kg.type_of(kg.entity_id("AUTHOR:9001")) == "author"
    assert len(t) == 3 + 3 + 2


def test_pkg_dangling(tmp_path):
    d = ASSETS / "pkg"
    cit = write(tmp_path / "cit.tsv", "PMID\tRefPMID\n103\t101\n103\t999\n")
    with pytest.raises(KGFormatError, match=r"cit.tsv:3: dangling reference: PMID '999'"):
        load_pkg(d / "papers.tsv", citations=cit)
    assert load_pkg(d / "papers.tsv", citations=cit, strict=False).n_triples == 3 + 1
    with pytest.raises(KGFormatError, match="header lacks column"):
        load_pkg(write(tmp_path / "p.tsv", "id\ttitle\n1\tx\n"), citations=cit)


# ----------------------------------------------------------------------------- RoG / DDXPlus


def test_rog_subgraphs(tmp_path):
    p = ASSETS / "rog_subgraphs.jsonl"
    kg = load_rog_subgraphs(p)
    assert kg.n_triples == 4  # the shared Jamaica→Caribbean triple is deduplicated
    g = read_rog_graphs(p)
    assert set(g) == {"WebQTest-0", "WebQTest-1"} and len(g["WebQTest-1"]) == 2
    bad = write(tmp_path / "bad.jsonl", '{"id": "q", "graph": [["a", "r"]]}\n')
    with pytest.raises(KGFormatError, match=r"bad.jsonl:1: graph\[0\]: expected \[head, relation, tail\]"):
        load_rog_subgraphs(bad)
    with pytest.raises(KGFormatError, match=":2: expected one JSON object per line"):
        load_rog_subgraphs(write(tmp_path / "b2.jsonl", '{"id": "q", "graph": []}\n{oops\n'))


# ---------------------------------------------------------------- issue #32 item 3: oversized names

def test_an_oversized_name_is_refused_naming_file_line_and_limit(tmp_path):
    from kgreason.kg.loaders import MAX_NAME_CHARS, KGFormatError, load_metaqa_kb, load_triples, name_limit

    big = "x" * (20 * 1024 * 1024)  # a 20 MB field, as in a corrupted dump
    p = tmp_path / "kb.txt"
    p.write_text(f"a|r|b\nc|r|{big}\n")
    with pytest.raises(KGFormatError) as e:
        load_metaqa_kb(p)
    msg = str(e.value)
    assert f"{p}:2" in msg and "20,971,520" in msg and f"{MAX_NAME_CHARS}" in msg and "kg.max_name_chars" in msg
    assert len(msg) < 400  # the field itself is never echoed
    # the limit is a setting: a tighter one refuses a shorter name, a looser one takes it
    q = tmp_path / "t.tsv"
    q.write_text("a\tr\t" + "y" * 50 + "\n")
    with pytest.raises(KGFormatError, match=r"t\.tsv:1.*50 characters"), name_limit(40):
        load_triples(q)
    with name_limit(50):
        assert load_triples(q).n_entities == 2


def test_an_oversized_name_in_a_name_map_csv_or_jsonl_is_refused(tmp_path):
    from kgreason.kg.loaders import KGFormatError, load_freebase_slice, load_primekg, load_rog_subgraphs

    (tmp_path / "train.txt").write_text("/m/0a\t/r/x\t/m/0b\n")
    (tmp_path / "names.txt").write_text("/m/0a\tA\n/m/0b\t" + "n" * 5000 + "\n")
    with pytest.raises(KGFormatError, match=r"names\.txt:2"):
        load_freebase_slice([tmp_path / "train.txt"], names=tmp_path / "names.txt")
    (tmp_path / "kg.csv").write_text("x_name,relation,y_name,x_type,y_type\nA,r," + "b" * 300_000 + ",t,t\n")
    with pytest.raises(KGFormatError, match=r"kg\.csv:2"):
        load_primekg(tmp_path / "kg.csv")
    (tmp_path / "g.jsonl").write_text('{"id": "q1", "graph": [["a", "r", "' + "c" * 5000 + '"]]}\n')
    with pytest.raises(KGFormatError, match=r"g\.jsonl:1"):
        load_rog_subgraphs(tmp_path / "g.jsonl")


def test_the_compiled_cache_passes_the_limit_and_keys_on_it(tmp_path):
    from kgreason.kg.compiled import load_cached
    from kgreason.kg.loaders import KGFormatError

    p = tmp_path / "kb.txt"
    p.write_text("a|r|" + "z" * 100 + "\n")
    kg = load_cached("kgreason.kg.loaders.load_metaqa_kb", p, tmp_path / "c", max_name_chars=200)
    assert kg.n_entities == 2
    with pytest.raises(KGFormatError, match="kg.max_name_chars"):  # not served from the looser compile
        load_cached("kgreason.kg.loaders.load_metaqa_kb", p, tmp_path / "c", max_name_chars=50)
