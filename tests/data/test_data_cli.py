"""``kgreason data``: list (files derived from the configs), fetch (resumable, checked) and prepare.

No network: the converters run on small files in the upstream formats written here, the fetch
pipeline runs with the download function serving local files, and resume runs against a
``http.server`` on 127.0.0.1 that honours ``Range``.
"""

from __future__ import annotations

import gzip
import hashlib
import http.server
import json
import shutil
import threading
import zipfile
from pathlib import Path

import pytest

from kgreason import cli
from kgreason.data import command, fetch as fetch_mod
from kgreason.data import catalog
from kgreason.data.catalog import CONFIGS, SOURCES, Remote, lookup

REPO = Path(__file__).resolve().parents[2]
ASSETS = REPO / "tests" / "assets"
SHARED = REPO.parent / "shared" / "data"
REAL_DOWNLOAD = fetch_mod.download
ENV_VARS = ("PROBSUM_CSV", "PKG_DIR", "ROG_JSONL", "UMLS_META", "FREEBASE_SPARQL_URL")


@pytest.fixture
def root(tmp_path, monkeypatch):
    """An empty data root that KGREASON_DATA points at; the per-dataset variables unset."""
    r = tmp_path / "data"
    r.mkdir()
    monkeypatch.setenv("KGREASON_DATA", str(r))
    for v in ENV_VARS:
        monkeypatch.delenv(v, raising=False)
    monkeypatch.chdir(tmp_path)
    return r


def run_json(capsys, *args) -> dict:
    capsys.readouterr()  # drop what earlier commands printed
    assert cli.main(["data", "list", "--json", *args]) == 0
    out = json.loads(capsys.readouterr().out)
    return {e["config"]: e for e in out["entries"]} | {"_root": out["data_root"]}


# ----------------------------------------------------------------------------- list


def test_every_config_option_has_a_catalog_entry():
    opts = {f"{g}/{o}" for g, o in command.options()}
    assert opts == set(CONFIGS), "conf/dataset or conf/kg changed: add/remove the option in kgreason/data/catalog.py"
    for key, name in CONFIGS.items():
        s = SOURCES[name]
        assert s.upstream and s.licence and s.size and s.access, key
        assert "/work/" not in s.upstream + s.notes + s.size


def test_list_on_a_machine_with_no_data(root, capsys):
    e = run_json(capsys)
    assert e["_root"] == str(root)
    generated = {"dataset/embedded", "dataset/embedded_multihop", "dataset/embedded_clinical", "kg/embedded",
                 "kg/synthetic"}
    for key, row in e.items():
        if key == "_root":
            continue
        if key in generated:
            assert row["present"] and row["status"] == "generated, always present", key
        else:
            assert not row["present"], key
    # the files come from the configs, resolved: ${.hops} for each hop, lists, names/aliases, env defaults
    metaqa = {n["setting"]: n for n in e["dataset/metaqa"]["needs"]}
    assert {s: n["value"] for s, n in metaqa.items()} == {
        f"path (hops={h})": str(root / "metaqa" / f"{h}hop_test_sample1000.jsonl") for h in (1, 2, 3)}
    assert all(n["env"] == "KGREASON_DATA" and n["exists"] is False for n in metaqa.values())
    fb = {n["setting"]: n["value"] for n in e["kg/freebase_slice"]["needs"]}
    assert fb == {"path[0]": str(root / "freebase_fb15k237/train.txt.gz"),
                  "path[1]": str(root / "freebase_fb15k237/valid.txt.gz"),
                  "path[2]": str(root / "freebase_fb15k237/test.txt.gz"),
                  "names": str(root / "freebase_fb15k237/entity2text.txt"),
                  "aliases": str(root / "freebase_fb15k237/FB15k_mid2name.txt")}
    assert {n["setting"] for n in e["dataset/ddxplus"]["needs"]} == {"path", "conditions", "evidences"}
    assert {n["setting"]: n["env"] for n in e["dataset/probsum"]["needs"]} == {"path": "PROBSUM_CSV"}
    assert {n["env"] for n in e["kg/pkg"]["needs"]} == {"PKG_DIR"}
    assert {n["setting"] for n in e["kg/pkg"]["needs"]} == {"path", "authorship", "citations", "authors"}
    assert {n["env"] for n in e["kg/rog_subgraphs"]["needs"]} == {"ROG_JSONL"}
    assert {n["setting"]: n["env"] for n in e["kg/umls"]["needs"]} == {
        "path": "UMLS_META", "mrrel": "UMLS_META", "mrsty": "UMLS_META"}
    assert e["kg/freebase_sparql"]["needs"] == [
        {"setting": "url", "value": "http://localhost:8890/sparql", "env": "FREEBASE_SPARQL_URL",
         "kind": "endpoint", "exists": None, "bytes": None}]
    assert e["dataset/cwq"]["licence"] and "fetch cwq" in e["dataset/cwq"]["get"]
    assert "prepare umls --from" in e["kg/umls"]["get"]


