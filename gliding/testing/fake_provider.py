"""A fake hosted model provider: a real HTTP server on 127.0.0.1 that speaks OpenAI's
``/v1/chat/completions`` and Anthropic's ``/v1/messages``, streamed or not, answers from a
replies file, injects faults on a seeded schedule and records every request it received.

    with FakeProvider(Path("replies.yaml"), faults=FaultPlan(rate=0.3, seed=1)) as fp:
        env["GLIDING_LLM__API_BASE"] = fp.url   # llm.api_base; openai/x or anthropic/x
        ... run a job on "openai/fake-model" (OPENAI_API_KEY=dummy) ...
        fp.requests[0].body                     # the exact JSON bytes litellm sent
        fp.counts                               # {"ok": 9, "429": 2, "drop": 1, ...}

API (keep it stable: benchmarks and the prompt-cache simulator use it; ``openai_stream``
and ``sse_bytes`` stream a whole answer for other fakes):

``FakeProvider(replies, *, faults=None, latency_s=0.0, record=None, chunk_chars=8)``
    ``replies``: a replies file (``Path``, the format of ``gliding/llm/replies.py``:
    per role, one tool call or ``text:`` per turn) or the same as a ``dict``
    (``{"DA": [{"bash": {"command": "ls"}}, {"finish": {"summary": "ok"}}]}``); a reply list
    under ``"*"`` serves requests whose role is not recognised. ``faults``: a ``FaultPlan``
    (None: no faults). ``latency_s``: every answered request waits this long first (0: the
    replies' own ``latency_s``). ``record``: a JSONL file every request is appended to as
    well (one object a line: the fields of ``RecordedRequest``, ``body`` as text).
    ``chunk_chars``: the characters of text or of tool-call arguments one streamed chunk
    carries.
    A context manager: ``__enter__`` starts the server in a daemon thread on a free port,
    ``__exit__`` stops it (within a second, slow replies included). ``start()``/``stop()``
    do the same by hand.

``fp.url``
    ``http://127.0.0.1:<port>``: give it as ``api_base`` (``llm.api_base``). Any path ending
    in ``/chat/completions`` is OpenAI, any ending in ``/messages`` Anthropic, so the URL works
    with or without ``/v1`` however a client joins it.

``fp.requests``
    ``list[RecordedRequest]``, in arrival order, faulted ones included: ``path``,
    ``headers`` (lower-case names; ``authorization``, ``x-api-key`` and ``api-key`` removed),
    ``body`` (the exact bytes received), ``role`` (PA/DA/CA/AA or None), ``model`` (the
    body's), ``fault`` (the fault injected, None when answered), ``at`` (``time.time()``),
    ``key_sha256`` (sha256 of the API key sent: which key, without any recording holding it).

``fp.faults``
    The ``FaultPlan`` in force; assign a new one at any time (``fp.faults = FaultPlan.down()``
    for an outage, ``None`` when it is over). The random source is seeded once, with the
    seed of the plan given to the constructor.

``fp.counts``
    How many requests were answered (``"ok"``) and how many got each fault kind.

How a request is answered. Its role is the one its system prompt names ("You are DA, ..."),
as every Gliding role prompt begins; the role's next reply is sent and used up. A request
that gets a fault uses up no reply, so after retries the job gets the same replies as
without faults; the replies are kept per role for the provider's lifetime (a resumed job in
the same process goes on where it stopped; run one provider per job when jobs overlap).
Usage is counted as the scripted model does it: 4 characters of the body's text a token.
A role with no reply left is answered 400 (``invalid_request_error``), which a client must
not retry.

A request with ``"stream": true`` is answered as Server-Sent Events over a chunked body, the
way each API streams: OpenAI's ``chat.completion.chunk`` objects (the text, then each tool
call's name and its arguments in pieces, then the finish reason; a last chunk with no choices
and the usage when ``stream_options.include_usage`` is set; then ``data: [DONE]``), or
Anthropic's ``message_start`` (input tokens) ... ``content_block_delta`` (``text_delta``,
``input_json_delta``) ... ``message_delta`` (output tokens) ``message_stop``.

Faults (``FaultPlan.mix`` keys, chosen by weight for a share ``rate`` of requests, from a
``random.Random(seed)`` so a run is repeatable given the same order of requests):

    429       rate limited, no Retry-After            429_ra  rate limited, Retry-After: N s
    500       internal server error                   503     service unavailable
    529       Anthropic's overloaded_error (status 529; the same body on the OpenAI path)
    drop      the connection is closed without a response
    slow      nothing is sent for ``slow_s`` seconds, then the connection is closed (past
              the client's timeout when ``slow_s`` exceeds it)
    400       invalid_request_error; 401  authentication_error (faults a client must not
              retry; not in the default mix)
    cut       the answer starts (status 200, half its events, or half its JSON body) and
              the connection is closed mid-way: a stream cut (not in the default mix)

``FaultPlan.down_models`` names models (the body's ``model``) answered 503 every time: a
primary model that is down while a fallback is not. ``FaultPlan(..., start_after=n)`` lets n
requests through before its faults begin (an outage mid-job). Nothing here reaches the
internet.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

from gliding.core.messages import Message
from gliding.llm.replies import load_latency, load_replies, replies_from_data

FAULT_KINDS = ("429", "429_ra", "500", "503", "529", "drop", "slow", "400", "401", "cut")
DEFAULT_MIX: Mapping[str, float] = {"429": 2, "429_ra": 2, "500": 1, "529": 1, "drop": 1,
                                    "slow": 1}
_ROLE = re.compile(r"\bYou are (PA|DA|CA|AA)\b")
_SECRET_HEADERS = frozenset({"authorization", "x-api-key", "api-key"})


@dataclass(frozen=True)
class FaultPlan:
    """Which requests fail and how (see the module).

    ``rate``: the share of requests that get a fault (0 to 1). ``mix``: fault kind → weight.
    ``seed``: of the random choices. ``retry_after_s``: the Retry-After of ``429_ra`` (whole
    seconds, as HTTP sends them; ``retry_after_date`` sends it as an HTTP date instead).
    ``slow_s``: how long a ``slow`` fault holds the connection. ``down_models``: models
    answered 503 every time. ``start_after``: that many requests (counted from when the plan
    was set) pass unharmed first, so an outage can begin mid-job.
    """

    rate: float = 0.0
    mix: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_MIX))
    seed: int = 0
    retry_after_s: int = 1
    retry_after_date: bool = False
    slow_s: float = 5.0
    down_models: tuple[str, ...] = ()
    start_after: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError(f"rate must be within 0 and 1, got {self.rate}")
        unknown = set(self.mix) - set(FAULT_KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)} (kinds: {FAULT_KINDS})")
        if self.rate and not any(w > 0 for w in self.mix.values()):
            raise ValueError("mix needs a fault kind with a weight above 0")

    @classmethod
    def down(cls, kind: str = "503", *, start_after: int = 0) -> FaultPlan:
        """Every request fails with ``kind`` (after the first ``start_after``): an outage."""
        return cls(rate=1.0, mix={kind: 1.0}, start_after=start_after)


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the provider received it."""

    path: str
    headers: dict[str, str]
    body: bytes
    role: str | None
    model: str | None
    fault: str | None
    at: float
    key_sha256: str | None = None  # sha256 (hex) of the API key sent, never the key itself

    def json(self) -> Any:
        """The body parsed (None when it is not JSON)."""
        try:
            return json.loads(self.body)
        except ValueError:
            return None


