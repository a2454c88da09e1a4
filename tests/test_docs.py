"""References to the design documents resolve inside the repository.

Code, tests, examples, benchmarks and the top-level documents cite
`docs/architecture.md §N` and `docs/algorithms.md §N`. These tests fail, naming
the file and line, on a cited document that does not exist, a `§N` its document
lacks, a reference to a design note outside the repository, and (in the
documents themselves) a repository path that does not exist.
"""

import pathlib
import re

import pytest

pytestmark = pytest.mark.backend_independent  # the same on every backend: one run

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SCANNED_FOLDERS = ("kbert", "tests", "examples", "benchmarks", "scripts", "docs")
SCANNED_FILES = ("README.md", "CONTRIBUTING.md", "Makefile", "pyproject.toml")
SUFFIXES = {".py", ".md", ".sh", ".toml", ".txt", ".cfg"}

# `docs/algorithms.md §3`, `algorithms.md` §12, §13 (each § is checked).
CITATION = re.compile(r"\b((?:docs/)?(?:architecture|algorithms)\.md)`?((?:\s*(?:,|and)?\s*§\s?\d+(?:\.\d+)*)+)")
SECTION = re.compile(r"§\s?(\d+(?:\.\d+)*)")
HEADING = re.compile(r"^#{2,4} (\d+(?:\.\d+)*)\.?\s", re.MULTILINE)
DOC_PATH = re.compile(r"(?<![\w./-])(docs/[\w./-]+\.md)")
# Design notes that live outside the repository (the project's earlier notes).
OUTSIDE = re.compile(r"\b(?:DESIGN|ALGORITHMS|ANCHORS)(?:\.md\b|\s+§)|\.\./shared\b|/work/shared\b")
# Repository paths quoted in the documents: `kbert/layers/pooler.py`, `tests/helpers.py`.
QUOTED_PATH = re.compile(r"`((?:kbert|tests|examples|benchmarks|scripts|docs)/[\w./-]*)`")


def _scanned_files():
    files = [ROOT / name for name in SCANNED_FILES if (ROOT / name).exists()]
    for folder in SCANNED_FOLDERS:
        files += sorted(
            path for path in (ROOT / folder).rglob("*")
            if path.is_file() and path.suffix in SUFFIXES and "results" not in path.parts
        )
    return files


def _lines(path):
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        yield f"{path.relative_to(ROOT)}:{number}", line


def _citations(path):
    """`(file:line, document name, cited text)` of each citation in `path`, line breaks inside it allowed."""
    text = path.read_text(encoding="utf-8")
    for match in CITATION.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        yield f"{path.relative_to(ROOT)}:{line}", pathlib.PurePosixPath(match.group(1)).name, match.group(2)


def _sections(document):
    return set(HEADING.findall(document.read_text(encoding="utf-8")))


def test_the_documents_exist_and_number_their_sections():
    for name in ("architecture.md", "algorithms.md"):
        assert _sections(DOCS / name), f"docs/{name} has no numbered sections (## 1. ...)"


def test_cited_documents_exist():
    missing = [
        f"{where}: {path}"
        for file in _scanned_files()
        for where, line in _lines(file)
        for path in DOC_PATH.findall(line)
        if not (ROOT / path).is_file()
    ]
    assert not missing, "references to documents the repository lacks:\n" + "\n".join(missing)


def test_cited_sections_exist():
    sections = {name: _sections(DOCS / name) for name in ("architecture.md", "algorithms.md")}
    missing = []
    for file in _scanned_files():
        for where, name, cited in _citations(file):
            missing += [f"{where}: {name} §{s}" for s in SECTION.findall(cited) if s not in sections[name]]
    assert not missing, "citations of sections the documents lack:\n" + "\n".join(missing)


def test_no_reference_points_outside_the_repository():
    this_file = pathlib.Path(__file__).resolve()
    outside = [
        f"{where}: {line.strip()}"
        for file in _scanned_files() if file.resolve() != this_file
        for where, line in _lines(file)
        if OUTSIDE.search(line)
    ]
    assert not outside, "references to notes outside the repository (cite docs/ instead):\n" + "\n".join(outside)


def test_paths_quoted_in_the_documents_exist():
    documents = [DOCS / "architecture.md", DOCS / "algorithms.md", ROOT / "CONTRIBUTING.md", ROOT / "README.md"]
    missing = [
        f"{where}: {path}"
        for document in documents if document.exists()
        for where, line in _lines(document)
        for path in QUOTED_PATH.findall(line)
        if not (ROOT / path).exists()
    ]
    assert not missing, "paths the documents name that do not exist:\n" + "\n".join(missing)