def test_list_text_names_the_root_and_the_missing_files(root, capsys):
    assert command.main(["list"]) == 0
    out = capsys.readouterr().out
    assert f"data root: {root} (KGREASON_DATA={root})" in out
    assert f"path (hops=2) = {root / 'metaqa' / '2hop_test_sample1000.jsonl'}  [KGREASON_DATA]  MISSING" in out
    assert "path = data/probsum/test.csv  [PROBSUM_CSV] (relative to the working directory)  MISSING" in out


def test_list_follows_a_settings_own_variable(root, tmp_path, monkeypatch, capsys):
    csv = tmp_path / "elsewhere" / "probsum.csv"
    csv.parent.mkdir()
    shutil.copy(ASSETS / "probsum.csv", csv)
    monkeypatch.setenv("PROBSUM_CSV", str(csv))
    monkeypatch.setenv("UMLS_META", str(ASSETS / "umls"))
    e = run_json(capsys)
    assert e["dataset/probsum"]["present"] and e["dataset/probsum"]["needs"][0]["value"] == str(csv)
    assert e["kg/umls"]["present"]


@pytest.mark.skipif(not SHARED.is_dir(), reason="no ../shared/data samples")
def test_list_with_the_shared_samples(root, monkeypatch, capsys):
    monkeypatch.setenv("KGREASON_DATA", str(Path("..") / "shared" / "data"))
    monkeypatch.chdir(REPO)
    e = run_json(capsys)
    for key in ("dataset/metaqa", "dataset/cwq", "dataset/webqsp", "dataset/grailqa", "dataset/hotpotqa",
                "dataset/musique", "dataset/twowiki", "dataset/ddxplus", "kg/metaqa", "kg/freebase_slice",
                "kg/primekg", "kg/umls_semnet", "kg/ddxplus"):
        assert e[key]["present"], (key, e[key]["status"])
    for key in ("dataset/probsum", "kg/umls", "kg/pkg", "kg/rog_subgraphs"):
        assert not e[key]["present"], key


PINNED = ["cwq", "webqsp", "grailqa", "hotpotqa", "musique", "twowiki", "ddxplus", "primekg", "umls_semnet"]


@pytest.mark.skipif(not SHARED.is_dir(), reason="no ../shared/data samples")
@pytest.mark.parametrize("name", PINNED)
def test_fetching_a_sample_rebuilds_the_files_the_config_reads(root, monkeypatch, capsys, name):
    """Served the project's copies as the upstream files, every pinned size and SHA-256 matches
    and the converter writes exactly the files (byte for byte) the default configs read."""
    recipe = SOURCES[name].sample
    targets = recipe.convert.partition(":")[2].split(",")
    assert len(targets) == len(recipe.remotes) and all(r.sha256 and r.size for r in recipe.remotes)
    served = {r.url: SHARED / t for r, t in zip(recipe.remotes, targets)}
    monkeypatch.setattr(fetch_mod, "download", fake_download(served))
    assert command.main(["fetch", name]) == 0
    for t in targets:
        assert (root / t).read_bytes() == (SHARED / t).read_bytes(), t
    e = run_json(capsys)
    for cfg, src in CONFIGS.items():
        if src == name:
            assert e[cfg]["present"], cfg


def test_help_and_unknown_names(root, capsys):
    assert cli.main(["data", "--help"]) == 0
    out = capsys.readouterr().out
    assert "kgreason data" in out and "list" in out and "fetch" in out and "prepare" in out
    assert "data" in cli.TOOLS and "data" in cli.help_text()
    assert command.main(["fetch", "nosuch"]) == 1
    assert "no such dataset or KG" in capsys.readouterr().err
    assert lookup("2wiki").name == "twowiki" and lookup("kg/freebase_slice").name == "fb15k237"


# ----------------------------------------------------------------------------- converters (upstream formats)