class FakeProvider:
    """The fake provider server (see the module for the whole API)."""

    def __init__(self, replies: Path | Mapping[str, Any], *, faults: FaultPlan | None = None,
                 latency_s: float = 0.0, record: Path | None = None,
                 chunk_chars: int = 8) -> None:
        if isinstance(replies, Path):
            self._replies = load_replies(replies)
            own_latency = load_latency(replies)
        else:
            given = dict(replies)
            anyone = given.pop("*", None)  # the replies of requests without a known role
            self._replies = replies_from_data(given, "replies") if set(given) - {
                "latency_s"} else {}
            if anyone is not None:
                self._replies["*"] = replies_from_data({"DA": anyone}, "replies")["DA"]
            value = replies.get("latency_s", 0.0)
            own_latency = float(value) if isinstance(value, int | float) else 0.0
        self.faults = faults
        self.latency_s = latency_s or own_latency
        self.record = record
        self.chunk_chars = max(1, chunk_chars)
        self.requests: list[RecordedRequest] = []
        self.counts: Counter[str] = Counter()
        self._used: Counter[str] = Counter()
        self._rng = random.Random(faults.seed if faults is not None else 0)
        self._plan_seen: FaultPlan | None = None
        self._since_plan = 0  # requests since the plan in force was set
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the fake provider is not started")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FakeProvider:
        provider = self

        class Handler(_Handler):
            owner = provider

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        server.block_on_close = False
        self._server = server
        self._stopping.clear()
        self._thread = threading.Thread(target=server.serve_forever, kwargs={
            "poll_interval": 0.05}, name="fake-provider", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # slow replies and latency waits end now
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> FakeProvider:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def remaining(self, role: str) -> int:
        """Replies of ``role`` not yet sent."""
        with self._lock:
            return len(self._replies.get(role, ())) - self._used[role]

    # -- called from the handler threads ---------------------------------------------------

    def _fault_for(self, model: str | None) -> str | None:
        plan = self.faults
        if plan is None:
            return None
        if model is not None and _bare(model) in {_bare(m) for m in plan.down_models}:
            return "503"
        with self._lock:
            if plan is not self._plan_seen:
                self._plan_seen, self._since_plan = plan, 0
            self._since_plan += 1
            if self._since_plan <= plan.start_after:
                return None
            if plan.rate <= 0 or self._rng.random() >= plan.rate:
                return None
            kinds = [k for k, w in plan.mix.items() if w > 0]
            return self._rng.choices(kinds, weights=[plan.mix[k] for k in kinds])[0]

    def _take(self, role: str | None, *, use: bool = True) -> tuple[Message | None, str]:
        """The next reply of ``role`` (used up unless not ``use``), or None and why not."""
        key = role if role in self._replies else "*"
        with self._lock:
            replies = self._replies.get(key)
            if replies is None:
                return None, (f"fake provider: no replies for role {role or '(unknown)'} "
                              f"(roles: {', '.join(self._replies)})")
            n = self._used[key]
            if n >= len(replies):
                return None, (f"fake provider: no reply left for {key} turn {n + 1} "
                              f"(the replies have {len(replies)})")
            self._used[key] += use
            return replies[n], ""

    def _note(self, entry: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(entry)
            self.counts[entry.fault or "ok"] += 1
            if self.record is not None:
                line = {**asdict(entry), "body": entry.body.decode("utf-8", "replace")}
                with self.record.open("a", encoding="utf-8") as out:
                    out.write(json.dumps(line, ensure_ascii=False) + "\n")

    def _wait(self, seconds: float) -> None:
        if seconds > 0:
            self._stopping.wait(seconds)


def _bare(model: str) -> str:
    return model.split("/", 1)[1] if "/" in model else model


class _Handler(BaseHTTPRequestHandler):
    owner: FakeProvider
    protocol_version = "HTTP/1.1"  # keep-alive, as hosted APIs do

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        return None  # quiet: tests read fp.requests, not stderr

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        if self.path.rstrip("/").endswith("/models"):
            self._json(200, {"object": "list", "data": [{"id": "fake-model",
                                                         "object": "model"}]})
        else:
            self._json(404, {"error": {"message": f"no such path {self.path}",
                                       "type": "not_found"}})

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        fp = self.owner
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        path = self.path.split("?", 1)[0].rstrip("/")
        anthropic = path.endswith("/messages")
        if not (anthropic or path.endswith("/chat/completions")):
            self._json(404, {"error": {"message": f"no such path {self.path}",
                                       "type": "not_found"}})
            return
        try:
            data = json.loads(body)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            self._json(400, {"error": {"message": "the body is not a JSON object",
                                       "type": "invalid_request_error"}})
            return
        model = data.get("model") if isinstance(data.get("model"), str) else None
        role = _role_of(data, anthropic=anthropic)
        fault = fp._fault_for(model)
        headers = {k.lower(): v for k, v in self.headers.items()
                   if k.lower() not in _SECRET_HEADERS}
        fp._note(RecordedRequest(self.path, headers, body, role, model, fault, time.time(),
                                 _key_digest(self.headers)))
        if fault is not None and fault != "cut":
            self._fault(fault, anthropic)
            return
        message, why = fp._take(role, use=fault is None)  # a cut answer uses up no reply
        if message is None:
            self._json(400, _error_body(anthropic, "invalid_request_error", why))
            return
        fp._wait(fp.latency_s)
        prompt = max(1, len(json.dumps(data.get("messages", ""))
                         + json.dumps(data.get("system", ""))) // 4)
        reply = (_anthropic_reply(message, model or "fake", prompt) if anthropic
                 else _openai_reply(message, model or "fake", prompt))
        if data.get("stream") is True:
            options = data.get("stream_options")
            usage = isinstance(options, dict) and options.get("include_usage") is True
            self._sse(_anthropic_events(reply, fp.chunk_chars) if anthropic
                      else openai_stream(reply, fp.chunk_chars, usage=usage),
                      cut=fault == "cut")
        else:
            self._json(200, reply, cut=fault == "cut")

    def _fault(self, fault: str, anthropic: bool) -> None:
        fp, plan = self.owner, self.owner.faults or FaultPlan()
        if fault in ("drop", "slow"):
            if fault == "slow":
                fp._wait(plan.slow_s)
            self.close_connection = True  # nothing is sent: the client sees the socket close
            return
        if fault in ("429", "429_ra"):
            extra = {}
            if fault == "429_ra":
                extra["Retry-After"] = (formatdate(time.time() + plan.retry_after_s,
                                                   usegmt=True)
                                        if plan.retry_after_date else str(plan.retry_after_s))
            self._json(429, _error_body(anthropic, "rate_limit_error",
                                        "fake provider: rate limit reached"), extra)
        elif fault == "529":
            self._json(529, {"type": "error", "error": {"type": "overloaded_error",
                                                        "message": "Overloaded"}})
        elif fault == "400":
            self._json(400, _error_body(anthropic, "invalid_request_error",
                                        "fake provider: bad request"))
        elif fault == "401":
            self._json(401, _error_body(anthropic, "authentication_error",
                                        "fake provider: invalid api key"))
        elif fault == "500":
            self._json(500, _error_body(anthropic, "api_error" if anthropic else "server_error",
                                        "fake provider: internal error"))
        else:
            self._json(503, _error_body(anthropic, "api_error" if anthropic else "server_error",
                                        "fake provider: service unavailable"))

    def _json(self, status: int, value: Any, extra: Mapping[str, str] | None = None, *,
              cut: bool = False) -> None:
        """``value`` as the answer; ``cut``: only the first half of its bytes, then the
        connection is closed."""
        payload = json.dumps(value).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, text in (extra or {}).items():
                self.send_header(name, text)
            self.end_headers()
            self.wfile.write(payload[: len(payload) // 2] if cut else payload)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (its timeout): nothing to do
        if cut:
            self.close_connection = True

    def _sse(self, stream: list[tuple[str | None, str]], *, cut: bool) -> None:
        """``stream`` (event name or None, data) as Server-Sent Events in a chunked body, an
        HTTP chunk per event; ``cut``: only the first half of the events, then the connection
        is closed without the body's end."""
        if cut:
            stream = stream[: max(1, len(stream) // 2)]
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            # a stream ends its connection: none is left pooled in a client whose event loop
            # has ended (its socket would warn when collected, in some later test)
            self.send_header("Connection", "close")
            self.end_headers()
            for event in stream:
                raw = sse_bytes([event])
                self.wfile.write(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")
                self.wfile.flush()
            if not cut:
                self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up: nothing to do
        self.close_connection = True


def _role_of(data: Mapping[str, Any], *, anthropic: bool) -> str | None:
    """The role the request's system prompt names ("You are DA, ..."), or None."""
    texts: list[str] = []
    if anthropic:
        system = data.get("system")
        if isinstance(system, str):
            texts.append(system)
        elif isinstance(system, list):
            texts += [b.get("text", "") for b in system if isinstance(b, dict)]
    for message in data.get("messages") or ():
        if isinstance(message, dict) and message.get("role") == "system":
            content = message.get("content")
            if isinstance(content, str):
                texts.append(content)
            elif isinstance(content, list):
                texts += [b.get("text", "") for b in content if isinstance(b, dict)]
    for text in texts:
        if found := _ROLE.search(str(text)):
            return found.group(1)
    return None


def _key_digest(headers: Any) -> str | None:
    key = headers.get("x-api-key") or headers.get("api-key") or ""
    auth = headers.get("authorization") or ""
    if not key and auth.lower().startswith("bearer "):
        key = auth[7:].strip()
    return hashlib.sha256(key.encode()).hexdigest() if key else None


def _error_body(anthropic: bool, kind: str, message: str) -> dict[str, Any]:
    if anthropic:
        return {"type": "error", "error": {"type": kind, "message": message}}
    return {"error": {"message": message, "type": kind, "param": None, "code": kind}}


def _completion_tokens(message: Message) -> int:
    chars = len(message.content) + sum(len(c.arguments_json()) for c in message.tool_calls)
    return max(1, chars // 4)


def _openai_reply(message: Message, model: str, prompt: int) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "assistant", "content": message.content or None}
    if message.tool_calls:
        out["tool_calls"] = [{"id": f"call_{c.id}", "type": "function",
                              "function": {"name": c.name, "arguments": c.arguments_json()}}
                             for c in message.tool_calls]
    completion = _completion_tokens(message)
    return {"id": f"chatcmpl-fake-{time.monotonic_ns()}", "object": "chat.completion",
            "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": out,
                         "finish_reason": "tool_calls" if message.tool_calls else "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion}}


def _anthropic_reply(message: Message, model: str, prompt: int) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if message.content:
        content.append({"type": "text", "text": message.content})
    content += [{"type": "tool_use", "id": f"toolu_{c.id}", "name": c.name,
                 "input": dict(c.arguments)} for c in message.tool_calls]
    return {"id": f"msg_fake_{time.monotonic_ns()}", "type": "message", "role": "assistant",
            "model": model, "content": content,
            "stop_reason": "tool_use" if message.tool_calls else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": prompt, "output_tokens": _completion_tokens(message),
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}


def _pieces(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


def openai_stream(reply: dict[str, Any], size: int, *,
                  usage: bool) -> list[tuple[str | None, str]]:
    """A chat completion (``reply``, the JSON of a whole answer) as OpenAI streams it (see the
    module), ``size`` characters of text or arguments a chunk; ``usage``: the usage chunk
    (``stream_options.include_usage``). Events as ``sse_bytes`` takes them."""
    head = {"id": reply["id"], "object": "chat.completion.chunk", "created": reply["created"],
            "model": reply["model"]}
    choice = reply["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[None, str]:
        return None, json.dumps({**head, "choices": [
            {"index": 0, "delta": delta, "finish_reason": finish}]})

    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": piece}) for piece in _pieces(message.get("content") or "", size)]
    for i, call in enumerate(message.get("tool_calls") or ()):
        out.append(chunk({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                          "function": {"name": call["function"]["name"],
                                                       "arguments": ""}}]}))
        out += [chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
                for piece in _pieces(call["function"]["arguments"], size)]
    out.append(chunk({}, choice["finish_reason"]))
    if usage:
        out.append((None, json.dumps({**head, "choices": [], "usage": reply["usage"]})))
    return [*out, (None, "[DONE]")]


def sse_bytes(stream: list[tuple[str | None, str]]) -> bytes:
    """Server-Sent Events (event name or None, data) as the bytes of a response body."""
    return "".join((f"event: {name}\n" if name else "") + f"data: {data}\n\n"
                   for name, data in stream).encode()


def _anthropic_events(reply: dict[str, Any], size: int) -> list[tuple[str | None, str]]:
    """A message as Anthropic streams it (see the module), ``size`` characters of text or
    of a tool's input JSON an event."""
    def event(name: str, data: dict[str, Any]) -> tuple[str, str]:
        return name, json.dumps({"type": name, **data})

    usage = reply["usage"]
    start = {**reply, "content": [], "stop_reason": None,
             "usage": {**usage, "output_tokens": 1}}
    out = [event("message_start", {"message": start})]
    for i, block in enumerate(reply["content"]):
        if block["type"] == "text":
            out.append(event("content_block_start", {
                "index": i, "content_block": {"type": "text", "text": ""}}))
            out += [event("content_block_delta", {
                "index": i, "delta": {"type": "text_delta", "text": piece}})
                for piece in _pieces(block["text"], size)]
        else:
            out.append(event("content_block_start", {"index": i, "content_block": {
                **block, "input": {}}}))
            out += [event("content_block_delta", {
                "index": i, "delta": {"type": "input_json_delta", "partial_json": piece}})
                for piece in _pieces(json.dumps(block["input"]), size)]
        out.append(event("content_block_stop", {"index": i}))
    out.append(event("message_delta", {
        "delta": {"stop_reason": reply["stop_reason"], "stop_sequence": None},
        "usage": {"output_tokens": usage["output_tokens"]}}))
    return [*out, event("message_stop", {})]
