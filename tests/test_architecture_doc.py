"""docs/architecture.md is drawn from the code: every package of gliding and every module in it
is named there (a module by its file name, in its package's block), so a new module cannot go
undocumented and a moved one leaves no stale name behind."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")


def _layout() -> str:
    """The "Packages and layers" block: the code block after that heading."""
    section = DOC.split("## Packages and layers", 1)[1]
    return section.split("```", 2)[1]


def _blocks() -> dict[str, str]:
    """Each top-level package's text in the layout block, by its name (``gliding/<name>``)."""
    layout = _layout()
    starts = [(m.start(), m.group(1)) for m in re.finditer(r"^gliding/(\w+)", layout, re.M)]
    return {name: layout[start: (starts[i + 1][0] if i + 1 < len(starts) else len(layout))]
            for i, (start, name) in enumerate(starts)}


def test_every_package_has_its_block() -> None:
    packages = {p.name for p in (ROOT / "gliding").iterdir()
                if p.is_dir() and (p / "__init__.py").exists()}
    packages.add("errors")  # errors.py, a module at the top
    assert packages - set(_blocks()) == set()


def test_every_module_is_named_in_its_packages_block() -> None:
    blocks = _blocks()
    missing = []
    for path in sorted((ROOT / "gliding").rglob("*.py")):
        rel = path.relative_to(ROOT / "gliding")
        if path.name == "__init__.py" or len(rel.parts) == 1:
            continue
        block = blocks.get(rel.parts[0], "")
        if not re.search(rf"(?<![\w.]){re.escape(path.stem)}(\.py|\b)", block):
            missing.append(str(rel))
    assert missing == [], f"not in docs/architecture.md: {missing}"


def test_every_named_module_file_exists() -> None:
    """A ``name.py`` the layout block names exists in that package (or below it)."""
    stale = []
    for package, block in _blocks().items():
        here = ROOT / "gliding" / package
        for name in set(re.findall(r"(?<![\w/])([a-z_]+)\.py\b", block)):
            if not list(here.rglob(f"{name}.py")) and name != package:
                stale.append(f"{package}: {name}.py")
    assert stale == []


def test_every_source_path_the_docs_name_exists() -> None:
    """A ``gliding/...py`` path in README.md or docs/*.md names a file that is there."""
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    stale = sorted({(t.name, path) for t in texts
                    for path in re.findall(r"\bgliding/[a-z_/]+\.py\b", t.read_text("utf-8"))
                    if not (ROOT / path).is_file()})
    assert stale == []