def _zip(path: Path, members: dict[str, bytes | str]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


METAQA_KB = "Kismet|directed_by|William Dieterle\nKismet|starred_actors|Marlene Dietrich\n" \
            "The Two of Us|written_by|Claude Berri\nThe Two of Us|release_year|1967\n"
METAQA_QA = "who directed [Kismet]\tWilliam Dieterle\nwho was the writer of the film [The Two of Us]\tClaude Berri\n" \
            "who acted in [Kismet]\tMarlene Dietrich|Nobody Else\n"


def test_prepare_metaqa_from_the_official_layout(root, tmp_path, capsys):
    src = _zip(tmp_path / "MetaQA.zip", {"MetaQA/kb.txt": METAQA_KB, "MetaQA/1-hop/vanilla/qa_test.txt": METAQA_QA,
                                         "MetaQA/1-hop/vanilla/qa_train.txt": "junk"})
    assert command.main(["prepare", "metaqa", "--from", str(src)]) == 0
    assert (root / "metaqa" / "kb.txt").read_text() == METAQA_KB
    assert (root / "metaqa" / "1-hop" / "qa_test.txt").read_text() == METAQA_QA
    recs = [json.loads(x) for x in (root / "metaqa" / "1hop_test_sample1000.jsonl").read_text().splitlines()]
    assert sorted(r["question"] for r in recs) == sorted(line.split("\t")[0] for line in METAQA_QA.splitlines())
    assert {r["question"]: r["covered_by_kb"] for r in recs} == {
        "who directed [Kismet]": True, "who was the writer of the film [The Two of Us]": True,
        "who acted in [Kismet]": False}  # "Nobody Else" is not a KB entity
    from kgreason.data.metaqa import load_metaqa

    es = load_metaqa(str(root / "metaqa" / "1hop_test_sample1000.jsonl"))
    assert {tuple(x.answers) for x in es} == {("William Dieterle",), ("Claude Berri",),
                                              ("Marlene Dietrich", "Nobody Else")}
    e = run_json(capsys)
    assert e["kg/metaqa"]["present"]
    assert [n["exists"] for n in e["dataset/metaqa"]["needs"]] == [True, False, False]


def test_prepare_metaqa_bad_line_names_file_and_line(root, tmp_path, capsys):
    src = tmp_path / "m"
    (src / "1-hop" / "vanilla").mkdir(parents=True)
    (src / "kb.txt").write_text(METAQA_KB)
    (src / "1-hop" / "vanilla" / "qa_test.txt").write_text("who directed Kismet\tWilliam Dieterle\n")
    assert command.main(["prepare", "metaqa", "--from", str(src)]) == 1
    err = capsys.readouterr().err
    assert "qa_test.txt:1: expected exactly one [topic entity]" in err


TOG_CWQ = [{"ID": "WebQTest-832_c334", "question": "Lou Seal is the mascot for the team that last won the World Series when?",
            "topic_entity": {"m.03_dwn": "Lou Seal"}, "answer": "2014 World Series"},
           {"ID": "WebQTest-1", "question": "q2?", "topic_entity": {"m.0x": "X"}, "answer": "Y"}]
TOG_GRAIL = [{"qid": 2101960008000, "question": "which play is produced by the illusion?",
              "answer": [{"answer_type": "Entity", "answer_argument": "m.0yrltsn", "entity_name": "The Illusion"}],
              "topic_entity": {"m.0yrlqjm": "The Illusion"}}]
WEBQSP = {"Questions": [{"QuestionId": "WebQTest-0", "RawQuestion": "what does jamaican people speak?",
                         "Parses": [{"TopicEntityMid": "m.03_r3", "TopicEntityName": "Jamaica",
                                     "InferentialChain": ["location.country.languages_spoken"],
                                     "Answers": [{"AnswerType": "Entity", "AnswerArgument": "m.01428y",
                                                  "EntityName": "Jamaican English"}]}]}]}


@pytest.mark.parametrize("name,payload,target,loader", [
    ("cwq", TOG_CWQ, "cwq/tog_cwq.json", "load_cwq"),
    ("grailqa", TOG_GRAIL, "grailqa/tog_grailqa.json", "load_grailqa"),
    ("webqsp", WEBQSP, "webqsp/grasp_webqsp_test100.json", "load_webqsp"),
])
def test_prepare_tog_json(root, tmp_path, name, payload, target, loader):
    src = tmp_path / "in.json"
    src.write_text(json.dumps(payload))
    assert command.main(["prepare", name, "--from", str(src)]) == 0
    assert (root / target).read_bytes() == src.read_bytes()
    from kgreason.data import kgqa

    assert len(getattr(kgqa, loader)(str(root / target))) == len(payload.get("Questions", payload)
                                                                  if isinstance(payload, dict) else payload)


def test_prepare_tog_json_rejects_a_bad_record(root, tmp_path, capsys):
    src = tmp_path / "in.json"
    src.write_text(json.dumps([{"ID": "x", "question": "q", "topic_entity": {}}]))
    assert command.main(["prepare", "cwq", "--from", str(src)]) == 1
    assert "record 0: missing field 'answer'" in capsys.readouterr().err
    assert not (root / "cwq" / "tog_cwq.json").exists()


HOTPOT_DEV = [
    {"_id": "5a8b57f25542995d1e6f1371", "answer": "yes", "question": "Were Scott Derrickson and Ed Wood of the same nationality?",
     "supporting_facts": [["Scott Derrickson", 0], ["Ed Wood", 0]], "type": "comparison", "level": "hard",
     "context": [["Scott Derrickson", ["Scott Derrickson is an American director."]],
                 ["Ed Wood", ["Edward Davis Wood Jr. was an American filmmaker."]]]},
    {"_id": "5a8c7595554299585d9e36b6", "answer": "Chief of Protocol",
     "question": "What government position was held by the woman who portrayed Corliss Archer in the film Kiss and Tell?",
     "supporting_facts": [["Kiss and Tell (1945 film)", 0], ["Shirley Temple", 0]], "type": "bridge", "level": "hard",
     "context": [["Kiss and Tell (1945 film)", ["Kiss and Tell stars Shirley Temple as Corliss Archer."]],
                 ["Shirley Temple", ["Shirley Temple Black was Chief of Protocol."]]]},
]


def fake_download(served: dict[str, Path], calls: list[str] | None = None):
    """A stand-in for the network: the URL's bytes come from a local file (resumes like the real one)."""
    def download(url: str, part: Path, timeout: float = 60.0, limit: int | None = None):
        if calls is not None:
            calls.append(url)
        return REAL_DOWNLOAD(Path(served[url]).resolve().as_uri(), part, limit=limit)
    return download


def test_fetch_hotpotqa_full_converts_the_official_dev_json(root, tmp_path, monkeypatch, capsys):
    from kgreason.data.catalog import HOTPOT_DEV_URL
    from kgreason.data.multihop import load_hotpotqa

    src = tmp_path / "hotpot_dev_distractor_v1.json"
    src.write_text(json.dumps(HOTPOT_DEV, indent=1))
    calls: list[str] = []
    monkeypatch.setattr(fetch_mod, "download", fake_download({HOTPOT_DEV_URL: src}, calls))
    assert command.main(["fetch", "hotpotqa", "--full"]) == 0
    out = root / "hotpotqa" / "hotpot_dev_distractor_v1.jsonl"
    es = load_hotpotqa(str(out))
    assert [x.answers for x in es] == [("yes",), ("Chief of Protocol",)]
    assert es[1].supporting == ("Kiss and Tell (1945 film)", "Shirley Temple")
    assert "use:  kgreason ... dataset.path=${paths.data}/hotpotqa/hotpot_dev_distractor_v1.jsonl" in capsys.readouterr().out
    assert command.main(["fetch", "hotpotqa", "--full"]) == 0  # staged file complete: not fetched again
    assert calls == [HOTPOT_DEV_URL]
    assert "already complete" in capsys.readouterr().out


MUSIQUE = {"id": "2hop__574419_270105", "question": "What is the seat of the county where Van Hook Township is located?",
           "answer": "Stanley", "answer_aliases": [], "answerable": True,
           "paragraphs": [{"idx": 0, "title": "Stanley", "paragraph_text": "Stanley is the seat.", "is_supporting": True},
                          {"idx": 1, "title": "Van Hook", "paragraph_text": "In Mountrail County.", "is_supporting": True}],
           "question_decomposition": [{"id": 1, "question": "Van Hook >> county", "answer": "Mountrail County",
                                       "paragraph_support_idx": 1}]}


def test_prepare_musique_official_jsonl(root, tmp_path):
    from kgreason.data.multihop import load_musique

    src = tmp_path / "musique_ans_v1.0_dev.jsonl"
    src.write_text(json.dumps(MUSIQUE) + "\n" + json.dumps(MUSIQUE | {"id": "3hop1__1_2_3", "answerable": False}) + "\n")
    assert command.main(["prepare", "musique", "--from", str(src)]) == 0
    es = load_musique(str(root / "musique" / "musique_ans_v1.0_dev.jsonl"))
    assert [x.id for x in es] == ["2hop__574419_270105"] and es[0].hops == 2


def test_fetch_musique_full_from_the_hub(root, tmp_path, monkeypatch):
    def hub(hub_id, config, split, part):
        assert (hub_id, split) == ("dgslibisey/MuSiQue", "validation")
        part.write_text(json.dumps(MUSIQUE) + "\n")

    monkeypatch.setattr(fetch_mod, "hub_download", hub)
    assert command.main(["fetch", "musique", "--full"]) == 0
    assert json.loads((root / "musique" / "musique_ans_v1.0_dev.jsonl").read_text())["answer"] == "Stanley"


TWOWIKI = {"_id": "b088d3ca", "type": "comparison", "question": "Which film came out first, A or B?",
           "context": [["A", ["A is a 1950 film."]], ["B", ["B is a 1960 film."]]],
           "supporting_facts": [["A", 0], ["B", 0]], "evidences": [["A", "publication date", "1950"]], "answer": "A"}


def test_fetch_twowiki_full_unpacks_the_release_zip(root, tmp_path, monkeypatch):
    from kgreason.data.catalog import TWOWIKI_ZIP_URL
    from kgreason.data.multihop import load_twowiki

    z = _zip(tmp_path / "data_ids_april7.zip", {"data_ids_april7/train.json": "[]", "data_ids_april7/dev.json":
                                               json.dumps([TWOWIKI])})
    monkeypatch.setattr(fetch_mod, "download", fake_download({TWOWIKI_ZIP_URL: z}))
    assert command.main(["fetch", "2wiki", "--full"]) == 0
    es = load_twowiki(str(root / "2wikimultihopqa" / "dev.jsonl"))
    assert es[0].extra["evidences"] == [["A", "publication date", "1950"]]


def test_prepare_ddxplus_release_with_nested_patient_zip(root, tmp_path):
    from kgreason.data.ddxplus import load_ddxplus, load_ddxplus_kg

    inner = _zip(tmp_path / "release_test_patients.zip",
                 {"release_test_patients": (ASSETS / "ddxplus" / "patients.csv").read_text()})
    src = _zip(tmp_path / "ddxplus.zip", {
        "release_conditions.json": (ASSETS / "ddxplus" / "release_conditions.json").read_text(),
        "release_evidences.json": (ASSETS / "ddxplus" / "release_evidences.json").read_text(),
        "release_test_patients.zip": inner.read_bytes(),
        "release_train_patients.zip": inner.read_bytes()})
    assert command.main(["prepare", "ddxplus", "--from", str(src)]) == 0
    d = root / "ddxplus"
    es = load_ddxplus(str(d / "release_test_patients.csv"), str(d / "release_conditions.json"),
                      str(d / "release_evidences.json"))
    assert [x.diagnoses for x in es][:1] and len(es) == 2
    assert len(load_ddxplus_kg(d / "release_conditions.json", d / "release_evidences.json").triples) > 0


FB_TRAIN = "/m/027rn\t/location/country/form_of_government\t/m/06cx9\n" \
           "/m/017dcd\t/tv/tv_program/regular_cast./tv/regular_tv_appearance/actor\t/m/06v8s0\n"
FB_VALID = "/m/027rn\t/location/location/contains\t/m/017dcd\n"
FB_TEST = "/m/06cx9\t/government/form_of_government/countries\t/m/027rn\n"
FB_NAMES = "/m/027rn\tDominican Republic\n/m/06cx9\tRepublic\n/m/017dcd\tMighty Morphin Power Rangers\n/m/06v8s0\tWendee Lee\n"


def test_prepare_fb15k237_release_zip_plus_names(root, tmp_path):
    from kgreason.kg.loaders import load_freebase_slice

    src = tmp_path / "fb"
    src.mkdir()
    _zip(src / "FB15K-237.2.zip", {"Release/train.txt": FB_TRAIN, "Release/valid.txt": FB_VALID,
                                   "Release/test.txt": FB_TEST, "Release/text_cvsc.txt": "x"})
    (src / "entity2text.txt").write_text(FB_NAMES)
    (src / "FB15k_mid2name.txt").write_text(FB_NAMES.replace(" ", "_"))
    assert command.main(["prepare", "fb15k237", "--from", str(src)]) == 0
    d = root / "freebase_fb15k237"
    assert gzip.decompress((d / "train.txt.gz").read_bytes()).decode() == FB_TRAIN
    kg = load_freebase_slice([d / f"{s}.txt.gz" for s in ("train", "valid", "test")], names=d / "entity2text.txt",
                             aliases=d / "FB15k_mid2name.txt", relation_style="dot")
    assert kg.find_entity("Dominican_Republic") == kg.find_entity("Dominican Republic") is not None
    assert len(kg.triples) == 4


def test_prepare_fb15k237_names_a_mid_without_name(root, tmp_path, capsys):
    src = tmp_path / "fb"
    src.mkdir()
    _zip(src / "FB15K-237.2.zip", {"Release/train.txt": FB_TRAIN, "Release/valid.txt": FB_VALID,
                                   "Release/test.txt": FB_TEST})
    (src / "entity2text.txt").write_text(FB_NAMES.replace("/m/06v8s0\tWendee Lee\n", ""))
    assert command.main(["prepare", "fb15k237", "--from", str(src)]) == 1
    assert "1 MID(s) of the triples have no name, e.g. /m/06v8s0" in capsys.readouterr().err


PRIMEKG = ("relation,display_relation,x_index,x_id,x_type,x_name,x_source,y_index,y_id,y_type,y_name,y_source\n"
           "protein_protein,ppi,0,9796,gene/protein,PHYHIP,NCBI,8889,56992,gene/protein,KIF15,NCBI\n"
           "drug_protein,target,20215,DB01610,drug,valganciclovir,DrugBank,0,9796,gene/protein,PHYHIP,NCBI\n")


def test_prepare_primekg_kg_csv(root, tmp_path, capsys):
    from kgreason.kg.loaders import load_primekg

    src = tmp_path / "kg.csv"
    src.write_text(PRIMEKG)
    assert command.main(["prepare", "primekg", "--from", str(src)]) == 0
    kg = load_primekg(root / "primekg" / "kg.csv")
    assert len(kg.triples) == 2
    assert "use:  kgreason ... kg.path=${paths.data}/primekg/kg.csv" not in capsys.readouterr().out  # prepare: no --full hint
    src.write_text("a,b,c\n1,2,3\n")
    assert command.main(["prepare", "primekg", "--from", str(src)]) == 1
    assert "kg.csv:1: not a PrimeKG kg.csv" in capsys.readouterr().err


def test_fetch_rog_from_the_hub_stays_under_the_data_root_whatever_rog_jsonl_says(root, tmp_path, monkeypatch,
                                                                                   capsys):
    monkeypatch.setattr(fetch_mod, "hub_download",
                        lambda hub_id, config, split, part: shutil.copy(ASSETS / "rog_subgraphs.jsonl", part))
    monkeypatch.setitem(catalog.EXTRA_MODULES, "hub", "json")  # the hub extra counts as installed here
    assert command.main(["fetch", "rog"]) == 0
    target = root / "rog" / "webqsp_test.jsonl"
    assert target.read_bytes() == (ASSETS / "rog_subgraphs.jsonl").read_bytes()
    assert f"then: export ROG_JSONL={target}" in capsys.readouterr().out
    monkeypatch.setenv("ROG_JSONL", str(tmp_path / "mine.jsonl"))  # issue 44: never written outside --dest
    assert command.main(["fetch", "rog"]) == 0
    assert not (tmp_path / "mine.jsonl").exists()
    assert f"export ROG_JSONL={target}   (it now points at {tmp_path / 'mine.jsonl'}, which was not written" \
        in capsys.readouterr().out


# ----------------------------------------------------------------------------- prepare: licensed / credentialed


def test_prepare_probsum_to_the_data_root_or_probsum_csv(root, tmp_path, monkeypatch, capsys):
    from kgreason.data.clinical import load_probsum

    assert command.main(["prepare", "probsum", "--from", str(ASSETS / "probsum.csv")]) == 0
    target = root / "probsum" / "test.csv"
    assert len(load_probsum(str(target))) > 0
    assert f"then: export PROBSUM_CSV={target}" in capsys.readouterr().out
    mine = tmp_path / "phys" / "probsum.csv"
    monkeypatch.setenv("PROBSUM_CSV", str(mine))  # issue 44: a variable never moves what prepare writes
    assert command.main(["prepare", "probsum", "--from", str(ASSETS / "probsum.csv")]) == 0
    assert not mine.exists() and "which was not written" in capsys.readouterr().out
    monkeypatch.setenv("PROBSUM_CSV", str(target))
    e = run_json(capsys)
    assert e["dataset/probsum"]["present"]
    bad = tmp_path / "bad.csv"
    bad.write_text("File ID,Summary\n1,x\n")
    assert command.main(["prepare", "probsum", "--from", str(bad)]) == 1
    assert "header lacks column(s)" in capsys.readouterr().err


def test_prepare_umls_from_a_release_zip(root, tmp_path, monkeypatch, capsys):
    from kgreason.kg.loaders import load_umls_rrf

    src = _zip(tmp_path / "umls-2024AA-metathesaurus.zip",
               {f"2024AA/META/{n}": (ASSETS / "umls" / n).read_text() for n in ("MRCONSO.RRF", "MRREL.RRF", "MRSTY.RRF")})
    assert command.main(["prepare", "umls", "--from", str(src)]) == 0
    meta = root / "umls" / "META"
    assert f"then: export UMLS_META={meta}" in capsys.readouterr().out
    kg = load_umls_rrf(meta / "MRCONSO.RRF", meta / "MRREL.RRF", meta / "MRSTY.RRF")
    assert kg.find_entity("Diabetes Mellitus") is not None
    monkeypatch.setenv("UMLS_META", str(meta))
    assert run_json(capsys)["kg/umls"]["present"]
    bad = tmp_path / "badmeta"
    bad.mkdir()
    (bad / "MRCONSO.RRF").write_text("C0011849|ENG|P|\n")
    (bad / "MRREL.RRF").write_text("")
    assert command.main(["prepare", "umls", "--from", str(bad)]) == 1
    assert "MRCONSO.RRF:1: expected 18 '|'-terminated fields" in capsys.readouterr().err


def test_prepare_freebase_prints_the_virtuoso_steps(root, tmp_path, capsys):
    dump = tmp_path / "fb" / "freebase-rdf-latest.gz"
    assert command.main(["prepare", "freebase", "--from", str(dump)]) == 0
    out = capsys.readouterr().out
    assert f"ld_dir('{dump.parent}', 'freebase-rdf-latest.gz', 'http://freebase.com');" in out
    assert "rdf_loader_run();" in out and "checkpoint;" in out and "LOAD_LIST WHERE ll_error IS NOT NULL" in out
    assert "export FREEBASE_SPARQL_URL=" in out
    assert command.main(["fetch", "umls"]) == 1
    assert "nothing to download from here" in (err := capsys.readouterr().err) and "prepare umls --from" in err


# ----------------------------------------------------------------------------- download: checks and resume


def test_fetch_stops_on_a_hash_or_size_mismatch(root, tmp_path, monkeypatch, capsys):
    src = tmp_path / "cwq.json"
    src.write_text(json.dumps(TOG_CWQ))
    url = SOURCES["cwq"].sample.remotes[0].url
    monkeypatch.setattr(fetch_mod, "download", fake_download({url: src}))
    assert command.main(["fetch", "cwq"]) == 1
    err = capsys.readouterr().err
    assert f"got {src.stat().st_size:,} bytes, expected 3,833,233" in err and "kgreason/data/catalog.py" in err
    assert not (root / "cwq" / "tog_cwq.json").exists()
    assert command.main(["fetch", "cwq", "--no-verify"]) == 0  # accepted as it is (still a valid ToG file)
    assert (root / "cwq" / "tog_cwq.json").read_bytes() == src.read_bytes()
    # a file of the right size but other bytes fails the SHA-256
    r = Remote("f.bin", "file:///unused", size=4, sha256=hashlib.sha256(b"abcd").hexdigest())
    (tmp_path / "other.bin").write_bytes(b"abce")
    monkeypatch.setattr(fetch_mod, "download", fake_download({"file:///unused": tmp_path / "other.bin"}))
    with pytest.raises(fetch_mod.FetchError, match="SHA-256 .*, expected"):
        fetch_mod.fetch_remote(r, tmp_path / "stage", log=lambda s: None)
    assert fetch_mod.fetch_remote(r, tmp_path / "stage2", verify=False, log=lambda s: None).read_bytes() == b"abce"


class _RangeServer(http.server.BaseHTTPRequestHandler):
    payload = b""
    cut_first = 0          # the first response stops after this many bytes (0: never)
    honour_range = True
    seen: list = []

    def do_GET(self):  # noqa: N802
        rng = self.headers.get("Range")
        type(self).seen.append(rng)
        start = int(rng.split("=")[1].rstrip("-")) if (rng and self.honour_range) else 0
        body = self.payload[start:]
        self.send_response(206 if start else 200)
        self.send_header("Content-Length", str(len(body)))
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(self.payload) - 1}/{len(self.payload)}")
        self.end_headers()
        if type(self).cut_first:
            n, type(self).cut_first = type(self).cut_first, 0
            self.wfile.write(body[:n])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@pytest.fixture
