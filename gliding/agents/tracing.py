"""Traces: OpenTelemetry spans of a job, exported over OTLP/HTTP when ``traces.endpoint`` is set
(off by default; the ``traces`` extra installs the SDK and exporter).

The tree follows the OpenTelemetry semantic conventions for generative AI, version
``GENAI_SEMCONV`` (their span names and ``gen_ai.*`` attributes; the conventions are still
marked Development, so the version is written on every span as ``gliding.semconv``)::

    gliding.job                      gliding.job.id, gliding.job.outcome, gen_ai.conversation.id
      invoke_agent {role}            gen_ai.operation.name=invoke_agent, gen_ai.agent.name,
                                     gliding.session, gliding.cycle, gliding.attempt, gliding.step
        chat {model}                 gen_ai.operation.name=chat, gen_ai.provider.name,
                                     gen_ai.request.model, gen_ai.response.model,
                                     gen_ai.usage.input_tokens, gen_ai.usage.output_tokens,
                                     gliding.usage.cached_tokens, gliding.cost_usd,
                                     gliding.turn, gliding.replayed (read back on resume)
        execute_tool {tool}          gen_ai.operation.name=execute_tool, gen_ai.tool.name,
                                     gen_ai.tool.call.id, gliding.turn, gliding.tool.ok

Spans are parented through ``contextvars`` (the job's span is current while its agents run,
so the role sessions' tasks inherit it). A job's agents on a ``gliding worker`` trace there,
in the job's trace: the work item carries the job span's W3C ``traceparent``
(``traceparent()``), and the worker opens its ``invoke_agent`` span under it (``span(...,
parent=...)``), so one trace holds the whole job wherever its agents ran (each host exports
its own spans to its own ``traces.endpoint``). Tracing never stops a job: a collector that is
down loses the spans, with one warning when the job ends.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol

import structlog

from gliding.errors import ConfigError

log = structlog.get_logger("gliding.tracing")

GENAI_SEMCONV = "1.37.0"
EXPORT_TIMEOUT_S = 5.0  # one export to the collector, at most
FLUSH_TIMEOUT_MS = 5000  # what the job's end waits for its spans to go out, at most
TRACES_INSTALL = "pip install 'gliding[traces]'"

Attributes = Mapping[str, str | int | float | bool]


class Span(Protocol):
    def set_attributes(self, attributes: Attributes) -> None: ...


class _NoSpan:
    def set_attributes(self, attributes: Attributes) -> None:
        return None


class Tracer:
    """A job's spans: ``span(name, attributes)`` opens one under the current one."""

    def __init__(self, endpoint: str | None, service: str = "gliding") -> None:
        self.endpoint = endpoint
        self._provider: Any = None
        self._tracer: Any = None
        if endpoint is None:
            return
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError as exc:
            raise ConfigError(f"traces.endpoint is set but the OpenTelemetry SDK is missing: "
                              f"{exc}", hint=f"install it ({TRACES_INSTALL}) or unset "
                                             "traces.endpoint") from exc
        self._provider = TracerProvider(resource=Resource.create({"service.name": service}))
        self._provider.add_span_processor(BatchSpanProcessor(
            OTLPSpanExporter(endpoint=endpoint, timeout=EXPORT_TIMEOUT_S)))
        self._tracer = self._provider.get_tracer("gliding", schema_url=(
            f"https://opentelemetry.io/schemas/{GENAI_SEMCONV}"))

    @property
    def on(self) -> bool:
        return self._tracer is not None

    @contextmanager
    def span(self, name: str, attributes: Attributes, *, parent: str = "") -> Iterator[Span]:
        """A span named ``name`` under the current one (or, given a W3C ``parent``
        traceparent, under that span of another process), current while the block runs; an
        exception leaving the block is recorded on it (and goes on)."""
        if self._tracer is None:
            yield _NoSpan()
            return
        context = None
        if parent:
            from opentelemetry.trace.propagation.tracecontext import (
                TraceContextTextMapPropagator,
            )

            context = TraceContextTextMapPropagator().extract({"traceparent": parent})
        with self._tracer.start_as_current_span(
                name, context=context,
                attributes={**attributes, "gliding.semconv": GENAI_SEMCONV}) as span:
            yield span

    def traceparent(self) -> str:
        """The current span as a W3C ``traceparent`` ("" when nothing is traced)."""
        if self._tracer is None:
            return ""
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        carrier: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(carrier)
        return carrier.get("traceparent", "")

    def close(self) -> None:
        """Send what is left and stop (blocking, at most about ``FLUSH_TIMEOUT_MS``)."""
        if self._provider is None:
            return
        if not self._provider.force_flush(FLUSH_TIMEOUT_MS):
            log.warning("traces.unsent", endpoint=self.endpoint,
                        hint="is the OTLP collector at traces.endpoint up?")
        self._provider.shutdown()
        self._provider = self._tracer = None


NO_TRACES = Tracer(None)


def provider_of(model: str) -> str:
    """``gen_ai.provider.name`` of a model string: litellm's prefix (``openai/x`` → openai),
    or Gliding's own backends (``local``, ``scripted``)."""
    head = model.split(":", 1)[0] if model.startswith(("local", "scripted")) else model
    return head.split("/", 1)[0] if "/" in head else head
