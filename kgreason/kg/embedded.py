"""The embedded default world: a seeded, self-generated KG with questions, passages and patients.

Nothing is read from disk; :func:`make_world` builds everything from a seed in well under a
second, so it is the fixture for every test that needs a KG and the default of ``python -m
kgreason``.

What it contains (default sizes, about 2k entities and 7k triples):

* a film world (films, people, cities, countries, languages, genres, companies, awards) with
  Freebase-style relation names ``domain.type.property`` (so ReKnoS super-relations are the
  ``domain.type`` prefixes);
* a clinical world (diseases, findings, drugs, anatomy) for the diagnosis study;
* KGQA questions of 1, 2 and 3 hops with gold answers and gold relation paths. A path step that is
  traversed against the edge direction is written ``~relation`` (e.g. "which films did X
  direct?" is ``("~film.film.directed_by",)``);
* a verbalised corpus: one short passage per entity. A few facts (``World.held_out``) appear in
  the passages but not in the KG, which is what SubQRAG's graph update is for;
* patients: a note listing findings, with gold diagnoses.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from kgreason.kg.store import KG
from kgreason.types import Example

_ONSETS = ["b", "br", "c", "d", "dr", "f", "g", "gr", "h", "j", "k", "l", "m", "n", "p", "r", "s",
           "st", "t", "tr", "v", "w", "z", "sh", "th", "ch"]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ea", "ou", "y"]
_CODAS = ["", "", "n", "r", "l", "s", "th", "x", "m", "nd", "rk", "t"]
_ADJ = ["Silent", "Crimson", "Hidden", "Broken", "Golden", "Last", "Frozen", "Burning", "Distant",
        "Hollow", "Iron", "Quiet", "Wild", "Velvet", "Electric", "Northern", "Paper", "Glass",
        "Secret", "Lonely", "Endless", "Scarlet", "Midnight", "Savage"]
_NOUN = ["Harbor", "Garden", "River", "Empire", "Machine", "Winter", "Mirror", "Kingdom", "Road",
         "Summer", "Lantern", "Orchard", "Signal", "Voyage", "Tide", "Citadel", "Echo", "Frontier",
         "Mountain", "Letter", "Island", "Storm", "Archive", "Circus"]
_GENRES = ["drama", "comedy", "thriller", "science fiction", "horror", "romance", "documentary",
           "animation", "western", "musical", "crime", "fantasy", "war", "mystery", "adventure"]
_ANATOMY = ["heart", "lung", "liver", "kidney", "brain", "stomach", "skin", "joint", "eye", "ear",
            "throat", "colon", "pancreas", "thyroid", "bladder", "spine", "muscle", "blood",
            "bone", "nerve"]
_FINDING_WORDS = ["pain", "swelling", "fever", "rash", "cough", "fatigue", "numbness", "bleeding",
                  "stiffness", "weakness", "itching", "cramping", "dizziness", "tremor",
                  "discharge"]


@dataclass
class World:
    """Everything :func:`make_world` generates. ``kg`` lacks the ``held_out`` facts."""

    kg: KG
    full_triples: list[tuple[str, str, str]]
    held_out: list[tuple[str, str, str]]
    questions: list[Example]
    corpus: list[tuple[str, str]]  # (title, passage)
    patients: list[Example]
    entity_types: dict[str, str] = field(default_factory=dict)

    def passage_of(self, title: str) -> str:
        return dict(self.corpus)[title]


class _Names:
    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def word(self, syllables: int) -> str:
        s = "".join(
            self.rng.choice(_ONSETS) + self.rng.choice(_VOWELS) + (self.rng.choice(_CODAS) if i == syllables - 1 else "")
            for i in range(syllables)
        )
        return s.capitalize()

    def unique(self, make) -> str:
        for _ in range(1000):
            n = make()
            if n not in self.used:
                self.used.add(n)
                return n
        raise RuntimeError("name space exhausted")  # pragma: no cover


def _pick(rng: np.random.Generator, items: list, k: int) -> list:
    k = min(k, len(items))
    return [items[i] for i in rng.choice(len(items), size=k, replace=False)]


@lru_cache(maxsize=8)
def make_world(
    seed: int = 0,
    n_people: int = 800,
    n_films: int = 500,
    n_cities: int = 120,
    n_countries: int = 30,
    n_companies: int = 60,
    n_diseases: int = 60,
    n_findings: int = 150,
    n_drugs: int = 40,
    n_questions_per_hop: int = 100,
    n_patients: int = 100,
    held_out_fraction: float = 0.03,
) -> World:
    """Generate the embedded world. Same arguments, same world (byte for byte)."""
    rng = np.random.default_rng(seed)
    nm = _Names(rng)
    types: dict[str, str] = {}

    def add(name: str, typ: str) -> str:
        types[name] = typ
        return name

    languages = [add(nm.unique(lambda: nm.word(2) + "ish"), "language") for _ in range(15)]
    countries = [add(nm.unique(lambda: nm.word(2) + "ia"), "country") for _ in range(n_countries)]
    cities = [add(nm.unique(lambda: nm.word(2) + rng.choice(["ton", "burg", "ville", " City", "port"])), "city")
              for _ in range(n_cities)]
    genres = [add(g, "genre") for g in _GENRES]
    companies = [add(nm.unique(lambda: nm.word(2) + rng.choice([" Pictures", " Studios", " Films"])), "company")
                 for _ in range(n_companies)]
    awards = [add(nm.unique(lambda: f"{nm.word(2)} Award for {rng.choice(['Best Director', 'Best Actor', 'Best Screenplay', 'Lifetime Achievement'])}"), "award")
              for _ in range(20)]
    people = [add(nm.unique(lambda: f"{nm.word(2)} {nm.word(int(rng.integers(2, 4)))}"), "person")
              for _ in range(n_people)]
    films = [add(nm.unique(lambda: f"The {rng.choice(_ADJ)} {rng.choice(_NOUN)}" + ("" if rng.random() < 0.6 else f" {rng.choice(['II', 'III', 'Returns', 'Rising'])}")), "film")
             for _ in range(n_films)]

    T: list[tuple[str, str, str]] = []
    # geography
    for i, c in enumerate(cities):
        T.append((c, "location.location.containedby", countries[i % n_countries]))
    for i, k in enumerate(countries):
        T.append((k, "location.country.capital", cities[i]))
        T.append((k, "location.country.official_language", languages[int(rng.integers(len(languages)))]))
    for co in companies:
        T.append((co, "organization.organization.headquarters", cities[int(rng.integers(n_cities))]))
    # people
    directors = people[: n_people // 8]
    writers = people[n_people // 8 : n_people // 4]
    actors = people[n_people // 4 :]
    for p in people:
        city = cities[int(rng.integers(n_cities))]
        T.append((p, "people.person.place_of_birth", city))
        T.append((p, "people.person.nationality", countries[cities.index(city) % n_countries]))
        if rng.random() < 0.1:
            T.append((p, "award.award_winner.awards_won", awards[int(rng.integers(len(awards)))]))
    for a, b in zip(people[0::17], people[5::17]):
        T.append((a, "people.person.spouse", b))
    # films
    for f in films:
        T.append((f, "film.film.directed_by", directors[int(rng.integers(len(directors)))]))
        T.append((f, "film.film.written_by", writers[int(rng.integers(len(writers)))]))
        for a in _pick(rng, actors, int(rng.integers(2, 5))):
            T.append((f, "film.film.starring", a))
        for g in _pick(rng, genres, int(rng.integers(1, 3))):
            T.append((f, "film.film.genre", g))
        T.append((f, "film.film.language", languages[int(rng.integers(len(languages)))]))
        T.append((f, "film.film.produced_by", companies[int(rng.integers(n_companies))]))

    # clinical world
    anatomy = [add(a, "anatomy") for a in _ANATOMY]
    findings = [add(nm.unique(lambda: ("" if rng.random() < 0.5 else f"{rng.choice(['acute', 'chronic', 'mild', 'severe', 'recurrent'])} ") + f"{rng.choice(_ANATOMY)} {rng.choice(_FINDING_WORDS)}"), "finding")
                for _ in range(n_findings)]
    diseases = [add(nm.unique(lambda: f"{nm.word(2)} {rng.choice(['syndrome', 'disease', 'fever', 'disorder', 'itis'])}".replace(" itis", "itis")), "disease")
                for _ in range(n_diseases)]
    drugs = [add(nm.unique(lambda: nm.word(2).lower() + rng.choice(["mab", "pril", "olol", "statin", "cillin", "azole"])), "drug")
             for _ in range(n_drugs)]
    for fnd in findings:
        T.append((fnd, "medicine.finding.located_in", anatomy[_ANATOMY.index(fnd.split(" ")[-2])]))
    symptoms_of: dict[str, list[str]] = {}
    for d in diseases:
        syms = _pick(rng, findings, int(rng.integers(3, 7)))
        symptoms_of[d] = syms
        for s in syms:
            T.append((d, "medicine.disease.symptom", s))
        T.append((d, "medicine.disease.affects", anatomy[int(rng.integers(len(anatomy)))]))
        for dr in _pick(rng, drugs, int(rng.integers(1, 3))):
            T.append((d, "medicine.disease.treated_by", dr))
    for d, parent in zip(diseases[::6], diseases[3::6]):
        T.append((d, "medicine.disease.subtype_of", parent))
    for dr in drugs:
        for s in _pick(rng, findings, 2):
            T.append((dr, "medicine.drug.side_effect", s))

    T = list(dict.fromkeys(T))  # dedupe, keep order

    # ---- questions from the full world -------------------------------------------------
    out_idx: dict[tuple[str, str], list[str]] = defaultdict(list)
    in_idx: dict[tuple[str, str], list[str]] = defaultdict(list)
    for h, r, t in T:
        out_idx[(h, r)].append(t)
        in_idx[(t, r)].append(h)

    def follow(starts: list[str], path: tuple[str, ...]) -> list[str]:
        cur = list(dict.fromkeys(starts))
        for step in path:
            nxt: list[str] = []
            for e in cur:
                nxt.extend(in_idx[(e, step[1:])] if step.startswith("~") else out_idx[(e, step)])
            cur = list(dict.fromkeys(nxt))
        return cur

    templates: list[tuple[int, str, list[str], tuple[str, ...]]] = [
        (1, "Who directed {}?", films, ("film.film.directed_by",)),
        (1, "Who wrote the film {}?", films, ("film.film.written_by",)),
        (1, "Which company produced {}?", films, ("film.film.produced_by",)),
        (1, "Where was {} born?", people, ("people.person.place_of_birth",)),
        (1, "Which films did {} direct?", directors, ("~film.film.directed_by",)),
        (1, "What is the capital of {}?", countries, ("location.country.capital",)),
        (2, "Where was the director of {} born?", films, ("film.film.directed_by", "people.person.place_of_birth")),
        (2, "In which city is the company that produced {} headquartered?", films, ("film.film.produced_by", "organization.organization.headquarters")),
        (2, "Which films starred actors born in {}?", cities, ("~people.person.place_of_birth", "~film.film.starring")),
        (2, "What is the official language of the country where {} was born?", people, ("people.person.nationality", "location.country.official_language")),
        (2, "Who directed films starring {}?", actors, ("~film.film.starring", "film.film.directed_by")),
        (3, "What language is spoken in the country of the birthplace of the director of {}?", films, ("film.film.directed_by", "people.person.place_of_birth", "location.location.containedby")),
        (3, "In which country is the company that produced {} headquartered?", films, ("film.film.produced_by", "organization.organization.headquarters", "location.location.containedby")),
        (3, "Which genres are the films directed by the director of {}?", films, ("film.film.directed_by", "~film.film.directed_by", "film.film.genre")),
        (3, "Where were the co-stars of {} born?", actors, ("~film.film.starring", "film.film.starring", "people.person.place_of_birth")),
    ]
    # the 3-hop "language" template really ends in the country; fix its wording to match
    templates[11] = (3, "In which country was the director of {} born?", films,
                     ("film.film.directed_by", "people.person.place_of_birth", "location.location.containedby"))
    questions: list[Example] = []
    by_hop: dict[int, list] = defaultdict(list)
    for t in templates:
        by_hop[t[0]].append(t)
    for hop in (1, 2, 3):
        made, tries, seen = 0, 0, set()
        while made < n_questions_per_hop and tries < 50 * n_questions_per_hop:
            tries += 1
            _, text, pool, path = by_hop[hop][int(rng.integers(len(by_hop[hop])))]
            topic = pool[int(rng.integers(len(pool)))]
            ans = [a for a in follow([topic], path) if a != topic]
            if not ans or len(ans) > 12 or (text, topic) in seen:
                continue
            seen.add((text, topic))
            questions.append(Example(
                id=f"emb-{hop}hop-{made:03d}", question=text.format(topic), answers=tuple(ans),
                answer_groups=tuple((a,) for a in ans), topic_entities=(topic,), topic_names=(topic,),
                gold_paths=(path,), hops=hop, extra={"template": text},
            ))
            made += 1

    # ---- held-out facts: in passages, not in the KG -----------------------------------
    candidates = [i for i, (h, r, t) in enumerate(T) if r in ("film.film.starring", "people.person.place_of_birth")]
    n_hold = int(round(held_out_fraction * len(T)))
    hold_idx = set(rng.choice(candidates, size=min(n_hold, len(candidates)), replace=False).tolist())
    held_out = [T[i] for i in sorted(hold_idx)]
    kg_triples = [t for i, t in enumerate(T) if i not in hold_idx]

    # ---- corpus: one passage per entity ------------------------------------------------
    corpus = _verbalise(T, types)

    # ---- patients ------------------------------------------------------------------------
    patients: list[Example] = []
    for i in range(n_patients):
        d = diseases[int(rng.integers(n_diseases))]
        n_true = int(rng.integers(2, min(4, len(symptoms_of[d])) + 1))
        shown = _pick(rng, symptoms_of[d], n_true)
        if rng.random() < 0.4:  # a distractor finding, as in real notes
            shown.append(findings[int(rng.integers(n_findings))])
        shown = list(dict.fromkeys(shown))
        age = int(rng.integers(18, 90))
        sex = "woman" if rng.random() < 0.5 else "man"
        note = (f"A {age}-year-old {sex} presents with " + ", ".join(shown[:-1])
                + (" and " if len(shown) > 1 else "") + shown[-1] + ". Vital signs are otherwise stable.")
        patients.append(Example(
            id=f"emb-patient-{i:03d}", question=note, answers=(d,), answer_groups=((d,),),
            topic_entities=tuple(shown), topic_names=tuple(shown), findings=tuple(shown), diagnoses=(d,),
            extra={"age": age, "sex": sex},
        ))

    kg = KG.from_triples(kg_triples, entity_types=types, extra_entities=list(types), name="embedded")
    return World(kg=kg, full_triples=T, held_out=held_out, questions=questions, corpus=corpus,
                 patients=patients, entity_types=types)


_PHRASES = {
    "film.film.directed_by": "{h} is a film directed by {t}.",
    "film.film.written_by": "The screenplay of {h} was written by {t}.",
    "film.film.starring": "{h} stars {t}.",
    "film.film.genre": "{h} is a {t} film.",
    "film.film.language": "{h} was filmed in {t}.",
    "film.film.produced_by": "{h} was produced by {t}.",
    "people.person.place_of_birth": "{h} was born in {t}.",
    "people.person.nationality": "{h} is a citizen of {t}.",
    "people.person.spouse": "{h} is married to {t}.",
    "award.award_winner.awards_won": "{h} won the {t}.",
    "location.location.containedby": "{h} is a city in {t}.",
    "location.country.capital": "The capital of {h} is {t}.",
    "location.country.official_language": "The official language of {h} is {t}.",
    "organization.organization.headquarters": "{h} is headquartered in {t}.",
    "medicine.finding.located_in": "{h} is a finding of the {t}.",
    "medicine.disease.symptom": "{h} typically presents with {t}.",
    "medicine.disease.affects": "{h} affects the {t}.",
    "medicine.disease.treated_by": "{h} is treated with {t}.",
    "medicine.disease.subtype_of": "{h} is a subtype of {t}.",
    "medicine.drug.side_effect": "{t} is a known side effect of {h}.",
}


def verbalise_triple(h: str, r: str, t: str) -> str:
    """One English sentence for a triple of the embedded world."""
    return _PHRASES.get(r, "{h} " + r.rsplit(".", 1)[-1].replace("_", " ") + " {t}.").format(h=h, t=t)


def _verbalise(T: list[tuple[str, str, str]], types: dict[str, str]) -> list[tuple[str, str]]:
    by_head: dict[str, list[str]] = defaultdict(list)
    for h, r, t in T:
        by_head[h].append(verbalise_triple(h, r, t))
    out = []
    for ent, typ in types.items():
        sents = by_head.get(ent)
        if not sents:
            continue
        out.append((ent, f"{ent} ({typ}). " + " ".join(sents)))
    return out


def embedded_kg(seed: int = 0) -> KG:
    """The embedded KG (Hydra target for ``kg=embedded``)."""
    return make_world(seed).kg
