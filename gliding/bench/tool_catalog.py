"""``gliding bench tools``: what tool definitions cost a role's prompt with MCP servers attached,
on demand (the shipped default) against the full catalog.

Two scripted jobs run through the composition root (``run_job``; a replies file's model that
records every request), each with the two reference MCP servers — server-everything and
server-filesystem, the pinned node programs, started over stdio, the latter allowed into the
job's workspace — given to every role (PA, DA, CA, AA):

- ``on_demand``: the servers as a config declares them by default (``on_demand`` left out): a
  role carries its own groups plus ``tool_search`` (its description names the loadable
  groups) and ``call_tool``. DA loads the filesystem server's group and reads ``notes.txt``
  through ``call_tool``.
- ``full``, the full catalog: every core group given to every role (the task's
  ``tool_groups``) and both servers always offered (``on_demand: false``); DA calls the same
  tool by its own name.

A role's tool-definition tokens are those of the ``tools`` array of its request body, as the
hosted backend sends it (litellm's compact JSON): OpenAI's chat-completions form
(``to_openai``) and Anthropic's Messages form with the cache mark the engine sets
(``bench/cache.py``'s ``anthropic_body``), counted with the real tokenizer
(``context.tokenizer``; the 4-characters fallback is refused). ``ratio`` = on demand / full
catalog (the target: at most ``TARGET``); ``without_servers`` is the role's list without the two
meta tools, what it carries when no server is attached; ``servers_add`` is the difference.
``tools_unchanged``: every session of both jobs sent one ``tools`` array on all its calls.
``model_calls``: the calls each job took, by role; ``extra`` is what the on-demand path cost.
``found_and_called.load_answer_tokens``: the ``tool_search`` answer that loaded the group (its
schemas), which stays in DA's history; ``job_tokens``: tools and whole prompts summed over each
job's calls, the load answer and the extra calls included.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from gliding.bench.cache import ANTHROPIC_MODEL, anthropic_body
from gliding.bench.context import exact_counter
from gliding.bench.stats import ratio
from gliding.config.settings import MCPServerSettings, Settings
from gliding.config.task import load_task_text
from gliding.context.tokens import TokenCounter
from gliding.core.messages import Completion, ToolSpec
from gliding.daemon.compose import run_job
from gliding.errors import GlidingError, UsageError
from gliding.llm.port import LLM, LLMRequest
from gliding.llm.scripted import FileScriptedLLM, replies_from_data
from gliding.memory.archive.store import Archive
from gliding.tools.groups import GROUP_NAMES

TARGET = 0.15  # a role's tool-definition tokens on demand, at most this share of the catalog
ROLES = ("PA", "DA", "CA", "AA")
EVERYTHING = "@modelcontextprotocol/server-everything"
FILESYSTEM = "@modelcontextprotocol/server-filesystem"
SERVERS = {"everything": EVERYTHING, "filesystem": FILESYSTEM}
LOADED = "mcp_filesystem"  # the group DA loads on demand
READ = "filesystem__read_text_file"  # and the tool it calls
NOTE = "notes.txt"
NOTE_TEXT = "The tool catalog stays out of the prompt until a role asks for it.\n"
META = ("tool_search", "call_tool")
PROVIDERS = ("openai", "anthropic")
WALL_TIME_S = 300  # one job, at most: a server that hangs ends it, not the bench


class Recording:
    """A model that records every request before ``llm`` answers it."""

    def __init__(self, llm: LLM) -> None:
        self.llm = llm
        self.requests: list[LLMRequest] = []

    @property
    def name(self) -> str:
        return self.llm.name

    async def complete(self, request: LLMRequest) -> Completion:
        self.requests.append(request)
        return await self.llm.complete(request)


def reference_servers(modules: Path, node: str, root: Path) -> dict[str, MCPServerSettings]:
    """server-everything and server-filesystem (allowed into ``root``) from ``modules`` (a
    ``node_modules`` folder), over stdio, given to every role; ``on_demand`` as by default.

    Raises:
        UsageError: a server is not installed there.
    """
    def entry(package: str) -> str:
        script = modules / package / "dist" / "index.js"
        if not script.is_file():
            raise UsageError(f"{package} is not installed in {modules}",
                             hint="scripts/setup.sh installs the pinned reference servers "
                                  "into .cache/mcp-servers/node_modules")
        return str(script)

    return {"everything": MCPServerSettings(command=node, args=(entry(EVERYTHING), "stdio"),
                                            roles=ROLES),
            "filesystem": MCPServerSettings(command=node, args=(entry(FILESYSTEM), str(root)),
                                            roles=ROLES)}


def versions(modules: Path) -> dict[str, str]:
    """The installed version of each reference server."""
    return {name: json.loads((modules / package / "package.json").read_text("utf-8"))["version"]
            for name, package in SERVERS.items()}


def replies(note: Path, *, on_demand: bool) -> dict[str, list[dict[str, Any]]]:
    """The job's replies: DA reads ``note`` with the filesystem server, through tool_search
    (whose description names the groups: no listing call first) and call_tool when its tools
    are on demand, by the tool's own name otherwise."""
    read = {"path": str(note)}
    found = ([{"tool_search": {"group": LOADED}},
              {"call_tool": {"name": READ, "arguments": read}}] if on_demand
             else [{READ: read}])
    return {"PA": [{"finish": {"steps": [f"read {NOTE} with the filesystem server"]}}],
            "DA": [*found, {"finish": {"summary": f"read {NOTE}"}}],
            "CA": [{"run_checks": {}}, {"finish": {"notes": f"{NOTE} is there"}}],
            "AA": [{"finish": {"decision": "done", "report": f"{NOTE} was read"}}]}


