"""yamlsource: the line of every key and item, duplicate keys refused, syntax errors placed, and
pydantic errors turned into ``<source>:<line>: <field>: <message>`` lines."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gliding.config.yamlsource import (
    describe_validation_error,
    format_key_path,
    line_for,
    load_yaml_with_lines,
    read_yaml_text,
)
from gliding.errors import ConfigError, TaskFileError

DOC = """\
# a comment first
goal: x
budgets:
  turns:
    DA: 6

    CA: 3
checks:
  - file_exists: a
  - path: b
    text: c
  - [1, 2]
"""


def test_every_key_and_item_has_its_line() -> None:
    data, lines = load_yaml_with_lines(DOC, "t.yaml", error=TaskFileError)

    assert data["budgets"]["turns"] == {"DA": 6, "CA": 3}
    assert lines == {
        (): 2,
        ("goal",): 2,
        ("budgets",): 3,
        ("budgets", "turns"): 4,
        ("budgets", "turns", "DA"): 5,
        ("budgets", "turns", "CA"): 7,
        ("checks",): 8,
        ("checks", 0): 9,
        ("checks", 0, "file_exists"): 9,
        ("checks", 1): 10,
        ("checks", 1, "path"): 10,
        ("checks", 1, "text"): 11,
        ("checks", 2): 12,
        ("checks", 2, 0): 12,
        ("checks", 2, 1): 12,
    }


def test_keys_are_paths_of_the_values_yaml_built() -> None:
    _, lines = load_yaml_with_lines("1: a\nfalse: b\nnull: c\n", "t.yaml", error=ConfigError)
    assert set(lines) == {(), (1,), (False,), (None,)}


def test_keys_equal_once_built_are_duplicates() -> None:
    with pytest.raises(ConfigError, match="duplicate key 1: first at line 1, again at line 2"):
        load_yaml_with_lines("1: a\n0x1: b\n", "t.yaml", error=ConfigError)


@pytest.mark.parametrize("text", ["", "   \n", "# only a comment\n", "---\n", "null\n"])
def test_an_empty_document_is_none(text: str) -> None:
    assert load_yaml_with_lines(text, "t.yaml", error=ConfigError) == (None, {})


def test_duplicate_key_names_the_key_and_both_lines() -> None:
    text = "a:\n  b: 1\n  c: 2\n  b: 3\n"
    with pytest.raises(ConfigError) as caught:
        load_yaml_with_lines(text, "c.yaml", error=ConfigError)
    assert str(caught.value) == "c.yaml:4: duplicate key a.b: first at line 2, again at line 4"


def test_duplicate_key_inside_a_list_item_is_refused() -> None:
    text = "checks:\n  - {path: a, path: b}\n"
    with pytest.raises(TaskFileError, match=r"duplicate key checks\[0\]\.path"):
        load_yaml_with_lines(text, "t.yaml", error=TaskFileError)


def test_same_key_in_different_mappings_is_not_a_duplicate() -> None:
    data, _ = load_yaml_with_lines("a: {x: 1}\nb: {x: 2}\n", "t.yaml", error=ConfigError)
    assert data == {"a": {"x": 1}, "b": {"x": 2}}


def test_merge_key_may_be_overridden_without_a_duplicate_error() -> None:
    text = "base: &b {x: 1, y: 2}\nother:\n  <<: *b\n  x: 3\n"
    data, lines = load_yaml_with_lines(text, "t.yaml", error=ConfigError)
    assert data["other"] == {"x": 3, "y": 2}
    assert lines[("other", "x")] == 4
    assert ("other", "y") not in lines  # merged keys fall back to their parent's line
    assert line_for(("other", "y"), lines) == 2


def test_recursive_alias_is_refused_not_hung_on() -> None:
    with pytest.raises(ConfigError, match=r"t\.yaml:1:4: invalid YAML: an alias refers to a "
                                          r"node it stands inside"):
        load_yaml_with_lines("a: &x [1, *x]\n", "t.yaml", error=ConfigError)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: b\n  c: d\n", "t.yaml:2:4: invalid YAML: mapping values are not allowed here"),
        ("a: [1, 2\n", "t.yaml:2:1: invalid YAML: expected ',' or ']'"),
        ("a: 'open\n", "t.yaml:2:1: invalid YAML: found unexpected end of stream"),
        ("\ta: 1\n", "t.yaml:1:1: invalid YAML: found character '\\t'"),
        ("a: !!set [1]\n", "t.yaml:1:4: invalid YAML: expected a mapping node"),
        ("? [1]\n: x\n", "t.yaml:1:3: invalid YAML: found unhashable key"),
        ("a: 1\nb:\n  - !!int x\n", "t.yaml:3:5: invalid YAML: 'x' is not a valid !!int"),
        ("a: !!timestamp soon\n", "t.yaml:1:4: invalid YAML: 'soon' is not a valid !!timestamp"),
        ("a: {b: !!bool maybe}\n", "t.yaml:1:8: invalid YAML: 'maybe' is not a valid !!bool"),
        ("!!float x: 1\n", "t.yaml:1:1: invalid YAML: 'x' is not a valid !!float"),
    ],
)
def test_syntax_errors_carry_line_and_column(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_yaml_with_lines(text, "t.yaml", error=ConfigError)
    assert str(caught.value).startswith(expected)


def test_syntax_error_uses_the_callers_error_class() -> None:
    with pytest.raises(TaskFileError):
        load_yaml_with_lines("a: [", "t.yaml", error=TaskFileError)
    with pytest.raises(ConfigError):
        load_yaml_with_lines("a: [", "t.yaml", error=ConfigError)


def test_read_yaml_text_refuses_what_is_not_a_utf8_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        read_yaml_text(tmp_path / "none.yaml", what="config file", error=ConfigError)
    with pytest.raises(ConfigError, match="is a directory, not a config file"):
        read_yaml_text(tmp_path, what="config file", error=ConfigError)
    (tmp_path / "latin1.yaml").write_bytes(b"a: 1\n\nb: \xff\n")
    with pytest.raises(ConfigError, match=r"latin1\.yaml:3: the config file is not UTF-8"):
        read_yaml_text(tmp_path / "latin1.yaml", what="config file", error=ConfigError)


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ((), "(top level)"),
        (("goal",), "goal"),
        (("budgets", "turns", "QA"), "budgets.turns.QA"),
        (("checks", 1, "path"), "checks[1].path"),
        (("m", 0, 2), "m[0][2]"),
    ],
)
def test_format_key_path(path: tuple[object, ...], text: str) -> None:
    assert format_key_path(path) == text


class Inner(BaseModel):
    model_config = ConfigDict(extra="forbid")
    n: int = Field(1, ge=1)


class Outer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    items: list[Inner] = []
    inner: Inner | None = None


def _error(data: object) -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        Outer.model_validate(data)
    return caught.value


def test_validation_errors_become_one_line_each_at_the_closest_known_line() -> None:
    text = "items:\n  - n: 0\n  - {}\n  - n: 2\n    m: 3\ninner:\n  n: x\n"
    data, lines = load_yaml_with_lines(text, "o.yaml", error=ConfigError)

    message = describe_validation_error(_error(data), "o.yaml", lines, model=Outer)

    assert message.splitlines() == [
        "o.yaml:1: name: required field is missing",
        "o.yaml:2: items[0].n: Input should be greater than or equal to 1, got 0",
        "o.yaml:5: items[2].m: unknown field 'm' (fields: n)",
        "o.yaml:7: inner.n: Input should be a valid integer, unable to parse string as an "
        "integer, got 'x'",
    ]


def test_validation_error_without_any_known_line_falls_back_to_line_1() -> None:
    message = describe_validation_error(_error({"name": 3}), "o.yaml", {})
    assert message == "o.yaml:1: name: Input should be a valid string, got 3"


def test_validation_errors_carry_no_pydantic_noise() -> None:
    err = _error({"name": "x", "items": [{"n": "a" * 200}], "zzz": 1})
    message = describe_validation_error(err, "o.yaml", {(): 1}, model=None)
    assert "https://" not in message
    assert "For further information" not in message
    assert "[type=" not in message
    assert "o.yaml:1: zzz: unknown field" in message
    assert "got 'aaaaaaaa" in message and "...'" not in message.split("got ")[1][:70]


def test_absurd_nesting_is_an_error_not_a_crash() -> None:
    with pytest.raises(ConfigError, match="t.yaml: invalid YAML: nested too deeply"):
        load_yaml_with_lines("a: " + "[" * 5000 + "]" * 5000, "t.yaml", error=ConfigError)