def server():
    handler = type("H", (_RangeServer,), {"seen": [], "payload": bytes(range(256)) * 4000})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield handler, f"http://127.0.0.1:{httpd.server_address[1]}/file.bin"
    httpd.shutdown()
    httpd.server_close()


def test_an_interrupted_download_resumes_with_a_range_request(server, tmp_path, monkeypatch):
    monkeypatch.delenv("http_proxy", raising=False)
    monkeypatch.delenv("HTTP_PROXY", raising=False)
    handler, url = server
    data = handler.payload
    r = Remote("file.bin", url, size=len(data), sha256=hashlib.sha256(data).hexdigest())
    handler.cut_first = 300_000
    with pytest.raises(fetch_mod.FetchError, match="run the same command again to resume"):
        fetch_mod.fetch_remote(r, tmp_path, log=lambda s: None)
    part = tmp_path / "file.bin.part"
    assert part.stat().st_size == 300_000 and not (tmp_path / "file.bin").exists()
    out = fetch_mod.fetch_remote(r, tmp_path, log=lambda s: None)
    assert out.read_bytes() == data and not part.exists()
    assert handler.seen == [None, "bytes=300000-"]
    fetch_mod.fetch_remote(r, tmp_path, log=lambda s: None)  # complete: no request at all
    assert len(handler.seen) == 2