def task_text(workspace: Path, *, full: bool) -> str:
    """The task: the four roles, a check, a wall-time budget; with ``full`` every role gets
    every core group."""
    task: dict[str, Any] = {
        "goal": f"Read {NOTE} with the filesystem MCP server", "workspace": str(workspace),
        "pipeline": list(ROLES), "budgets": {"wall_time_s": WALL_TIME_S},
        "checks": [{"command": f"test -f {NOTE}"}]}
    if full:
        task["tool_groups"] = {role: list(GROUP_NAMES) for role in ROLES}
    return json.dumps(task)  # JSON is YAML


def tools_bytes(request: LLMRequest, provider: str) -> str:
    """The ``tools`` array of ``request``'s body as the hosted backend sends it."""
    if provider == "openai":
        tools: Any = [t.to_openai() for t in request.tools]
    else:
        tools = anthropic_body(request.messages, request.tools, ANTHROPIC_MODEL,
                               request.meta.get("cache_breakpoints") or (),
                               cache_tools=bool(request.meta.get("cache_tools")))["tools"]
    return json.dumps(tools, ensure_ascii=False, separators=(",", ":"))


def sessions(requests: Sequence[LLMRequest]) -> dict[str, list[LLMRequest]]:
    """The requests of each role session, in order."""
    out: dict[str, list[LLMRequest]] = {}
    for request in requests:
        out.setdefault(str(request.meta.get("session") or request.meta.get("role")),
                       []).append(request)
    return out


def count_tools(request: LLMRequest, counter: TokenCounter,
                tools: Sequence[ToolSpec] | None = None) -> dict[str, int]:
    """Tokens of the ``tools`` array of ``request``'s body, per provider; with ``tools``, of
    the body that carries only those (a part of its own)."""
    chosen = tuple(request.tools if tools is None else tools)
    if not chosen:
        return dict.fromkeys(PROVIDERS, 0)
    kept = dataclasses.replace(request, tools=chosen)
    return {p: counter.count(tools_bytes(kept, p)) for p in PROVIDERS}


@dataclass(frozen=True)
class Run:
    """One job: its id, its outcome, every request it made, and what DA's call of the
    filesystem tool returned (None: no such call succeeded)."""

    job: str
    outcome: str
    requests: tuple[LLMRequest, ...]
    read: str | None

    def first(self, role: str) -> LLMRequest:
        """The first request of ``role``.

        Raises:
            GlidingError: the role made none (the job ended before it).
        """
        found = next((r for r in self.requests if r.meta.get("role") == role), None)
        if found is None:
            raise GlidingError(f"the job {self.job} ended {self.outcome} before {role} ran")
        return found

    def calls(self) -> dict[str, int]:
        """Model calls by role."""
        return {role: sum(r.meta.get("role") == role for r in self.requests) for role in ROLES}


async def run(settings: Settings, task: str, base: Path, answers: dict[str, Any],
              name: str) -> Run:
    """Run one job with ``answers`` as its model's replies."""
    path = base / f"replies-{name}.yaml"
    path.write_text(json.dumps(answers), encoding="utf-8")  # JSON is YAML
    model = Recording(FileScriptedLLM(path, replies_from_data(answers, str(path))))
    handle = await run_job(load_task_text(task, f"task-{name}.yaml", base), settings,
                           llm=model)
    if handle.report is None:
        raise GlidingError(f"the {name} job left no report")
    job = handle.report.job
    read = await anyio.to_thread.run_sync(read_back, settings.data_dir, job)
    return Run(job, handle.report.outcome, tuple(model.requests), read)


def read_back(data_dir: Path, job: str) -> str | None:
    """What the filesystem tool returned to DA in ``job`` (None: no call of it succeeded)."""
    with Archive.open(data_dir, job, create=False) as archive:
        for item in archive.list(kind="result"):
            if item.meta.get("tool") == READ and item.meta.get("ok"):
                return archive.get(item.iri).text()
    return None


