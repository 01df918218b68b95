"""Entities in one tool call: the files, symbols, errors and ids its arguments and output name.

Pure: ``extract(tool, arguments, output, ok)`` reads text and returns an ``Entities`` value,
nothing else. It is built for hostile input: only the first and last ``SCAN_CHARS`` of an
output are read, lines are cut to ``MAX_LINE_CHARS`` before any pattern sees them, every
pattern is anchored or made of character classes that cannot overlap (no catastrophic
backtracking), each kind is capped per result, and no input makes it raise.

What counts:

    files    relative workspace paths (normalised; no absolute paths, ``..`` escapes, URLs,
             control characters; at most MAX_PATH_CHARS): path-like arguments; entries of
             list_dir and glob; ``path:line:`` prefixes (grep -n, pytest, compilers);
             ``File "x.py", line 3``; ``at f (x.js:1:2)``; ``ls -l`` rows; pytest node ids;
             and, in free text, tokens with a known file extension (or a well-known name)
    symbols  definitions (``def``, ``class``, ``function``, ``fn``, ``func``, ``interface``,
             ``struct``, ``enum``, ``trait``) in outputs and in written file content,
             traceback frames (Python ``in name``, JavaScript ``at name (``) and pytest node
             ids; with the file and line when known
    errors   exception lines (``ValueError: ...``), the last line of a Python traceback,
             lines starting ``error:``/``Error:``/``fatal:``/``FAILED``/``ERROR``, pytest
             ``E`` lines, and the first line of a failed (not ok) call; one line each, cut to
             MAX_ERROR_CHARS
    ids      git shas (7-40 lower-case hex with a digit and a letter), UUIDs, ``#123`` refs
"""

from __future__ import annotations

import posixpath
import re
import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gliding.core.text import clip

SCAN_CHARS = 64 * 1024  # read this much from the head and from the tail of an output
MAX_LINE_CHARS = 1000
MAX_PATH_CHARS = 300
MAX_ERROR_CHARS = 300
MAX_NAME_CHARS = 100
MAX_FILES = 20
MAX_SYMBOLS = 20
MAX_ERRORS = 10
MAX_IDS = 10
MAX_ARGUMENT_VALUES = 50  # strings read from one call's arguments

PATH_ARGUMENTS = ("path", "file", "file_path", "filename", "target", "source", "destination",
                  "src", "dst", "paths", "files")
CONTENT_ARGUMENTS = {"write_file": "content", "edit_file": "new"}
LISTING_TOOLS = ("list_dir", "glob")
EXTENSIONS = frozenset({
    "py", "pyi", "pyx", "ipynb", "js", "mjs", "cjs", "jsx", "ts", "tsx", "vue", "svelte", "json",
    "jsonl", "yaml", "yml", "toml", "ini", "cfg", "conf", "env", "md", "rst", "txt", "csv", "tsv",
    "log", "xml", "html", "htm", "css", "scss", "sass", "less", "sql", "sh", "bash", "zsh", "fish",
    "ps1", "bat", "c", "h", "cc", "cpp", "cxx", "hpp", "hh", "rs", "go", "java", "kt", "kts",
    "scala", "rb", "php", "pl", "lua", "r", "swift", "m", "mm", "cs", "fs", "dart", "ex", "exs",
    "erl", "hs", "ml", "clj", "el", "vim", "tf", "proto", "graphql", "gradle", "lock", "cmake",
    "mk", "dockerfile", "pdf", "png", "jpg", "jpeg", "gif", "svg", "ico", "webp", "zip", "gz",
    "tgz", "tar", "whl", "jar", "so", "dylib", "dll", "exe", "wasm", "ttl", "nt", "nq", "jsonld",
    "rdf", "sqlite", "db",
})
BARE_NAMES = frozenset({"Makefile", "Dockerfile", "LICENSE", "README", "Procfile",
                        "Gemfile", "Rakefile", "Jenkinsfile", "Vagrantfile", "CODEOWNERS"})


@dataclass(frozen=True)
class Symbol:
    """A named code symbol, with the file and line it is at when the text says."""

    name: str
    path: str | None = None
    line: int | None = None


@dataclass(frozen=True)
class Entities:
    """What one tool call mentions; each tuple is deduplicated, in order of first mention."""

    files: tuple[str, ...] = ()
    symbols: tuple[Symbol, ...] = ()
    errors: tuple[str, ...] = ()
    ids: tuple[str, ...] = ()


