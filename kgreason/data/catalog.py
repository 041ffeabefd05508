"""What each dataset and KG option is, where it comes from, and how ``kgreason data`` gets it.

One entry (:class:`Source`) per obtainable thing; :data:`CONFIGS` maps every ``conf/dataset/*.yaml``
and ``conf/kg/*.yaml`` option to its entry (a test fails when a config has none). The exact files a
run needs are not written here: ``kgreason data list`` derives them from the configs themselves
(:mod:`kgreason.data.command`).

Every download URL is a :class:`Remote` in this file and nowhere else, so a moved file is fixed in
one place. **None of these URLs could be tried from the machine this was written on (it has no
network)**; ``checked`` says what backs each pin instead: ``sha256`` of the byte-for-byte copy in
the project's shared samples (which name the upstream commit), or nothing (``None``: the size and
hash are unknown and not checked). A hash that does not match stops the fetch (``--no-verify``
accepts the file anyway).

Access kinds: ``public`` (``kgreason data fetch``), ``manual`` (public, but behind a page a script
cannot download: get it yourself, then ``kgreason data prepare --from``), ``licensed`` /
``credentialed`` (``prepare --from`` a copy you are entitled to), ``server`` (a SPARQL endpoint:
``prepare`` prints the set-up), ``export`` (tables you export yourself), ``generated`` (built in
code, always present).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Remote:
    """One upstream file: ``url`` → ``<staging>/<name>``; or a Hugging Face dataset split when
    ``hub`` is set (``hub=(repo id, config or None, split)``, written as JSON Lines).

    A download is believed only when it is whole: every remote has a ``size`` and ``sha256`` pin
    or, where the upstream publishes none, a ``check`` of its own, run on the whole file before it
    is accepted (:func:`kgreason.data.fetch.content_problem`): ``json`` (the file parses),
    ``jsonl`` (every line parses, the last one is closed), ``zip`` (central directory and every
    member's CRC), ``rows:N`` (a CSV of exactly N records). ``max_size``: the most bytes an
    unpinned download may write (a pinned one stops at its size)."""

    name: str
    url: str | None = None
    size: int | None = None
    sha256: str | None = None
    hub: tuple[str, str | None, str] | None = None
    check: str | None = None
    max_size: int | None = None


@dataclass(frozen=True)
class Recipe:
    """Files to download and the converter (a function of :mod:`kgreason.data.fetch`) that turns
    them into what the loaders read under the data root."""

    remotes: tuple[Remote, ...]
    convert: str
    writes: str                      # what lands under the data root, in words
    use: str = ""                    # the override that points a run at it, when not the default


@dataclass(frozen=True)
class Source:
    name: str
    title: str
    upstream: str                    # where the data comes from (the authors' release)
    licence: str
    size: str                        # the sample the configs read / the full release
    access: str                      # public | manual | licensed | credentialed | server | export | generated
    notes: str = ""
    sample: Recipe | None = None     # `kgreason data fetch NAME`: what the default config reads
    full: Recipe | None = None       # `kgreason data fetch NAME --full`: the whole official release
    prepare: str | None = None       # `kgreason data prepare NAME --from FILE`: converter name
    aliases: tuple[str, ...] = field(default_factory=tuple)
    extra: str | None = None         # a pip extra `fetch` needs that set-up does not install (rog: hub)

    def missing_extra(self) -> str | None:
        """``pip install 'kgreason[EXTRA]'`` when this entry's fetch needs an extra that is not
        installed, else None."""
        import importlib.util

        mod = EXTRA_MODULES.get(self.extra or "")
        if mod and importlib.util.find_spec(mod) is None:
            return f"pip install 'kgreason[{self.extra}]'"
        return None


#: the module that tells whether a pip extra is installed
EXTRA_MODULES = {"hub": "datasets"}


def github(repo: str, commit: str, path: str) -> str:
    """A raw file of a public GitHub repository at a fixed commit."""
    return f"https://raw.githubusercontent.com/{repo}/{commit}/{path}"


# the upstream commits the shared samples were taken from (their PROVENANCE.md)
TOG = ("IDEA-FinAI/ToG", "7ccbb92e17579f934bb778386230de47eca0ab67")
GRASP = ("Wangshuaiia/GraSP", "0b7d63cddc1afba9df440ac4741b589bb77cdfc9")
IRCOT_FORK = ("xindili-cmu/anlp-project-multihop", "df0d5757f42f098ab6026f40323e91c369307506")
MIGRES = ("AdelWang/MIGRES", "1de6265c9ca1014054d6ba875738e785830908f8")
HIPPORAG = ("OSU-NLP-Group/HippoRAG", "c617143f01477243992a63b2e2151cc003dd3b21")
SMARTMED = ("mujahidzareen/smartmed", "316c63cddd8c4fdd456e0d7559e67821303ab032")
DDX_PATIENTS = ("karishmagrana/NLP-Final-Project", "8e01e3a890f0048f530597e3aa7377af5ec1e097")
KGBERT = ("yao8839836/kg-bert", "0b8f625108efcb9b43603b6840f2548ff3d3c973")
PATHWAYS = ("maxxyhc/PrimeKG-Pathfinding-Algorithm-Benchmark-Laboratory", "97f24f7738f2ef9868e59e2a2736cb684dae1a67")
PYKEEN = ("pykeen/pykeen", "v1.11.1")

# official releases (single place to fix each)
HOTPOT_DEV_URL = "http://curtis.ml.cmu.edu/datasets/hotpot/hotpot_dev_distractor_v1.json"
TWOWIKI_ZIP_URL = "https://www.dropbox.com/s/ms2m13252h6xubs/data_ids_april7.zip?dl=1"
DDXPLUS_ZIP_URL = "https://figshare.com/ndownloader/articles/22687585"   # English release, figshare article 22687585
FB15K237_ZIP_URL = "https://download.microsoft.com/download/8/7/0/8700516A-AB3D-4850-B4BB-805C515AECE1/FB15K-237.2.zip"
PRIMEKG_CSV_URL = "https://dataverse.harvard.edu/api/access/datafile/6180620"   # kg.csv, doi:10.7910/DVN/IXA7BM
#: records of PrimeKG's kg.csv: the 4,050,249 relationships its authors report (Chandak et al.,
#: Sci. Data 2023; the Zitnik lab's PrimeKG page), each stored in both directions, 2 x 4,050,249.
#: Not checked against the file from here; a cut download of the unpinned file fails this count
PRIMEKG_ROWS = 8_100_498
FREEBASE_DUMP_URL = "https://commondatastorage.googleapis.com/freebase-public/rdf/freebase-rdf-latest.gz"


def _gh(name: str, repo: tuple[str, str], path: str, size: int | None = None, sha256: str | None = None) -> Remote:
    return Remote(name, github(repo[0], repo[1], path), size, sha256)


SOURCES: dict[str, Source] = {s.name: s for s in [
    Source("metaqa", "MetaQA (WikiMovies KB + 1/2/3-hop questions)",
           "Zhang et al. 2018, https://github.com/yuyuz/MetaQA (files on a Google Drive folder linked there)",
           "CC BY-ND 3.0 as reported for WikiMovies/MetaQA (unverified)",
           "sample: KB 129k triples (5.0 MB) + 1,000 test questions per hop; full: 134,741-line kb.txt, "
           "9,947 / 14,872 / 14,274 test questions", "manual",
           notes="Google Drive cannot be scripted: download the MetaQA folder, then "
                 "`kgreason data prepare metaqa --from MetaQA.zip` (or the unpacked folder).",
           prepare="metaqa"),
    Source("cwq", "ComplexWebQuestions test (ToG JSON: topic MIDs + answer names)",
           "Talmor & Berant 2018, https://www.tau-nlp.sites.tau.ac.il/compwebq; the ToG release data/cwq.json",
           "research use (original); ToG's copy states none", "3,531 questions, 3.8 MB", "public",
           sample=Recipe((_gh("cwq.json", TOG, "data/cwq.json", 3833233,
                              "147e7e1ee5f73c1d9ceba7a031c23b27a1ecddd57c55efff4541f74da41e97df"),),
                         "tog_json:cwq/tog_cwq.json", "cwq/tog_cwq.json"),
           aliases=("complexwebquestions",)),
    Source("webqsp", "WebQSP test (official Parses) + WebQuestions test",
           "Yih et al. 2016, https://www.microsoft.com/en-us/download/details.aspx?id=52763; ToG and GraSP JSON copies",
           "CC BY 4.0 (WebQSP)", "sample: 100 questions (0.3 MB) + WebQuestions 2,032 (0.8 MB); full (ToG): 1,639",
           "public",
           sample=Recipe((_gh("grasp_webqsp.json", GRASP, "data/WebQSP.json", 312307,
                              "8c14bd79c75e09f10067786efc00f73737d9562b1427f458c343dca9c3d9376e"),
                          _gh("webquestions.json", TOG, "data/WebQuestions.json", 813293,
                              "129c8b0e8a8fe09944fcf84f4623d89d5ebdcf7e3b0db562258e126a3bc2b495")),
                         "tog_json:webqsp/grasp_webqsp_test100.json,webqsp/tog_webquestions_test2032.json",
                         "webqsp/grasp_webqsp_test100.json, webqsp/tog_webquestions_test2032.json"),
           full=Recipe((Remote("tog_webqsp.json", github(*TOG, "data/WebQSP.json"), check="json", max_size=256 << 20),), "tog_json:webqsp/tog_webqsp.json",
                       "webqsp/tog_webqsp.json (1,639 test questions)",
                       "dataset.path=${paths.data}/webqsp/tog_webqsp.json")),
    Source("grailqa", "GrailQA dev sample (ToG JSON)",
           "Gu et al. 2021, https://dki-lab.github.io/GrailQA/; the ToG release data/graliqa.json",
           "CC BY-SA 4.0 (GrailQA)", "1,000 questions, 3.9 MB", "public",
           sample=Recipe((_gh("grailqa.json", TOG, "data/graliqa.json", 3888219,
                              "7233dd92c6ff93cf4e095ae1866ba23b2056dab029e5bd30636d81e997cbb940"),),
                         "tog_json:grailqa/tog_grailqa.json", "grailqa/tog_grailqa.json")),
    Source("hotpotqa", "HotpotQA dev, distractor setting",
           "Yang et al. 2018, https://hotpotqa.github.io",
           "CC BY-SA 4.0", "sample: 500 questions in IRCoT's format (3.3 MB) + 200 official (1.4 MB); "
           "full dev: 7,405 questions (~45 MB)", "public",
           sample=Recipe((_gh("ircot_dev500.jsonl", IRCOT_FORK, "processed_data/hotpotqa/dev_subsampled.jsonl",
                              3312335, "837a919903fedf521211c4271f168ad5458488198e9c4d967bf5f3a579525ce8"),
                          _gh("migres_hotpot.jsonl", MIGRES, "data/hotpot.json", 1357167,
                              "62f71ce08a74d35dd2de1713f57d15f68bbb499168a7d640f956332b7b19215e")),
                         "place:hotpotqa/ircot_hotpotqa_dev500.jsonl,hotpotqa/migres_hotpot_dev200.jsonl",
                         "hotpotqa/ircot_hotpotqa_dev500.jsonl, hotpotqa/migres_hotpot_dev200.jsonl"),
           full=Recipe((Remote("hotpot_dev_distractor_v1.json", HOTPOT_DEV_URL, check="json",
                              max_size=512 << 20),), "hotpotqa",
                       "hotpotqa/hotpot_dev_distractor_v1.jsonl",
                       "dataset.path=${paths.data}/hotpotqa/hotpot_dev_distractor_v1.jsonl"),
           prepare="hotpotqa"),
    Source("musique", "MuSiQue-Ans dev",
           "Trivedi et al. 2022, https://github.com/StonyBrookNLP/musique (full release on Google Drive; "
           "`--full` reads the Hugging Face copy dgslibisey/MuSiQue)",
           "CC BY 4.0", "sample: 200 questions x 20 paragraphs (2.4 MB); full dev: 2,417 questions", "public",
           sample=Recipe((_gh("migres_musique.jsonl", MIGRES, "data/musique.json", 2448034,
                              "bbc98ab676941cf3a481cb3361cfab334cd2a24c74ed42473e4d5c14cf7577d4"),),
                         "place:musique/migres_musique_dev200.jsonl", "musique/migres_musique_dev200.jsonl"),
           full=Recipe((Remote("musique_dev.jsonl", hub=("dgslibisey/MuSiQue", None, "validation"), check="jsonl"),), "musique",
                       "musique/musique_ans_v1.0_dev.jsonl",
                       "dataset.path=${paths.data}/musique/musique_ans_v1.0_dev.jsonl"),
           prepare="musique"),
    Source("twowiki", "2WikiMultiHopQA dev + HippoRAG passage corpus",
           "Ho et al. 2020, https://github.com/Alab-NII/2wikimultihop; corpus: https://github.com/OSU-NLP-Group/HippoRAG",
           "Apache-2.0 (2Wiki); HippoRAG repository MIT", "sample: 200 questions (0.9 MB) + 6,119 passages (3.1 MB); "
           "full dev: 12,576 questions", "public",
           sample=Recipe((_gh("migres_2wiki.jsonl", MIGRES, "data/wikihop.json", 885811,
                              "65dc34d5b9f275457b2c6524443916730f0d6a3a59281d828b38028d0fbf0e3b"),
                          _gh("hipporag_corpus.json", HIPPORAG, "reproduce/dataset/2wikimultihopqa_corpus.json",
                              3083943, "9d6e352952aafb18dab22bf8195039461321a44a949df902ae83bce134ad238a")),
                         "place:2wikimultihopqa/migres_2wiki_dev200.jsonl,2wikimultihopqa/hipporag_2wikimultihopqa_corpus.json",
                         "2wikimultihopqa/migres_2wiki_dev200.jsonl, 2wikimultihopqa/hipporag_2wikimultihopqa_corpus.json"),
           full=Recipe((Remote("data_ids_april7.zip", TWOWIKI_ZIP_URL, check="zip", max_size=4 << 30),), "twowiki",
                       "2wikimultihopqa/dev.jsonl", "dataset.path=${paths.data}/2wikimultihopqa/dev.jsonl dataset.corpus=null"),
           prepare="twowiki", aliases=("2wiki", "2wikimultihopqa")),
    Source("ddxplus", "DDXPlus (knowledge base + patients)",
           "Tchango et al. 2022, https://figshare.com/articles/dataset/DDXPlus_Dataset_English_/22687585 "
           "(code: https://github.com/mila-iqia/ddxplus)",
           "CC-BY", "sample: 49 pathologies x 223 evidences + 588 patients (1.3 MB); full: ~1.3M patients "
           "(test split ~134k)", "public",
           notes="The sample's patients are from the first, French-coded release (decoded via its English columns).",
           sample=Recipe((_gh("release_conditions.json", SMARTMED, "release_conditions.json", 21029,
                              "61e16706a2ab78efb997bab8a865c83b46151b10b0377b63530745f1e18e71a8"),
                          _gh("release_evidences.json", SMARTMED, "release_evidences.json", 194477,
                              "9c3438b28fc54d460ccb06f7f945ff2d2e96af7f0303cb702bf6688c612ae316"),
                          _gh("patients_val.csv", DDX_PATIENTS, "data/Project_Val_Data_FewShot_Learning_588samples.csv",
                              1062729, "5fa4874f258850912c75084f35470c51bb59d7cf0ac2a4182285ee0594501b4a")),
                         "place:ddxplus/release_conditions.json,ddxplus/release_evidences.json,"
                         "ddxplus/patients_val_sample588_karishmagrana.csv",
                         "ddxplus/release_conditions.json, ddxplus/release_evidences.json, "
                         "ddxplus/patients_val_sample588_karishmagrana.csv"),
           full=Recipe((Remote("ddxplus_release.zip", DDXPLUS_ZIP_URL, check="zip", max_size=8 << 30),), "ddxplus",
                       "ddxplus/release_conditions.json, ddxplus/release_evidences.json, ddxplus/release_test_patients.csv",
                       "dataset.path=${paths.data}/ddxplus/release_test_patients.csv"),
           prepare="ddxplus"),
    Source("probsum", "ProbSum (BioNLP 2023 Task 1A: progress note -> problem list)",
           "Gao et al. 2023, https://physionet.org/content/bionlp-workshop-2023-task-1a/ (MIMIC-III derived)",
           "PhysioNet credentialed health data licence (data use agreement; CITI training)",
           "one CSV of progress notes (sizes on the PhysioNet page)", "credentialed",
           notes="Sign the PhysioNet agreement, download the CSV, then "
                 "`kgreason data prepare probsum --from test.csv` (writes <data>/probsum/test.csv; point PROBSUM_CSV at it).",
           prepare="probsum"),
    Source("fb15k237", "Freebase slice: FB15k-237 + English names",
           "Toutanova & Chen 2015, https://www.microsoft.com/en-us/download/details.aspx?id=52312; "
           "names from https://github.com/yao8839836/kg-bert",
           "CC BY 4.0 (FB15k-237, as stated on its release page); kg-bert Apache-2.0; Freebase CC BY",
           "310,116 triples, 14,541 entities, 237 relations (~8 MB)", "public",
           sample=Recipe((Remote("FB15K-237.2.zip", FB15K237_ZIP_URL, check="zip", max_size=2 << 30),
                          _gh("entity2text.txt", KGBERT, "data/FB15k-237/entity2text.txt", 392383,
                              "16beedcfad3d32696e8b0b98cfa0f5eeb144f5142225f227a64fd9ce37447da5"),
                          _gh("FB15k_mid2name.txt", KGBERT, "data/FB15k-237/FB15k_mid2name.txt", 392384,
                              "4da94b8059a83bc7e08c832f573d34221d38e85030576e332a0d0e9726d13d73")),
                         "fb15k237", "freebase_fb15k237/{train,valid,test}.txt.gz, entity2text.txt, FB15k_mid2name.txt"),
           prepare="fb15k237", aliases=("freebase_slice", "fb15k-237")),
    Source("freebase", "Full Freebase behind a SPARQL endpoint (Virtuoso)",
           "Google's last Freebase RDF dump, https://developers.google.com/freebase",
           "CC BY", "~400 GB unzipped (as ToG reports); ~125 GB after the English filter", "server",
           notes="Not a file a run reads: load the dump into Virtuoso and point FREEBASE_SPARQL_URL at it; "
                 "`kgreason data prepare freebase [--from DUMP]` prints the steps.",
           prepare="freebase", aliases=("freebase_sparql",)),
    Source("primekg", "PrimeKG (precision-medicine KG)",
           "Chandak et al. 2023, Harvard Dataverse doi:10.7910/DVN/IXA7BM; pathway subset: "
           "https://github.com/maxxyhc/PrimeKG-Pathfinding-Algorithm-Benchmark-Laboratory (DrugMechDB pathways)",
           "CC BY 4.0 (PrimeKG); DrugMechDB CC0 as reported (unverified); the subset's repository states none",
           "sample: 1,113 pathway edges (0.5 MB); full kg.csv: ~4M edges, ~1 GB", "public",
           sample=Recipe((_gh("benchmark_pathways_edges.csv", PATHWAYS, "data/benchmark_pathways_edges.csv", 216151,
                              "c45d756e414a28f4b7e02b7dd964c9b12bde620fefcce7e678b91f7c0c600654"),
                          _gh("benchmark_pathways_nodes.csv", PATHWAYS, "data/benchmark_pathways_nodes.csv", 177322,
                              "013868f5d2b1491cef05c307c7fc352e0f810752745f9672a3f66b17115c3775"),
                          _gh("benchmark_pathways_metadata.csv", PATHWAYS, "data/benchmark_pathways_metadata.csv", 64746,
                              "1ff0337e6e4d486b5a06292dad38aa37e7a98cf7bab67a2ac60aff0e6e5df0e2")),
                         "place:primekg_drugmech_pathways/benchmark_pathways_edges.csv,"
                         "primekg_drugmech_pathways/benchmark_pathways_nodes.csv,"
                         "primekg_drugmech_pathways/benchmark_pathways_metadata.csv",
                         "primekg_drugmech_pathways/benchmark_pathways_{edges,nodes,metadata}.csv"),
           full=Recipe((Remote("kg.csv", PRIMEKG_CSV_URL, check=f"rows:{PRIMEKG_ROWS}", max_size=4 << 30),), "primekg", "primekg/kg.csv",
                       "kg.path=${paths.data}/primekg/kg.csv"),
           prepare="primekg"),
    Source("umls", "UMLS Metathesaurus (MRCONSO / MRREL / MRSTY)",
           "US National Library of Medicine, https://www.nlm.nih.gov/research/umls/ (UTS account)",
           "UMLS Metathesaurus Licence (free, personal account; some source vocabularies add restrictions)",
           "a release is several GB zipped; MRCONSO.RRF and MRREL.RRF are GBs each", "licensed",
           notes="`kgreason data prepare umls --from <release>.zip` (or its META folder); writes <data>/umls/META; point UMLS_META at it.",
           prepare="umls"),
    Source("umls_semnet", "UMLS semantic network (135 types, 46 relations; ConvE split)",
           "Kok & Domingos 2007, as shipped by pykeen (https://github.com/pykeen/pykeen)",
           "MIT (pykeen)", "6,529 triples (0.3 MB)", "public",
           sample=Recipe(tuple(_gh(f"{s}.txt", PYKEEN, f"src/pykeen/datasets/umls/{s}.txt", n, h) for s, n, h in (
               ("train", 260013, "873ef4925516b83e7f6f8cc02b4be51d848828710a7f65a956f0ac4a9e452f35"),
               ("valid", 32963, "025c98f8a4891e2a6582ec5b40ee0d904031edad9c52554522f4b7904820c98e"),
               ("test", 32968, "a7eb529a3d2810fcc96341ccc97c625a5e202f8389673aa6bd317eeebbb79014"))),
               "place:umls_semnet/train.txt,umls_semnet/valid.txt,umls_semnet/test.txt",
               "umls_semnet/{train,valid,test}.txt")),
    Source("pkg", "PubMed knowledge graph (PKG 2.0)",
           "Xu et al., https://github.com/xjtu-bmi-lab/PKG",
           "see the PKG release", "tens of millions of papers; export only the tables you need", "export",
           notes="Export papers/authorship/authors/citations as TSV (columns in docs/data.md) and point PKG_DIR at them."),
    Source("rog", "RoG per-question Freebase subgraphs (WebQSP test)",
           "Luo et al. 2024, Hugging Face rmanluo/RoG-webqsp (also rmanluo/RoG-cwq)",
           "as stated on the Hugging Face dataset card (WebQSP: CC BY 4.0)", "1,628 test questions with subgraphs",
           "public",
           sample=Recipe((Remote("rog_webqsp_test.jsonl", hub=("rmanluo/RoG-webqsp", None, "test"), check="jsonl"),), "rog",
                         "<data>/rog/webqsp_test.jsonl (point ROG_JSONL at it)"),
           aliases=("rog_subgraphs",),
           # the `datasets` library (and pyarrow, ~100 MB) only for this one Hub download: not in set-up
           extra="hub"),
    Source("embedded", "The embedded world (KG, KGQA, multi-hop and clinical questions)",
           "generated in code (kgreason/kg/embedded.py, kgreason/data/embedded.py)", "MIT (this project)",
           "~1.8k entities, ~6.7k triples", "generated"),
    Source("synthetic", "Synthetic power-law KG (retrieval benchmarks)", "generated in code (kgreason/kg/synthetic.py)",
           "MIT (this project)", "40k entities, 340k triples by default", "generated"),
]}

#: every config option → its catalog entry
CONFIGS: dict[str, str] = {
    "dataset/cwq": "cwq", "dataset/webqsp": "webqsp", "dataset/grailqa": "grailqa", "dataset/metaqa": "metaqa",
    "dataset/hotpotqa": "hotpotqa", "dataset/musique": "musique", "dataset/twowiki": "twowiki",
    "dataset/ddxplus": "ddxplus", "dataset/probsum": "probsum", "dataset/embedded": "embedded",
    "dataset/embedded_multihop": "embedded", "dataset/embedded_clinical": "embedded",
    "kg/metaqa": "metaqa", "kg/freebase_slice": "fb15k237", "kg/freebase_sparql": "freebase", "kg/umls": "umls",
    "kg/umls_semnet": "umls_semnet", "kg/primekg": "primekg", "kg/pkg": "pkg", "kg/rog_subgraphs": "rog",
    "kg/ddxplus": "ddxplus", "kg/embedded": "embedded", "kg/synthetic": "synthetic",
}

#: settings that take a list of values to check (each value is a variant a run can pick)
VARIANTS: dict[str, dict[str, list]] = {"dataset/metaqa": {"hops": [1, 2, 3]}}


def lookup(name: str) -> Source:
    """The entry called ``name`` (or one of its aliases, or a config name such as ``kg/freebase_slice``)."""
    key = name.lower().strip()
    if key in SOURCES:
        return SOURCES[key]
    if key in CONFIGS:
        return SOURCES[CONFIGS[key]]
    for s in SOURCES.values():
        if key in s.aliases:
            return s
    for cfg, src in CONFIGS.items():
        if cfg.split("/", 1)[1] == key:
            return SOURCES[src]
    raise KeyError(f"{name!r}: no such dataset or KG; known: {', '.join(sorted(SOURCES))} "
                   "(`kgreason data list` shows them)")


__all__ = ["Remote", "Recipe", "Source", "SOURCES", "CONFIGS", "VARIANTS", "lookup", "github"]