def run_tool_bench(settings: Settings, modules: Path, node: str,
                   progress: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """Both jobs, and the figures of the module docstring; ``settings`` are those in force
    (its data directory and MCP servers replaced by a temporary one and the two servers).

    Raises:
        UsageError: a reference server is not installed, or the tokenizer is missing.
        GlidingError: a job ended before a role ran.
    """
    counter = exact_counter(settings.context.tokenizer)
    with tempfile.TemporaryDirectory(prefix="gliding-bench-tools-") as tmp:
        base = Path(tmp)
        workspace = base / "ws"
        workspace.mkdir()
        (workspace / NOTE).write_text(NOTE_TEXT, encoding="utf-8")
        servers = reference_servers(modules, node, workspace)
        runs: dict[str, Run] = {}
        for name, full in (("on_demand", False), ("full", True)):
            attached = ({n: s.model_copy(update={"on_demand": False})
                         for n, s in servers.items()} if full else servers)
            job_settings = settings.model_copy(update={
                "data_dir": base / "data",
                "mcp": settings.mcp.model_copy(update={"servers": attached})})
            progress(f"{name}: a scripted job of {', '.join(ROLES)} with both servers")
            runs[name] = anyio.run(run, job_settings, task_text(workspace, full=full), base,
                                   replies(workspace / NOTE, on_demand=not full), name)
    return figures(runs["on_demand"], runs["full"], counter, versions(modules))


def job_tokens(job: Run, counter: TokenCounter) -> dict[str, int]:
    """Over all the job's model calls: the tools' tokens (OpenAI's form), and the prompts'
    (those plus the messages, as the context engine counts them)."""
    tools = sum(count_tools(r, counter)["openai"] for r in job.requests)
    return {"tools": tools, "prompt": tools + sum(counter.messages(r.messages)
                                                  for r in job.requests)}


def figures(lazy: Run, full: Run, counter: TokenCounter,
            installed: Mapping[str, str]) -> dict[str, Any]:
    """The result (the module docstring says what each figure is)."""
    roles: dict[str, Any] = {}
    for role in ROLES:
        carried, catalog = lazy.first(role), full.first(role)
        on_demand = count_tools(carried, counter)
        every = count_tools(catalog, counter)
        without = count_tools(carried, counter, [t for t in carried.tools
                                                 if t.name not in META])
        roles[role] = {
            "on_demand": {"tools": len(carried.tools), **on_demand},
            "full": {"tools": len(catalog.tools), **every},
            "without_servers": {"tools": sum(t.name not in META for t in carried.tools),
                                **without},
            "ratio": {p: ratio(on_demand[p], every[p]) for p in PROVIDERS},
            "servers_add": {p: on_demand[p] - without[p] for p in PROVIDERS},
            "servers_add_ratio": {p: ratio(on_demand[p] - without[p], every[p])
                                  for p in PROVIDERS}}
    catalog = full.first("DA")
    servers: dict[str, Any] = {}
    for name, package in SERVERS.items():
        own = [t for t in catalog.tools if t.name.startswith(f"{name}__")]  # mcp/schema.py
        servers[name] = {"package": package, "version": installed[name], "tools": len(own),
                         **count_tools(catalog, counter, own)}
    worst = {p: max(r["ratio"][p] for r in roles.values()) for p in PROVIDERS}
    unchanged = all(len({tools_bytes(r, p) for r in session}) == 1
                    for job in (lazy, full) for session in sessions(job.requests).values()
                    for p in PROVIDERS)
    calls = {"on_demand": lazy.calls(), "full": full.calls()}
    answer = next((m.content for r in lazy.requests for m in r.messages
                   if m.role == "tool" and m.content.startswith(f"loaded {LOADED}: ")), "")
    return {
        "tokenizer": counter.encoding,
        "servers": servers,
        "core_groups": list(GROUP_NAMES),
        "roles": roles,
        "target": {"max_ratio": TARGET, "worst": worst,
                   "met": all(v <= TARGET for v in worst.values())},
        "tools_unchanged": unchanged,
        "model_calls": {**calls, "extra": sum(calls["on_demand"].values())
                        - sum(calls["full"].values())},
        "found_and_called": {"group": LOADED, "tool": READ,
                             "on_demand": lazy.read == NOTE_TEXT, "full": full.read == NOTE_TEXT,
                             "load_answer_tokens": counter.count(answer)},
        "job_tokens": {"on_demand": job_tokens(lazy, counter),
                       "full": job_tokens(full, counter)},
        "outcomes": {"on_demand": lazy.outcome, "full": full.outcome},
    }