_LOC = re.compile(r"([^\s:\"'<>|()\[\]{},;=]{1,300}):(\d{1,9})(?::(\d{1,6}))?(?::\s*|-)")
_PY_FRAME = re.compile(r'\s*File "([^"\n]{1,1000})", line (\d{1,9})(?:, in ([^\s,]{1,200}))?')
_JS_FRAME = re.compile(r"\s*at (?:async )?(?:([\w$.<>]{1,200}) \()?([^()\s:]{1,1000}):"
                       r"(\d{1,9}):(\d{1,9})\)?")
_MODIFIERS = (r"(?:(?:export|default|pub(?:\([\w:]{1,40}\))?|public|private|protected|static|"
              r"async|abstract|final|unsafe|override|inline)\s+){0,6}")
_DEF = re.compile(_MODIFIERS + r"(?:(def|fn|function\*?|func)\s+(?:\([^()]{0,100}\)\s*)?"
                  r"([A-Za-z_$][\w$]{0,99})\s*[(<]|(class|interface|struct|enum|trait)\s+"
                  r"([A-Za-z_$][\w$]{0,99})(?=\s*[(:{<]|\s+(?:extends|implements)\b|\s*$))")
_EXC = re.compile(r"(?:E\s+)?(?:[A-Za-z_]\w{0,99}\.){0,10}[A-Z]\w{0,99}?"
                  r"(?:Error|Exception|Warning|Failure|Exit|Interrupt|Timeout|Fault)(?::\s|:?$)")
_ERROR_START = re.compile(r"(?:error|Error|ERROR|fatal|Fatal|FATAL)(?:\[\w{1,20}\])?:|"
                          r"(?:FAILED|FAIL|ERROR|npm ERR!)(?:\s|:|$)")
_PYTEST_E = re.compile(r"E\s{2,}\S")
_LS_LONG = re.compile(r"[-dlcbps][-rwxsStT]{9}[.+@]?\s+\d")
_READ_HEADER = re.compile(r"(.{1,1000}) lines (\d{1,9})-(\d{1,9}) of (\d{1,9})")
_TOKEN = re.compile(r"[^\s\"'`()\[\]{}<>,;=|*&!?$^]+")
_UUID = re.compile(r"(?<![0-9A-Fa-f-])[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
                   r"[0-9a-fA-F]{4}-[0-9a-fA-F]{12}(?![0-9A-Fa-f-])")
_SHA = re.compile(r"(?<![0-9A-Za-z_])[0-9a-f]{7,40}(?![0-9A-Za-z_])")
_ISSUE = re.compile(r"(?<![\w#&/])#(\d{1,7})(?!\w)")
_IDENT = re.compile(r"[A-Za-z_$][\w$.]{0,99}")
_DRIVE = re.compile(r"[A-Za-z]:[\\/]")
_TRAILING = ".,:;'\"`)]}>"


def extract(tool: str, arguments: Mapping[str, Any], output: str, ok: bool = True) -> Entities:
    """The entities of one tool call (``tool`` with ``arguments`` gave ``output``). Never raises
    on any value: what cannot be read is skipped."""
    bag = _Bag()
    args = arguments if isinstance(arguments, Mapping) else {}
    text = output if isinstance(output, str) else ""
    name = tool if isinstance(tool, str) else ""
    if not ok:
        first = next((s for s in (ln.strip() for ln in _lines(text[:SCAN_CHARS])) if s), "")
        bag.error(first)
        if not bag.errors:  # nothing printable in the output: say which call failed
            bag.error(f"{name} failed")
        if not bag.errors:
            bag.error("tool call failed")
    base = _arguments(name, args, bag)
    for part, head in _windows(text):
        _scan_output(name, part, head, ok, base, bag)
    located = {s.name for s in bag.symbols if s.path is not None}
    symbols = tuple(s for s in bag.symbols if s.path is not None or s.name not in located)
    return Entities(tuple(bag.files), symbols, tuple(bag.errors), tuple(bag.ids))