def test_a_server_that_ignores_range_restarts_the_part(server, tmp_path, monkeypatch):
    monkeypatch.delenv("http_proxy", raising=False)
    handler, url = server
    handler.honour_range = False
    data = handler.payload
    (tmp_path / "file.bin.part").write_bytes(data[:1000])
    out = fetch_mod.fetch_remote(Remote("file.bin", url, size=len(data)), tmp_path, log=lambda s: None)
    assert out.read_bytes() == data and handler.seen == ["bytes=1000-"]


def test_file_urls_resume_too(tmp_path):
    src = tmp_path / "src.bin"
    src.write_bytes(b"0123456789")
    part = tmp_path / "x.part"
    part.write_bytes(b"0123")
    fetch_mod.download(src.as_uri(), part)
    assert part.read_bytes() == b"0123456789"


@pytest.mark.skipif(not SHARED.is_dir(), reason="no ../shared/data samples")
def test_fetch_fb15k237_unpacks_the_release_zip_with_the_pinned_names(root, tmp_path, monkeypatch, capsys):
    from kgreason.data.catalog import FB15K237_ZIP_URL

    z = _zip(tmp_path / "FB15K-237.2.zip", {"Release/train.txt": FB_TRAIN, "Release/valid.txt": FB_VALID,
                                           "Release/test.txt": FB_TEST})
    remotes = {r.name: r.url for r in SOURCES["fb15k237"].sample.remotes}
    served = {FB15K237_ZIP_URL: z, remotes["entity2text.txt"]: SHARED / "freebase_fb15k237" / "entity2text.txt",
              remotes["FB15k_mid2name.txt"]: SHARED / "freebase_fb15k237" / "FB15k_mid2name.txt"}
    monkeypatch.setattr(fetch_mod, "download", fake_download(served))
    assert command.main(["fetch", "freebase_slice"]) == 0
    e = run_json(capsys)
    assert e["kg/freebase_slice"]["present"]
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(REPO / "conf" / "kg" / "freebase_slice.yaml")
    cfg = OmegaConf.create({"paths": {"data": str(root), "cache": str(tmp_path / "cache")}, "kg": cfg})
    kg = instantiate(cfg.kg)
    assert kg.entity_names and kg.find_entity("Dominican Republic") is not None and len(kg.triples) == 4


