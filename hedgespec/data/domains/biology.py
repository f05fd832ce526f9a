"""biology: Gene Ontology definitions (outside biochemistry) and the Biopython tutorial; prompts
ask for GO definitions, or to simplify a definition or summarise a tutorial passage."""
import gzip
import random
import re
from typing import Iterator

from ..sources import Sources
from ..templates import Ask
from ..text import FIELD_CHARS, chunks
from . import go

SOURCES = ("go-db", "biopython-doc")

TUTORIAL = "usr/share/doc/python-biopython-doc/Doc/Tutorial.txt.gz"
# HeVeA's plain-text rendering: section underlines and the <<...>> brackets around code.
_UNDERLINE = re.compile(r"^(\*=)+\*?$|^[*=-]{8,}$", re.M)
_REGULATION = re.compile(r"^(positive |negative )?regulation of ")


def tutorial(src: Sources) -> str:
    with gzip.open(src.file("biopython-doc", TUTORIAL), "rt", encoding="utf-8") as f:
        text = f.read()
    start = text.find("\nChapter 1  Introduction")  # skips the table of contents
    text = text[start + 1 if start >= 0 else 0:]
    text = _UNDERLINE.sub("", text)
    text = re.sub(r"^(\s*)<<", r"\1", text, flags=re.M)
    return re.sub(r"^\s*>>$", "", text, flags=re.M)


def documents(src: Sources) -> Iterator[tuple[str, str]]:
    for term in go.terms(src, chemistry=False):
        yield "go-db", term.text
    for piece in chunks(tutorial(src)):
        yield "biopython-tutorial", piece


def _prose(passage: str) -> bool:
    """Mostly sentences: little code, and not a table."""
    lines = passage.split("\n")
    code = sum(line.lstrip().startswith((">>>", "...")) for line in lines)
    chars = "".join(passage.split())
    letters = sum(c.isalpha() for c in chars)
    return len(passage) >= 400 and code <= len(lines) // 4 and letters >= 0.8 * len(chars)


def asks(src: Sources, rng: random.Random) -> list[Ask]:
    # Regulation terms are one formula each; asking for them would test the formula, not biology.
    terms = [t for t in go.terms(src, chemistry=False)
             if not _REGULATION.match(t.name) and len(t.definition.split()) >= 12
             and len(t.definition) <= FIELD_CHARS]
    picked = rng.sample(terms, 32)
    out = [Ask("question", "define_go", {"term": t.name}, t.definition) for t in picked[:24]]
    out += [Ask("copy", "simplify_go", {"term": t.name, "definition": t.definition}) for t in picked[24:]]
    passages = [p for p in chunks(tutorial(src), FIELD_CHARS) if _prose(p)]
    out += [Ask("copy", "summarise_bio", {"passage": p}) for p in rng.sample(passages, 8)]
    return out
