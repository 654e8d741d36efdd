"""The repository documents itself: no file points to documents outside it, every pointer into
docs/ names a file (and, where quoted, a section) that exists, and every link of the README and of
docs/ resolves (files and #anchors)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TREES = ("verl_masopd", "recipes", "examples", "data_prep", "benchmarks", "scripts", "tests", "docs")
TOP_FILES = ("README.md",)
SKIP_DIRS = {"__pycache__", "weights", "results"}
MAX_BYTES = 1_000_000
# documents that live outside the repository (its users never get them)
OUTSIDE = re.compile(r"\bMETHOD\.md\b|\bDESIGN\.md\b|shared/notes")
# what users run and read never reaches beside the checkout (tests may read data samples there)
BESIDE = re.compile(r"\.\./shared")
SHIPPED = ("verl_masopd", "recipes", "examples", "data_prep", "benchmarks", "docs", "README.md")
# docs/<file>.md, optionally followed by a quoted section name: docs/method.md, "MAS-OPD"
DOCS_POINTER = re.compile(r"(?<![\w./-])docs/([\w.-]+\.md)(?:,?\s+\"([^\"\n]{1,80})\")?")
MARKDOWN_LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$", re.MULTILINE)


def _text_files() -> list[Path]:
    files = [ROOT / name for name in TOP_FILES]
    for tree in TREES:
        for path in sorted((ROOT / tree).rglob("*")):
            if path.is_file() and not SKIP_DIRS.intersection(path.relative_to(ROOT).parts):
                files.append(path)
    texts = []
    for path in files:
        if path == Path(__file__).resolve() or path.stat().st_size > MAX_BYTES:
            continue
        try:
            path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        texts.append(path)
    return texts


def _one_line(text: str) -> str:
    """Lines joined with their comment markers dropped, so a pointer may wrap in a comment or docstring."""
    return re.sub(r"[ \t]*\n[ \t]*(?:#[ \t]*)?", " ", text)


def _headings(doc: Path) -> set[str]:
    return set(HEADING.findall(doc.read_text(encoding="utf-8")))


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


FILES = _text_files()


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_no_file_points_outside_the_repository():
    found = [
        f"{_rel(path)}:{number}: {line.strip()}"
        for path in FILES
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if OUTSIDE.search(line) or (BESIDE.search(line) and _rel(path).startswith(SHIPPED))
    ]
    assert not found, "pointers to documents outside the repository:\n" + "\n".join(found)


def test_every_docs_pointer_names_an_existing_file_and_section():
    bad = []
    for path in FILES:
        for match in DOCS_POINTER.finditer(_one_line(path.read_text(encoding="utf-8"))):
            name, section = match.groups()
            doc = ROOT / "docs" / name
            if not doc.is_file():
                bad.append(f"{_rel(path)}: docs/{name} does not exist")
            elif section is not None and section not in _headings(doc):
                bad.append(f'{_rel(path)}: docs/{name} has no section "{section}"')
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(
    "doc", [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))], ids=lambda p: str(p.relative_to(ROOT))
)
def test_links_of_readme_and_docs_resolve(doc: Path):
    """Every relative link of the README and of docs/ names a file, and its #anchor a heading."""
    bad = []
    for target in MARKDOWN_LINK.findall(doc.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+://", target):
            continue
        file_part, _, anchor = target.partition("#")
        linked = (doc.parent / file_part).resolve() if file_part else doc
        if not linked.exists():
            bad.append(f"{doc.name}: link {target} names no file")
        elif anchor and linked.suffix == ".md" and anchor not in {_anchor(h) for h in _headings(linked)}:
            bad.append(f"{doc.name}: link {target} names no section of {linked.name}")
    assert not bad, "\n".join(bad)


def test_docs_index_lists_every_document():
    index = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    missing = [p.name for p in (ROOT / "docs").glob("*.md") if p.name != "README.md" and f"({p.name})" not in index]
    assert not missing, f"docs/README.md does not list {missing}"