def clean_path(text: str) -> str | None:
    """``text`` as a normalised relative workspace path, or None if it is not one."""
    if not isinstance(text, str):
        return None
    p, before = text, None
    while p != before:  # quotes and spaces in any order: 'File "' is the path File
        before, p = p, p.strip().strip("\"'`")
    if (not p or len(p) > MAX_PATH_CHARS or "://" in p or "\\" in p
            or p.startswith(("/", "~")) or _DRIVE.match(p)):
        return None
    if any(c != " " and unicodedata.category(c)[0] in "CZ" for c in p):
        return None
    norm = posixpath.normpath(p)
    if norm in (".", "..") or norm.startswith("../") or norm.startswith("/"):
        return None
    return norm


def scan_window(text: str, limit: int = SCAN_CHARS) -> str:
    """The part of ``text`` that is read: all of it, or its first and last ``limit`` chars."""
    if len(text) <= 2 * limit:
        return text
    return text[:limit] + "\n" + text[-limit:]


# ---- the scan -----------------------------------------------------------------------------

class _Bag:
    """Deduplicating, capped collections, in order of first mention."""

    def __init__(self) -> None:
        self.files: dict[str, None] = {}
        self.symbols: dict[Symbol, None] = {}
        self._symbol_names: set[tuple[str, str | None]] = set()
        self.errors: dict[str, None] = {}
        self.ids: dict[str, None] = {}

    def file(self, raw: str | None, *, known: bool = True) -> str | None:
        path = clean_path(raw) if raw is not None else None
        if path is None or (not known and not _looks_like_file(path)):
            return None
        if len(self.files) < MAX_FILES:
            self.files.setdefault(path)
        return path

    def symbol(self, name: str, path: str | None, line: int | None) -> None:
        name = name.strip()
        if not _IDENT.fullmatch(name) or name.startswith("<"):
            return
        key = (name, path)
        if key in self._symbol_names or len(self.symbols) >= MAX_SYMBOLS:
            return
        self._symbol_names.add(key)
        self.symbols.setdefault(Symbol(name, path, line))

    def error(self, line: str) -> None:
        text = _one_line(line, MAX_ERROR_CHARS)
        if text and len(self.errors) < MAX_ERRORS:
            self.errors.setdefault(text)

    def id(self, value: str) -> None:
        if len(self.ids) < MAX_IDS:
            self.ids.setdefault(value)

    def ids_in(self, line: str) -> None:
        if len(self.ids) >= MAX_IDS:
            return
        for m in _UUID.finditer(line):
            self.id(m.group(0).lower())
        rest = _UUID.sub(" ", line)
        for m in _SHA.finditer(rest):
            sha = m.group(0)
            if any(c.isdigit() for c in sha) and any(c.isalpha() for c in sha):
                self.id(sha)
        for m in _ISSUE.finditer(rest):
            self.id("#" + m.group(1))


def _arguments(tool: str, args: Mapping[str, Any], bag: _Bag) -> str | None:
    """Files and ids named by the arguments; returns the path argument (read_file's file)."""
    base = None
    strings = 0
    for key, value in list(args.items())[:MAX_ARGUMENT_VALUES]:
        values = value if isinstance(value, list | tuple) else [value]
        for v in values[:MAX_ARGUMENT_VALUES]:
            if not isinstance(v, str) or strings >= MAX_ARGUMENT_VALUES:
                continue
            strings += 1
            if key in PATH_ARGUMENTS:
                path = bag.file(v)
                base = base or path
            elif key == "pattern" and tool == "glob" and not re.search(r"[*?\[\]{}]", v):
                bag.file(v)
            elif key == "command":
                for line in _lines(v[:SCAN_CHARS]):
                    _tokens(line, bag)
            if key != CONTENT_ARGUMENTS.get(tool):
                for line in _lines(v[:SCAN_CHARS]):
                    bag.ids_in(line)
    content = args.get(CONTENT_ARGUMENTS.get(tool, ""))
    if isinstance(content, str):  # definitions in the text the call writes
        for part, head in _windows(content):
            for i, line in enumerate(_lines(part), 1):
                m = _DEF.match(line.strip())
                if m:
                    bag.symbol(m.group(2) or m.group(4), base,
                               i if head and tool == "write_file" else None)
    return base


