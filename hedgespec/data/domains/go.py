"""The Gene Ontology (from Bioconductor's GO.db), split between biology and chemistry: terms about
reactions and metabolism go to chemistry, the rest to biology, so that the two corpora share no
term."""
import re
import sqlite3
from typing import NamedTuple

from ..sources import Sources

GO_SQLITE = "usr/lib/R/site-library/GO.db/extdata/GO.sqlite"
ONTOLOGIES = {"BP": "biological process", "MF": "molecular function", "CC": "cellular component"}
_METABOLISM = re.compile(r"\b(metabolic|biosynthetic|catabolic) process\b")


class Term(NamedTuple):
    go_id: str
    name: str
    ontology: str
    definition: str

    @property
    def chemistry(self) -> bool:
        return self.definition.startswith("Catalysis of") or bool(_METABOLISM.search(self.name))

    @property
    def text(self) -> str:
        return f"{self.name} ({self.go_id}, {ONTOLOGIES[self.ontology]}): {self.definition}"


def terms(src: Sources, chemistry: bool) -> list[Term]:
    db = sqlite3.connect(f"file:{src.file('go-db', GO_SQLITE)}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT go_id, term, ontology, definition FROM go_term ORDER BY go_id").fetchall()
    finally:
        db.close()
    return [t for t in map(Term._make, rows)
            if t.ontology in ONTOLOGIES and t.definition and t.chemistry == chemistry]
