"""sql: statements from MariaDB's regression tests, the SQL listings of the PostgreSQL manual and
the TPC-H / TPC-DS queries; prompts complete, explain or rewrite TPC queries and ask about
PostgreSQL commands."""
import random
import re
from typing import Iterator

from ..sources import Sources
from ..templates import Ask
from ..text import FIELD_CHARS, chunks, squash, strip_tags

SOURCES = ("mariadb-tests", "postgresql-doc", "sqlglot")

MARIADB = "usr/share/mysql/mysql-test"
# The general tests plus the suites about SQL features; left out are suites about replication,
# clusters, storage-engine matrices, server variables and internals (mostly generated
# repetition), which would also push the domain past 20 MB.
MARIADB_SUITES = ("main", "suite/maria", "suite/innodb", "suite/funcs_1", "suite/compat", "suite/versioning",
                  "suite/gcol", "suite/vcol", "suite/sql_sequence", "suite/period", "suite/json")
PG_HTML = "usr/share/doc/postgresql-doc-15/html"
TPC = {"TPC-H": "sqlglot-30.30.0/tests/fixtures/optimizer/tpc-h/tpc-h.sql",
       "TPC-DS": "sqlglot-30.30.0/tests/fixtures/optimizer/tpc-ds/tpc-ds.sql"}

STATEMENT_WORDS = set("""SELECT INSERT UPDATE DELETE CREATE DROP ALTER WITH SET SHOW EXPLAIN ANALYZE CALL
GRANT REVOKE TRUNCATE REPLACE PREPARE EXECUTE DEALLOCATE BEGIN COMMIT ROLLBACK START SAVEPOINT LOCK UNLOCK
RENAME OPTIMIZE CHECK REPAIR DESCRIBE HANDLER FLUSH VALUES TABLE LOAD DO USE XA COPY VACUUM COMMENT""".split())

_CONTROL = re.compile(r"(if|while)\s*\(|[{}]$", re.I)
_LISTING = re.compile(r'<pre class="programlisting">(.*?)</pre>', re.S)
_REFNAME = re.compile(r'<div class="refnamediv"><h2><span class="refentrytitle">([^<]+)</span></h2><p>[^<]*?— ([^<]+)</p>')
_TPC_HEADER = re.compile(r"^-+\n-- (TPC-(?:H|DS) \d+)\n-+\n", re.M)


def mysqltest_sql(text: str) -> list[str]:
    """The SQL statements of a mysqltest script, without its own commands, comments and control
    flow. Statements that use test variables ($x) are dropped: they are not SQL."""
    delimiter, buf, out = ";", [], []
    for line in text.split("\n"):
        s = line.strip()
        if not buf:
            if s.lower().startswith(("--delimiter", "-- delimiter")):
                delimiter = s.split()[-1]
                continue
            if not s or s.startswith(("#", "--")) or _CONTROL.match(s):
                continue
        buf.append(line.rstrip())
        if not s.endswith(delimiter):
            continue
        statement = "\n".join(buf).rstrip()[: -len(delimiter)].strip()
        buf = []
        words = statement.split(None, 1)
        if not words:
            continue
        if words[0].lower() == "delimiter" and len(words) == 2:
            delimiter = words[1].strip()
        elif words[0].upper() in STATEMENT_WORDS and "$" not in statement:
            out.append(statement + ";")
    return out


def _tpc_queries(src: Sources) -> Iterator[tuple[str, str, str]]:
    """(name, original query, the same query as sqlglot's optimizer rewrote it)."""
    for path in TPC.values():
        text = src.file("sqlglot", path).read_text(encoding="utf-8")
        parts = _TPC_HEADER.split(text)[1:]
        for name, body in zip(parts[::2], parts[1::2]):
            body = "\n".join(line for line in body.split("\n") if not line.startswith("# "))
            original, _, optimized = body.partition(";")
            yield name, original.strip() + ";", optimized.strip()


def _pg_pages(src: Sources):
    return sorted(src.file("postgresql-doc", PG_HTML).glob("*.html"))


def documents(src: Sources) -> Iterator[tuple[str, str]]:
    root = src.file("mariadb-tests", MARIADB)
    for suite in MARIADB_SUITES:
        for path in sorted((root / suite).rglob("*.test")):
            statements = mysqltest_sql(path.read_text(encoding="utf-8", errors="replace"))
            for piece in chunks("\n\n".join(statements)):
                yield "mariadb-tests", piece
    for page in _pg_pages(src):
        listings = [strip_tags(m).strip() for m in _LISTING.findall(page.read_text(encoding="utf-8"))]
        sql = [text for text in listings if text.split(None, 1) and text.split(None, 1)[0].upper() in STATEMENT_WORDS]
        for piece in chunks("\n\n".join(sql)):
            yield "postgresql-doc", piece
    for name, original, optimized in _tpc_queries(src):
        yield "sqlglot-tpc", f"-- {name}\n{original}\n\n-- {name}, optimized\n{optimized}"


def asks(src: Sources, rng: random.Random) -> list[Ask]:
    commands = []
    for page in _pg_pages(src):
        if page.name.startswith("sql-"):
            m = _REFNAME.search(page.read_text(encoding="utf-8"))
            if m:
                commands.append((squash(m.group(1)), squash(m.group(2))))
    out = [Ask("question", "explain_sql_command", {"command": command}, purpose)
           for command, purpose in rng.sample(commands, 14)]
    queries = [(name, original) for name, original, _ in _tpc_queries(src) if len(original) <= FIELD_CHARS]
    picked = rng.sample(queries, 26)
    for name, query in picked[:14]:
        lines = query.split("\n")
        # Enough of the query to pin down its shape, and at least its first line.
        prefix = "\n".join(lines[: max(1, int(len(lines) * 0.4))])
        out.append(Ask("copy", "complete_sql", {"name": name, "prefix": prefix}, query))
    out += [Ask("copy", family, {"query": query})
            for family, (_, query) in zip(["explain_sql_query", "rewrite_sql"] * 6, picked[14:])]
    return out
