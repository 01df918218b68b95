"""L1 lines: ``gist`` keeps a tool result's most useful lines (salient identifiers, definitions,
errors) in their order, without markup, with the exit code first; ``action_line`` keeps what an
assistant turn did and the start of what it thought. Both stay within their width."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gliding.context.gist import SEP, action_line, gist

# --- gist: what a line keeps ---------------------------------------------------------------------


def test_markup_only_lines_are_dropped_and_tags_stripped() -> None:
    text = "<output>\n\nsrc/app/loader.py:42 <b>parse_config</b> reads yaml\n</output>\n----\n"

    assert gist(text) == "src/app/loader.py:42 parse_config reads yaml"


def test_a_returncode_line_becomes_the_exit_prefix_only() -> None:
    text = "<returncode>1</returncode>\n<output>\nKeyError: 'tenant_id'\n</output>"

    assert gist(text) == "exit 1: KeyError: 'tenant_id'"


@pytest.mark.parametrize(("text", "head"), [
    ("exit code 2\nsrc/app/handlers.py:7: error: bad", "exit 2: "),
    ("<returncode>0</returncode>\nsrc/app/handlers.py ok", "exit 0: "),
    ("Return code: -9\nsrc/app/handlers.py killed", "exit -9: "),
    ("src/app/handlers.py ok\nall good", ""),
])
def test_an_exit_code_near_the_start_prefixes_the_line(text: str, head: str) -> None:
    out = gist(text)

    assert out.startswith(head)
    assert "src/app/handlers.py" in out
    if not head:
        assert not out.startswith("exit")


@pytest.mark.parametrize("text", ["", "\n\n  \n", "<output>\n</output>", "----\n====\n"])
def test_nothing_but_markup_is_no_output(text: str) -> None:
    assert gist(text) == "(no output)"


def test_nothing_but_markup_keeps_its_exit_code() -> None:
    assert gist("exit code 3\n") == "exit 3: exit code 3"  # the line itself is text
    assert gist("<returncode>3</returncode>\n<output>\n</output>").startswith("exit 3: ")


def test_chosen_lines_are_joined_in_their_original_order() -> None:
    text = "first_id.alpha here\nplain words only\nsecond_id.beta here\nthird_id.gamma here"

    out = gist(text, width=400)

    assert out == SEP.join(["first_id.alpha here", "second_id.beta here", "third_id.gamma here"])


def test_salient_identifiers_weigh_more_than_others() -> None:
    text = "zeta_mod.fn\nalpha_one beta_two gamma_3x"  # one identifier against three

    assert gist(text, width=30) == "alpha_one beta_two gamma_3x"  # the control
    assert gist(text, width=30, salient={"zeta_mod.fn"}) == "zeta_mod.fn"


def test_a_definition_outweighs_plain_text() -> None:
    text = "plain filler words\nmore filler words here\ndef handler(request):"

    assert gist(text, width=25) == "def handler(request):"


def test_an_error_outweighs_plain_text() -> None:
    text = "all seemed fine\nnothing to see\nKeyError: boom"

    assert gist(text, width=20) == "KeyError: boom"


def test_a_long_line_is_clipped_around_its_salient_identifier() -> None:
    line = " ".join(f"word{i}" for i in range(60)) + " needle_name.attr " + "tail " * 20

    out = gist(line, salient={"needle_name.attr"}, width=200, line_chars=60)

    assert "needle_name.attr" in out
    assert out.startswith("…") and out.endswith("…")
    assert len(out) <= 62


# --- gist: width ---------------------------------------------------------------------------------

_token = st.sampled_from([
    "the", "value", "KeyError:", "def", "class", "Traceback", "<b>", "</b>", "----", "a_b",
    "src/app/handlers.py:42", "parse_config", "cache_key.get", "1234", "987654",
    "a_very_long_identifier_that_takes_a_line_of_its_own_" * 3,
])
_line = st.lists(_token, max_size=40).map(" ".join)
_text = st.lists(_line, max_size=30).map("\n".join)


@settings(max_examples=80, deadline=None)
@given(text=_text, line_chars=st.integers(20, 200), extra=st.integers(0, 300),
       exit_code=st.one_of(st.none(), st.integers(-999, 999)))
def test_gist_stays_within_width_when_a_clipped_line_fits(
    text: str, line_chars: int, extra: int, exit_code: int | None
) -> None:
    if exit_code is not None:
        text = f"exit code {exit_code}\n{text}"
    # a clipped line is line_chars plus two "…", after an "exit -999: " head and a separator
    width = line_chars + 2 + len("exit -999: ") + len(SEP) + extra

    out = gist(text, salient={"a_b"}, width=width, line_chars=line_chars)

    assert 0 < len(out) <= width
    assert "\n" not in out


# --- action_line ---------------------------------------------------------------------------------


def test_an_action_is_its_calls_then_the_first_sentence_of_its_thought() -> None:
    out = action_line("Let me look at the loader. Then I will fix it.",
                      ['read_file({"path": "src/app/loader.py"})'])

    assert out == 'read_file({"path": "src/app/loader.py"}) — Let me look at the loader.'


def test_without_calls_the_last_code_block_is_the_action() -> None:
    content = ("THOUGHT: First I listed the files. Now run the tests.\n\n```bash\nls\n```\n"
               "and then\n```bash\ncd src\npytest -q tests/test_app.py\n```\n")

    out = action_line(content, [])

    assert out.startswith("$ cd src ⏎ pytest -q tests/test_app.py — ")
    assert out.endswith("First I listed the files.")
    assert "THOUGHT" not in out


def test_without_an_action_the_thought_is_the_line() -> None:
    assert action_line("  just   thinking\nabout parse_config.  ", []) == \
        "just thinking about parse_config."
    assert action_line("", []) == "(empty)"


def test_a_call_with_no_thought_is_the_call_alone() -> None:
    assert action_line("", ['bash({"cmd": "ls"})']) == 'bash({"cmd": "ls"})'


@settings(max_examples=80, deadline=None)
@given(content=st.text(max_size=600), calls=st.lists(st.text(max_size=200), max_size=4),
       width=st.integers(60, 400))
def test_action_line_stays_within_width(content: str, calls: list[str], width: int) -> None:
    out = action_line(content, calls, width=width)

    assert 0 < len(out) <= width


def test_action_line_stays_within_a_narrow_width() -> None:
    assert len(action_line("", ['bash({"cmd": "' + "x" * 200 + '"})'], width=40)) <= 40
