"""traces.endpoint: a scripted job's spans arrive at a loopback OTLP/HTTP receiver, decoded with
opentelemetry-proto, as the tree job → role session → model call / tool call, with the
GenAI conventions' names and token attributes; unset, nothing is sent."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from gliding.testing import call
from tests.settings_effects.effects_support import run_scripted, settings_from, write_task

pytest.importorskip("opentelemetry.sdk")
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


class Receiver:
    """An OTLP/HTTP traces receiver on 127.0.0.1: every span it was sent, decoded."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.posts = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver.posts += 1
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        receiver.spans.extend(scope.spans)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"

    def __enter__(self) -> Receiver:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "workspace").mkdir()
    return tmp_path


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as r:
        yield r


def attributes(span: Any) -> dict[str, Any]:
    out = {}
    for kv in span.attributes:
        value = kv.value
        out[kv.key] = getattr(value, value.WhichOneof("value"))
    return out


SCRIPT = {"PA": [call("finish", steps=["write the file"])],
          "DA": [call("bash", command="echo hi > hi.txt"), call("finish", summary="wrote")]}
TASK = "goal: Write hi.txt\npipeline: [PA, DA]\n"


def test_endpoint_gets_the_jobs_span_tree_with_token_attributes(tmp: Path,
                                                               receiver: Receiver) -> None:
    settings = settings_from(tmp, {"GLIDING_TRACES__ENDPOINT": receiver.url})
    job = run_scripted(write_task(tmp, TASK), settings, SCRIPT)
    assert job.handle.report.outcome == "success", job.handle.report
    spans = {s.span_id: s for s in receiver.spans}
    names = sorted(s.name for s in spans.values())
    assert names == sorted(["gliding.job", "invoke_agent PA", "invoke_agent DA",
                            "chat scripted", "chat scripted", "chat scripted",
                            "execute_tool bash"])
    [root] = [s for s in spans.values() if s.name == "gliding.job"]
    assert root.parent_span_id == b"" and len({s.trace_id for s in spans.values()}) == 1
    assert attributes(root)["gliding.job.outcome"] == "success"
    agents = {s.name: s for s in spans.values() if s.name.startswith("invoke_agent")}
    for agent in agents.values():
        assert agent.parent_span_id == root.span_id
        assert attributes(agent)["gen_ai.operation.name"] == "invoke_agent"
    for span in spans.values():
        if span.name.startswith(("chat", "execute_tool")):
            parent = spans[span.parent_span_id]
            assert parent.name.startswith("invoke_agent"), span.name
            assert attributes(span)["gliding.semconv"] == "1.37.0"
    chats = [attributes(s) for s in spans.values() if s.name.startswith("chat")]
    for chat in chats:
        assert chat["gen_ai.operation.name"] == "chat"
        assert chat["gen_ai.provider.name"] == "scripted"
        assert chat["gen_ai.usage.input_tokens"] > 0 and "gen_ai.usage.output_tokens" in chat
        assert chat["gliding.replayed"] is False
    [tool] = [attributes(s) for s in spans.values() if s.name == "execute_tool bash"]
    assert tool["gen_ai.tool.name"] == "bash" and tool["gliding.tool.ok"] is True
    assert spans[[s for s in spans.values() if s.name == "execute_tool bash"][0]
                 .parent_span_id] is agents["invoke_agent DA"]


def test_endpoint_default_sends_nothing(tmp: Path, receiver: Receiver) -> None:
    job = run_scripted(write_task(tmp, TASK), settings_from(tmp), SCRIPT)
    assert job.handle.report.outcome == "success"
    assert receiver.posts == 0


def test_endpoint_must_be_an_http_url(tmp: Path) -> None:
    from gliding.errors import ConfigError

    with pytest.raises(ConfigError, match="must be an http"):
        settings_from(tmp, {"GLIDING_TRACES__ENDPOINT": "file:///etc/passwd"})