def test_fetch_with_no_name_gets_every_public_entry_and_names_what_needs_a_hand(root, monkeypatch, capsys):
    """`kgreason data fetch` alone: every public entry with a download recipe, one after another (one
    failure does not stop the others, and the exit status says so); then what needs the user's hand."""
    got = []

    def fake_fetch(src, dest, full=False, verify=True):
        got.append(src.name)
        if src.name == "grailqa":
            raise fetch_mod.FetchError("grailqa: the server said 503")
        return []

    monkeypatch.setattr(fetch_mod, "fetch", fake_fetch)
    monkeypatch.setitem(catalog.EXTRA_MODULES, "hub", "json")  # the hub extra counts as installed here
    rc = command.main(["fetch"])
    out, err = capsys.readouterr()
    public = [n for n, s in SOURCES.items() if s.access == "public" and s.sample is not None]
    assert got == public and {"cwq", "hotpotqa", "fb15k237", "rog"} <= set(got)
    assert rc == 1 and "1 of" in err and "kgreason data fetch grailqa" in err
    for name in ("metaqa", "umls", "probsum"):
        assert f"\n  {name} (" in out, out
    monkeypatch.setattr(fetch_mod, "fetch", lambda src, dest, full=False, verify=True: [])
    assert command.main(["fetch"]) == 0


