"""chemistry: the biochemistry part of the Gene Ontology (reactions, metabolism) and the element
descriptions of mendeleev; prompts ask about elements and catalysed reactions. The smallest
domain: no registry package ships much chemistry prose."""
import random
import sqlite3
from typing import Iterator, NamedTuple

from ..sources import Sources
from ..templates import Ask
from ..text import FIELD_CHARS
from . import go

SOURCES = ("go-db", "mendeleev")

REACTION = "Catalysis of the reaction: "


class Element(NamedTuple):
    name: str
    description: str | None
    sources: str | None
    uses: str | None
    text: str


def _sentence(text: str | None) -> str:
    text = " ".join((text or "").split())
    return text if not text or text.endswith(".") else text + "."


def elements(src: Sources) -> list[Element]:
    db = sqlite3.connect(f"file:{src.file('mendeleev', 'mendeleev/elements.db')}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    try:
        rows = db.execute("SELECT e.*, s.name AS series FROM elements e LEFT JOIN series s ON s.id = e.series_id "
                          "ORDER BY atomic_number").fetchall()
    finally:
        db.close()
    out = []
    for r in rows:
        facts = [f"{r['name']} ({r['symbol']}) is the chemical element with atomic number {r['atomic_number']}"]
        if r["atomic_weight"]:
            facts.append(f"atomic weight {r['atomic_weight']:g}")
        place = f"period {r['period']}" + (f", group {r['group_id']}" if r["group_id"] else "")
        facts.append(f"in {place} of the periodic table ({r['block']}-block)")
        text = ", ".join(facts) + "."
        if r["series"]:
            text += f" It belongs to the {r['series'].lower()}."
        if r["electronic_configuration"]:
            text += f" Its electron configuration is {r['electronic_configuration']}."
        if r["density"]:
            text += f" Density: {r['density']:g} g/cm3."
        parts = [text, _sentence(r["description"]),
                 _sentence(r["sources"]) and f"Sources: {_sentence(r['sources'])}",
                 _sentence(r["uses"]) and f"Uses: {_sentence(r['uses'])}",
                 _sentence(r["name_origin"]) and f"Name origin: {_sentence(r['name_origin'])}",
                 _sentence(r["discoverers"]) and f"Discovery: {_sentence(r['discoverers'])}"]
        out.append(Element(r["name"], _sentence(r["description"]), _sentence(r["sources"]),
                           _sentence(r["uses"]), "\n\n".join(p for p in parts if p)))
    return out


def documents(src: Sources) -> Iterator[tuple[str, str]]:
    for term in go.terms(src, chemistry=True):
        yield "go-db", term.text
    for element in elements(src):
        yield "mendeleev", element.text


def asks(src: Sources, rng: random.Random) -> list[Ask]:
    known = [e for e in elements(src) if e.uses and e.sources]
    described = [e for e in known if e.description and 200 <= len(e.description) <= FIELD_CHARS]
    summarised = rng.sample(described, 8)
    asked = rng.sample([e for e in known if e not in summarised], 12)
    out = [Ask("question", "element_uses", {"element": e.name}, f"{e.uses} {e.sources}") for e in asked]
    out += [Ask("copy", "summarise_element", {"element": e.name, "description": e.description})
            for e in summarised]
    reactions = [t for t in go.terms(src, chemistry=True)
                 if t.definition.startswith(REACTION) and len(t.definition) <= FIELD_CHARS]
    picked = rng.sample(reactions, 20)
    out += [Ask("question", "catalysis", {"term": t.name.removesuffix(" activity")}, t.definition)
            for t in picked[:12]]
    out += [Ask("copy", "explain_reaction", {"reaction": t.definition[len(REACTION):]}) for t in picked[12:]]
    return out
