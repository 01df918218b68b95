"""A server's tool listing as our tool names and schemas; a result as text, capped (pure)."""

from __future__ import annotations

import base64
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp import types

from gliding.tools.base import Tool
from gliding.tools.groups import known_group
from gliding.tools.mcp import schema
from gliding.tools.mcp.render import EMPTY, cap, render

MODEL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def test_names_are_the_server_then_the_tool_and_safe_for_every_model_api() -> None:
    names = schema.tool_names("fs", ["read_file", "get.env", "a/b c"])
    assert names == {"read_file": "fs__read_file", "get.env": "fs__get_env",
                     "a/b c": names["a/b c"]}
    assert names["a/b c"].startswith("fs__a_b_c")
    assert all(MODEL_NAME.fullmatch(n) for n in names.values())


@given(st.lists(st.text(min_size=1, max_size=130), max_size=12, unique=True))
def test_names_stay_unique_and_within_64_characters(tools: list[str]) -> None:
    names = schema.tool_names("a-server_name-of-32-characters-x", tools)
    assert len(set(names.values())) == len(tools)
    assert all(MODEL_NAME.fullmatch(n) for n in names.values())


def test_a_long_name_is_cut_and_keeps_a_hash_of_the_original() -> None:
    long = "x" * 100
    (name,) = schema.tool_names("srv", [long]).values()
    assert len(name) == 64 and name == schema.tool_names("srv", [long])[long]  # stable
    assert name != schema.tool_names("srv", ["x" * 101])["x" * 101]


def test_the_schema_keeps_properties_and_required_and_drops_draft_keywords() -> None:
    got = schema.parameters({
        "$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
        "properties": {
            "a": {"type": "number", "description": "First number", "$comment": "x"},
            "maybe": {"type": ["string", "null"]},
            "either": {"type": ["string", "integer"]},
            "anything": True,
            "ref": {"$ref": "#/$defs/Point"},
        },
        "required": ["a", "ghost"],
        "$defs": {"Point": {"type": "object"}},
    })
    assert got == {
        "type": "object",
        "properties": {"a": {"type": "number", "description": "First number"},
                       "maybe": {"type": "string"}, "either": {}, "anything": {},
                       "ref": {"$ref": "#/$defs/Point"}},
        "required": ["a"],
        "$defs": {"Point": {"type": "object"}},
    }


def test_a_missing_or_odd_schema_is_a_tool_without_arguments() -> None:
    for odd in (None, {}, {"type": "object"}, {"properties": []}, "nonsense"):
        assert schema.parameters(odd) == {"type": "object", "properties": {}, "required": []}


def test_the_converted_schema_is_one_our_argument_check_can_use() -> None:
    params = schema.parameters({"type": "object", "properties": {
        "n": {"type": ["integer", "null"]}, "s": {"type": "string"}}, "required": ["s"]})
    tool = Tool("t", "", params, run=lambda a, c: None)  # type: ignore[arg-type, return-value]
    assert tool.check_arguments({"n": 5.0, "s": "x"}) == {"n": 5, "s": "x"}
    with pytest.raises(Exception, match="must be an integer"):
        tool.check_arguments({"n": "five", "s": "x"})


def test_descriptions_are_clipped_and_say_which_server_answers() -> None:
    text = schema.description(None, "word " * 500, "github")
    assert len(text) <= schema.DESCRIPTION_CHARS and text.endswith("… (MCP: github)")
    assert schema.description("Echo", None, "e") == "Echo (MCP: e)"
    long_arg = schema.parameters({"properties": {"p": {"type": "string",
                                                       "description": "d" * 1000}}})
    assert len(long_arg["properties"]["p"]["description"]) == schema.PROPERTY_CHARS


def test_only_read_only_or_idempotent_tools_may_be_replayed_as_idempotent() -> None:
    assert not schema.idempotent(None)
    assert not schema.idempotent(types.ToolAnnotations(destructive_hint=True))
    assert schema.idempotent(types.ToolAnnotations(read_only_hint=True))
    assert schema.idempotent(types.ToolAnnotations(idempotent_hint=True))


def test_every_kind_of_content_is_rendered_as_text() -> None:
    png = base64.b64encode(b"\x89PNG" + b"\0" * 96).decode()
    text = render([
        types.TextContent(type="text", text="hello"),
        types.ImageContent(type="image", data=png, mime_type="image/png"),
        types.AudioContent(type="audio", data=base64.b64encode(b"abc").decode(),
                           mime_type="audio/wav"),
        types.EmbeddedResource(type="resource", resource=types.TextResourceContents(
            uri="demo://text/1", mime_type="text/plain", text="resource text")),
        types.EmbeddedResource(type="resource", resource=types.BlobResourceContents(
            uri="demo://blob/1", blob=base64.b64encode(b"12345").decode())),
        types.ResourceLink(type="resource_link", name="Doc", uri="file:///doc.md",
                           mime_type="text/markdown", description="the doc"),
    ])
    assert text.splitlines() == [
        "hello", "[image image/png, 100 bytes]", "[audio audio/wav, 3 bytes]",
        "[resource demo://text/1 (text/plain)]", "resource text",
        "[resource demo://blob/1, 5 bytes]",
        '[resource link file:///doc.md "Doc" (text/markdown): the doc]']


def test_structured_content_is_shown_when_there_is_nothing_else() -> None:
    assert render([], {"temperature": 21}) == '{\n "temperature": 21\n}'
    assert render([types.TextContent(type="text", text="21")], {"temperature": 21}) == "21"
    assert render([]) == EMPTY


@given(st.text(max_size=3000), st.integers(min_value=16, max_value=2048))
def test_the_cap_keeps_whole_characters_within_the_bytes_and_says_so(text: str,
                                                                      limit: int) -> None:
    capped, cut = cap(text, limit)
    size = len(text.encode())
    assert cut == (size > limit)
    if cut:
        kept, notice = capped.rsplit("\n[cut: ", 1)
        assert len(kept.encode()) <= limit and text.startswith(kept)
        assert notice == (f"the result was {size} bytes; only the first {limit} were kept "
                          "(mcp.max_result_bytes)]")
    else:
        assert capped == text


def test_roles_may_name_a_builtin_group_or_any_valid_mcp_group() -> None:
    assert known_group("read") and known_group("mcp_github") and known_group("mcp_file-sys")
    for bad in ("mcp_", "mcp_Bad", "mcp_" + "x" * 33, "nope", "mcp_a.b"):
        assert not known_group(bad), bad