# ----------------------------------------------------------------------------- no network (issue 59 item 6)


def test_without_a_network_fetch_stops_at_the_first_name_resolution_failure_in_one_line(root, monkeypatch, capsys):
    """No DNS (simulated: every host name fails to resolve, as with no network): `kgreason data
    fetch` used to try all 11 sources and advise "run the same command again to resume" 11 times;
    it stops after the first failure with one line saying there is no network and where to put
    the file by hand."""
    import socket

    asked = []

    def no_dns(host, *a, **k):
        asked.append(host)
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_dns)
    monkeypatch.setitem(catalog.EXTRA_MODULES, "hub", "json")
    assert command.main(["fetch"]) == 1
    out, err = capsys.readouterr()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and len(asked) == 1, (lines, asked)
    line = lines[0]
    first = command.fetchable()[0]
    assert line.startswith("kgreason data fetch: no network:") and asked[0] in line
    assert "resume" not in line and str(root) in line and "put it at" in line  # the file's place by hand
    assert f"[2/" not in out  # nothing after the first entry was tried
    # one named entry: the same one line
    assert command.main(["fetch", first]) == 1
    err = capsys.readouterr().err
    assert [ln for ln in err.splitlines() if ln.strip()] == [ln for ln in err.splitlines() if "no network" in ln]
    assert fetch_mod.no_network(OSError("download failed")) is False


