"""general: encyclopedia prose for the generalist drafter, belonging to none of the seven domains.

Source: the shortened English Wikipedia dump (206 pages of the 2016 "articles1" file: Anarchism,
Albedo, Alexander the Great, Academy Awards, ...) that gensim ships as test data; Wikipedia text is
CC BY-SA 3.0 / GFDL. The wiki markup is reduced to plain paragraphs here.
"""
import bz2
import html
import re
import xml.etree.ElementTree as ET
from typing import Iterator

from ..sources import Sources
from ..text import chunks

SOURCES = ("gensim",)

DUMP = "gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
MIN_CHARS = 500  # stubs and disambiguation pages are lists, not prose

_COMMENT = re.compile(r"<!--.*?-->", re.S)
_REF = re.compile(r"<ref[^>]*/>|<ref[^>]*>.*?</ref>", re.S | re.I)
_TEMPLATE = re.compile(r"\{\{[^{}]*\}\}")
_TABLE = re.compile(r"\{\|[^{}]*?\|\}", re.S)
_LINK = re.compile(r"\[\[([^\[\]|]*)(?:\|([^\[\]]*))?\]\]")
_EXTERNAL = re.compile(r"\[(?:https?|ftp)://[^\s\]]+\s*([^\]]*)\]")
_TAG = re.compile(r"<[^>]+>")
_HEADING = re.compile(r"^=+\s*(.*?)\s*=+\s*$", re.M)


def _innermost(pattern: re.Pattern, repl, text: str) -> str:
    """Nested constructs (templates in templates, links in image captions) go from the inside out."""
    while True:
        text, n = pattern.subn(repl, text)
        if not n:
            return text


def _link(m: re.Match) -> str:
    target, label = m.group(1), m.group(2)
    if ":" in target:  # File:, Image:, Category:, interlanguage links
        return ""
    return label if label is not None else target


def plain(wikitext: str) -> str:
    text = _COMMENT.sub("", wikitext)
    text = _REF.sub("", text)
    text = _innermost(_TEMPLATE, "", text)
    text = _innermost(_TABLE, "", text)
    text = _innermost(_LINK, _link, text)
    text = _EXTERNAL.sub(r"\1", text)
    text = _HEADING.sub(r"\n\1\n", text)
    text = html.unescape(_TAG.sub("", text)).replace("'''", "").replace("''", "")
    lines = []
    for line in text.split("\n"):
        line = line.strip()
        if line.startswith(("|", "!", "{", "}")):  # table or template debris
            continue
        lines.append(line.lstrip("*#:; ").strip())
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def articles(src: Sources) -> Iterator[tuple[str, str]]:
    """(title, plain text) of every article that is not a redirect or a stub."""
    with bz2.open(src.file("gensim", DUMP)) as f:
        for _, elem in ET.iterparse(f):
            if not elem.tag.endswith("}page"):
                continue
            ns = elem.findtext("{*}ns")
            title = elem.findtext("{*}title")
            wikitext = elem.findtext("{*}revision/{*}text") or ""
            elem.clear()
            if ns != "0" or wikitext.lstrip().upper().startswith("#REDIRECT"):
                continue
            text = plain(wikitext)
            if len(text) >= MIN_CHARS:
                yield title, text


def documents(src: Sources) -> Iterator[tuple[str, str]]:
    for title, text in articles(src):
        for piece in chunks(f"{title}\n\n{text}"):
            yield "wikipedia", piece