def _scan_output(tool: str, text: str, head: bool, ok: bool, base: str | None,
                 bag: _Bag) -> None:
    lines = _lines(text)
    numbered: int | None = None  # read_file: the file line of lines[i] is numbered + i
    if tool == "read_file" and head and ok and lines:
        h = _READ_HEADER.fullmatch(lines[0])
        if h:
            numbered = int(h.group(2)) - 1
    listing = tool in LISTING_TOOLS and ok and head
    listed_in = base if tool == "list_dir" and base else ""
    in_traceback = False
    previous_e = False
    for i, raw in enumerate(lines):
        line = raw.rstrip()
        s = line.strip()
        if not s:
            continue
        bag.ids_in(s)
        if listing and not s.startswith("... "):
            entry = s.rstrip("/@")
            if not (s.startswith("no files match ") or s.endswith(" is empty")):
                bag.file(posixpath.join(listed_in, entry) if listed_in else entry)
            continue
        # errors
        if s.startswith("Traceback (most recent call last)"):
            in_traceback = True
            continue
        if in_traceback and not line[:1].isspace() and not s.startswith(
                ("File ", "During handling", "The above exception", "^", "~")):
            bag.error(s)
            in_traceback = False
        is_e = bool(_PYTEST_E.match(s))
        if (is_e and not previous_e) or _EXC.match(s) or _ERROR_START.match(s):
            bag.error(s)
        previous_e = is_e
        # locations
        content, path, lineno = s, None, None
        frame = _PY_FRAME.match(line)
        if frame:
            path = bag.file(frame.group(1))
            if path and frame.group(3):
                bag.symbol(frame.group(3), path, int(frame.group(2)))
            continue
        js = _JS_FRAME.match(line)
        if js and s.startswith("at "):
            path = bag.file(js.group(2))
            if path and js.group(1):
                bag.symbol(js.group(1), path, int(js.group(3)))
            continue
        loc = _LOC.match(s)
        if loc and not loc.group(1).isdigit():
            path = bag.file(loc.group(1), known=False)
            if path:
                lineno = int(loc.group(2))
                content = s[loc.end():]
                if _EXC.match(content) or _ERROR_START.match(content):
                    bag.error(s)
        if _LS_LONG.match(s):
            bag.file(s.split(" -> ")[0].split()[-1])
        if path is None and tool == "read_file":
            path, lineno = base, (numbered + i if numbered is not None and i > 0 else None)
        d = _DEF.match(content.strip())
        if d:
            bag.symbol(d.group(2) or d.group(4), path, lineno)
        _tokens(content, bag)


def _tokens(line: str, bag: _Bag) -> None:
    """Files (and pytest node ids) named in free text: tokens with a known extension."""
    if len(bag.files) >= MAX_FILES and len(bag.symbols) >= MAX_SYMBOLS:
        return
    for m in _TOKEN.finditer(line):
        token = m.group(0)
        if line[m.end():m.end() + 1] == "(" or ("/" not in token and "." not in token):
            continue  # a call such as response.json(), or a plain word
        node, _, test = token.partition("::")
        node = node.rstrip(_TRAILING)
        loc = _LOC.match(node + ":")
        if loc and loc.end() == len(node) + 1:
            node = loc.group(1)
        if node.startswith(("a/", "b/")) and line.startswith(("---", "+++", "diff --git")):
            node = node[2:]
        path = bag.file(node, known=False)
        if path and test:
            bag.symbol(test.split("::")[-1].rstrip(_TRAILING), path, None)


def _looks_like_file(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    stem, dot, ext = name.rpartition(".")
    return name in BARE_NAMES or bool(dot and (stem or name.startswith("."))
                                      and ext.lower() in EXTENSIONS)


def _windows(text: str) -> Iterator[tuple[str, bool]]:
    """The head (True) and, for a long text, the tail (False) that are read."""
    if len(text) <= 2 * SCAN_CHARS:
        yield text, True
        return
    yield text[:SCAN_CHARS], True
    tail = text[-SCAN_CHARS:]
    yield tail.split("\n", 1)[-1], False  # from the tail's first whole line


def _lines(text: str) -> list[str]:
    return [ln[:MAX_LINE_CHARS] for ln in text.splitlines()]


def _one_line(text: str, width: int) -> str:
    """``text`` on one line, without control, format, surrogate or private-use characters."""
    text = " ".join(text.split())
    return clip("".join(c for c in text if unicodedata.category(c) not in
                        ("Cc", "Cf", "Cs", "Co")), width)