def test_rog_is_marked_as_needing_the_hub_extra_that_set_up_does_not_install(root, monkeypatch, capsys):
    """`rog` downloads through the `datasets` library (`kgreason[hub]`), which set-up leaves out
    (it is ~100 MB for this one entry): `data list`, `fetch rog` and `fetch` alone say so."""
    monkeypatch.setitem(catalog.EXTRA_MODULES, "hub", "kgreason_no_such_module")
    assert SOURCES["rog"].extra == "hub"
    assert command.main(["fetch", "rog"]) == 1
    err = capsys.readouterr().err
    assert "pip install 'kgreason[hub]'" in err and len(err.strip().splitlines()) == 1
    assert command.main(["list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["entries"]
    assert any("kgreason[hub]" in json.dumps(r) for r in rows if "rog" in json.dumps(r))
    got = []
    monkeypatch.setattr(fetch_mod, "fetch", lambda src, dest, full=False, verify=True: got.append(src.name) or [])
    assert command.main(["fetch"]) == 0
    out = capsys.readouterr().out
    assert "rog" not in got and "rog (needs an extra set-up does not install: pip install 'kgreason[hub]'" in out
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "kgreason[hub]" in readme


def test_help_and_docs_name_only_entries_that_can_be_fetched():
    """`kgreason data --help`'s example and every `kgreason data fetch NAME` in the README and
    docs name entries with a download recipe (metaqa, Google Drive only, was suggested)."""
    import re

    texts = {"kgreason data example": cli.TOOLS["data"].example}
    texts.update({p.name: p.read_text(encoding="utf-8") for p in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]})
    seen = 0
    for where, text in texts.items():
        for m in re.finditer(r"kgreason data fetch((?: [a-z][a-z0-9_]*)+)", text):
            for name in m.group(1).split():
                seen += 1
                assert lookup(name).sample is not None, f"{where}: `kgreason data fetch {name}` cannot fetch {name}"
    assert seen >= 3
