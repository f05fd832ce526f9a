"""news: the Lee corpus (ABC news articles, shipped as gensim test data) and 70 Reuters-21578
articles (shipped with R's tm); prompts summarise an article, title it, or write the story for a
Reuters headline. The smallest corpus after chemistry, and most prompts are its own articles:
the leakage check removes those from training."""
import html
import random
import re
from typing import Iterator, NamedTuple

from ..sources import Sources
from ..templates import Ask
from ..text import FIELD_CHARS, squash

SOURCES = ("gensim", "r-cran-tm")

LEE = ("gensim/test/test_data/lee_background.cor", "gensim/test/test_data/lee.cor")
REUTERS = "usr/lib/R/site-library/tm/texts"
_TITLE = re.compile(r"<TITLE>(.*?)</TITLE>", re.S)
_BODY = re.compile(r"<BODY>(.*?)</BODY>", re.S)


class Article(NamedTuple):
    title: str
    body: str

    @property
    def text(self) -> str:
        return f"{self.title}\n\n{self.body}" if self.title else self.body


def lee(src: Sources, name: str) -> list[Article]:
    text = src.file("gensim", name).read_text(encoding="utf-8", errors="replace")
    return [Article("", line.strip()) for line in text.split("\n") if line.strip()]


def reuters(src: Sources) -> list[Article]:
    out = []
    for topic in ("crude", "acq"):
        for path in sorted(src.file("r-cran-tm", f"{REUTERS}/{topic}").glob("*.xml")):
            xml = path.read_text(encoding="utf-8", errors="replace")
            title, body = _TITLE.search(xml), _BODY.search(xml)
            if title and body:
                # Paragraphs are indented lines; the trailing "Reuter" is a signature, not text.
                paras = re.split(r"\n\s{3,}", html.unescape(body.group(1)).removesuffix("Reuter").strip())
                out.append(Article(squash(html.unescape(title.group(1))).title(),
                                   "\n".join(squash(p) for p in paras if p.strip())))
    return out


def documents(src: Sources) -> Iterator[tuple[str, str]]:
    for name in LEE:
        for article in lee(src, name):
            yield "lee-corpus", article.text
    for article in reuters(src):
        yield "reuters-21578", article.text


def asks(src: Sources, rng: random.Random) -> list[Ask]:
    short = [a for a in lee(src, LEE[1]) if len(a.body) <= FIELD_CHARS]
    out = [Ask("copy", "summarise_news", {"article": a.body}) for a in rng.sample(short, 24)]
    wire = [a for a in reuters(src) if len(a.body) <= FIELD_CHARS]
    picked = rng.sample(wire, 16)
    out += [Ask("question", "report", {"headline": a.title}, a.body) for a in picked[:10]]
    out += [Ask("copy", "headline", {"article": a.body}, a.title) for a in picked[10:]]
    return out
