"""The docs are read by someone who has only this repository: no paths into a sibling checkout,
no issue-tracker numbers they cannot look up, no paths of the machine a sample was made on."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "config.yaml", *sorted((ROOT / "docs").glob("*.md"))]

FORBIDDEN = {
    "a path outside the repository": re.compile(r"\.\./shared"),
    "an issue number": re.compile(r"\bissues? #?\d+\b", re.IGNORECASE),
    # `#123` in backticks is an example of an id the ingester extracts; `&#123;` an entity;
    # `page#12` a fragment. A bare "#20" is an issue reference.
    "an issue reference": re.compile(r"(?<![\w&`])#\d{1,3}\b(?!`)"),
    # `$share/gliding/work/<ROLE>` is an MQTT topic, not a directory.
    "a machine path": re.compile(r"(?<![\w.~-])/(?:root|work)/"),
}
TMP = re.compile(r"/tmp/[\w.-]+")

# (file, text on the line): a /tmp path that explains the sandbox, not one of a machine.
ALLOWED = {
    ("docs/tools.md", "`/tmp/x`"),  # a write inside the sandbox lands in its throwaway /tmp
}


def _hits(path: Path) -> list[str]:
    name = path.relative_to(ROOT).as_posix()
    lines = path.read_text(encoding="utf-8").splitlines()
    # A scratch directory the sample's own command names (`--data-dir /tmp/docs-hello`) is
    # one the reader chose too; any other /tmp directory is where the author happened to be.
    named = {m.group() for line in lines if line.startswith("$ ") for m in TMP.finditer(line)}
    hits = []
    for n, line in enumerate(lines, 1):
        if any(name == f and text in line for f, text in ALLOWED):
            continue
        found = [what for what, pattern in FORBIDDEN.items() if pattern.search(line)]
        found += [f"a machine's /tmp directory ({m.group()})" for m in TMP.finditer(line)
                  if not any(m.group().startswith(tmp) for tmp in named)]
        hits += [f"{name}:{n}: {what}: {line.strip()[:120]}" for what in found]
    return hits


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_doc_names_nothing_outside_the_repository(path: Path) -> None:
    assert _hits(path) == []


def test_patterns_catch_what_they_are_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    doc = tmp_path / "x.md"
    doc.write_text(
        "see ../shared/DESIGN.md\nfixed in issue 9\n(Issues 11)\nbefore #20 landed\n"
        "toolchain at /root/.pyenv/versions/3.11.7\nvenv /work/main/.venv\n"
        "archive: /tmp/ci3/data/jobs/x\n", encoding="utf-8")
    assert len(_hits(doc)) == 7
    doc.write_text(
        "[events](#job-events)\nids such as `#123`\ntopic `$share/gliding/work/<ROLE>`\n"
        "no home (`/root`, `/home`)\n$ gliding run t.yaml --data-dir /tmp/docs-hello\n"
        "Archive: /tmp/docs-hello/jobs/x\n", encoding="utf-8")
    assert _hits(doc) == []
