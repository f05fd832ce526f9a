"""Small text helpers shared by the domain extractors: chunking, HTML stripping, JSON lines."""
import html
import json
import os
import re
from pathlib import Path
from typing import Iterable, Iterator

# Training documents are cut to at most this many characters at paragraph breaks, so that a
# leaked passage costs one chunk of a long file, not the whole file.
CHUNK_CHARS = 4000

# Eval prompts must fit a 135M model's context with room to answer; fields that go into a prompt
# are kept under this, leaving room for the instruction around them.
FIELD_CHARS = 1200

_BLANK = re.compile(r"\n\s*\n")
_TAG = re.compile(r"<[^>]+>")


def chunks(text: str, limit: int = CHUNK_CHARS) -> Iterator[str]:
    """Greedy packing of blank-line-separated paragraphs into pieces of at most ``limit`` characters
    (a longer paragraph is first cut at line breaks; a single longer line stays whole)."""
    paragraphs = [piece for para in _BLANK.split(text) if para.strip()
                  for piece in _pack(para.strip("\n").split("\n"), "\n", limit)]
    yield from _pack(paragraphs, "\n\n", limit)


def _pack(parts: list[str], sep: str, limit: int) -> Iterator[str]:
    piece = None
    for part in parts:
        if piece is not None and len(piece) + len(sep) + len(part) > limit:
            yield piece
            piece = None
        piece = part if piece is None else piece + sep + part
    if piece is not None:
        yield piece


def strip_tags(fragment: str) -> str:
    return html.unescape(_TAG.sub("", fragment))


def squash(text: str) -> str:
    """One line, single spaces."""
    return " ".join(text.split())


def write_jsonl(path: Path, rows: Iterable[dict]) -> None:
    """Atomic: readers never see a half-written file, and an interrupted build leaves none."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_json(path: Path, obj) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
