"""The result router: the threshold boundary, the preview_size bound, the IRI in every summary,
classification by shape, and the identifiers each kind of summary keeps."""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gliding.config.settings import ToolResultIRISettings
from gliding.context.router import classify, route_result
from gliding.core.identifiers import identifiers
from gliding.core.iri import result_iri

IRI = str(result_iri("job-7", "DA-3-0"))
DEFAULTS = ToolResultIRISettings()


def route(output: str, tool: str | None = None, *, threshold: int = DEFAULTS.threshold,
          preview_size: int = DEFAULTS.preview_size, iri: str = IRI,
          focus: frozenset[str] = frozenset()):
    return route_result(output, iri=iri, tool=tool, threshold=threshold,
                        preview_size=preview_size, focus=focus)


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise TimeoutError in the main thread when the block runs longer than ``seconds``."""

    def expire(_signum: int, _frame: object) -> None:
        raise TimeoutError(f"took longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def nbytes(text: str) -> int:
    return len(text.encode("utf-8"))


# --- threshold ---------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(text=st.text(min_size=70, max_size=3000).filter(lambda t: nbytes(t) > 128))
def test_exactly_threshold_bytes_stay_verbatim_and_one_byte_less_of_threshold_archives(
    text: str,
) -> None:
    size = nbytes(text)  # bytes, not characters: the text may hold multi-byte characters

    at = route(text, "bash", threshold=size, preview_size=4096)
    over = route(text, "bash", threshold=size - 1, preview_size=4096)

    assert (at.text, at.archived, at.kind) == (text, False, "verbatim")
    assert over.archived and over.kind != "verbatim"
    assert IRI in over.text
    assert f"{size} bytes" in over.text


@pytest.mark.parametrize("threshold", [128, 2048, 5000])
def test_one_multibyte_character_more_than_the_threshold_is_archived(threshold: int) -> None:
    fits = "a" * (threshold - 2) + "é"  # exactly ``threshold`` bytes, threshold - 1 characters

    assert route(fits, threshold=threshold).text == fits
    assert route(fits + "é", threshold=threshold).archived
    assert not route(fits[:-1] + "a", threshold=threshold).archived


# --- preview_size ------------------------------------------------------------------------------

LINE_KINDS = st.one_of(
    st.builds(lambda p, n, t: f"src/{p}.py:{n}:{t}",
              st.from_regex(r"[a-z_]{1,20}(/[a-z_]{1,12}){0,3}", fullmatch=True),
              st.integers(1, 99999), st.text(max_size=200)),
    st.builds(lambda n, t: f"{n}: {t}", st.integers(1, 9999), st.text(max_size=200)),
    st.builds(lambda p, n: f'  File "/srv/{p}.py", line {n}, in handler_{n}',
              st.from_regex(r"[a-z_/]{1,60}", fullmatch=True), st.integers(1, 9999)),
    st.sampled_from(["Traceback (most recent call last):", "exit code 1",
                     "ValueError: bad value_name 12345", ""]),
    st.text(max_size=400),
    st.text(alphabet=st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF), max_size=300),
)
TOOLS = st.sampled_from([None, "grep", "read_file", "bash", "list_dir", "kg_search", "weird"])


@settings(max_examples=120, deadline=None)
@given(lines=st.lists(LINE_KINDS, min_size=1, max_size=120), tool=TOOLS,
       preview_size=st.integers(300, 4096),
       job=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,40}", fullmatch=True),
       call=st.from_regex(r"[A-Z]{2}-[0-9]{1,4}-[0-9]", fullmatch=True))
def test_an_archived_result_never_exceeds_preview_size_and_always_names_its_iri(
    lines: list[str], tool: str | None, preview_size: int, job: str, call: str,
) -> None:
    output = "\n".join(lines)
    iri = str(result_iri(job, call))

    routed = route(output, tool, threshold=128, preview_size=preview_size, iri=iri)

    if nbytes(output) <= 128:
        assert routed.text == output
    else:
        assert routed.archived
        assert nbytes(routed.text) <= preview_size
        assert iri in routed.text


@given(json_doc=st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=50),
    lambda inner: st.lists(inner, max_size=8) | st.dictionaries(st.text(max_size=12), inner,
                                                                max_size=8),
    max_leaves=100))
@settings(max_examples=50, deadline=None)
def test_json_summaries_fit_preview_size_too(json_doc: object) -> None:
    output = json.dumps({"payload": json_doc, "pad": "padding words " * 250})

    routed = route(output, preview_size=512)

    assert routed.kind == "json"
    assert nbytes(routed.text) <= 512
    assert IRI in routed.text


def test_the_smallest_preview_size_settings_allow_is_respected() -> None:
    smallest = ToolResultIRISettings.model_fields["preview_size"].metadata[0].ge

    routed = route("x" * 5000, "bash", preview_size=smallest)

    assert nbytes(routed.text) <= smallest


# --- classification ----------------------------------------------------------------------------


def grep_output(files: int, path: str = "gliding/context/module_{:02d}.py") -> str:
    lines = []
    for f in range(files):
        for n in range(1, 2 + f % 4):
            lines.append(f"{path.format(f)}:{n * 17}:    result = handle_request(payload_{n})")
    return "\n".join(lines) + "\n"


def file_read(lines: int = 400) -> str:
    body = [f"{n}: " + (f"def handler_{n}(request):" if n % 20 == 1 else "    x = compute(x)")
            for n in range(1, lines + 1)]
    return f"[File: src/app/server.py ({lines} lines total)]\n" + "\n".join(body)


def traceback_output(min_bytes: int = 20_000) -> tuple[str, int]:
    """A deep Python traceback of at least ``min_bytes``, and the index of its last frame."""
    body = ["exit code 1", "Traceback (most recent call last):"]
    i = 0
    while sum(len(x) + 1 for x in body) < min_bytes:
        body.append(f'  File "/srv/app/pkg/layer_{i:03d}/handlers.py", line {100 + i}, '
                    f"in dispatch_{i}")
        body.append(f"    return dispatch_{i + 1}(request, context)")
        i += 1
    body.append("KeyError: 'missing_tenant_id'")
    return "\n".join(body), i - 1


JSON_DOC = json.dumps({"items": [{"id": k, "name": f"n{k}", "tags": ["a", "b"]}
                                 for k in range(500)], "total": 500, "next": None})
PLAIN = "\n".join(f"line {k} of a generic log with words alpha beta" for k in range(300))


@pytest.mark.parametrize(
    ("output", "tool", "kind"),
    [
        (grep_output(30), None, "search"),
        (grep_output(30), "grep", "search"),
        (PLAIN, "grep", "search"),  # the tool's name decides before the shape does
        (file_read(), None, "file"),
        ("\n".join(f"{n}\tvalue = {n}" for n in range(1, 400)), None, "file"),
        (PLAIN, "read_file", "file"),
        (traceback_output()[0], "bash", "shell"),
        ("exit code 2\n" + PLAIN, None, "shell"),
        (JSON_DOC, None, "json"),
        (JSON_DOC, "grep", "json"),  # valid JSON is JSON whoever printed it
        ("[not json " + PLAIN, None, "text"),
        (PLAIN, None, "text"),
    ],
    ids=["grep-shape", "grep-tool", "search-tool-name", "file-header", "numbered-lines",
         "read-tool-name", "traceback", "exit-code", "json", "json-from-grep", "bracket-text",
         "plain"],
)
def test_classification(output: str, tool: str | None, kind: str) -> None:
    assert classify(output, tool) == kind
    routed = route(output, tool)
    assert routed.kind == kind
    assert routed.text.startswith(f"[{kind} result archived as {IRI}: {nbytes(output)} bytes")


def test_a_long_hex_line_is_summarised_quickly() -> None:
    output = "exit code 0\n" + "0123456789abcdef" * 2500  # 40 KB, one line

    with deadline(seconds=1.0):
        routed = route(output, "bash")

    assert routed.archived


def test_deeply_nested_brackets_do_not_crash_the_router() -> None:
    routed = route("[" * 5000, "bash")

    assert routed.archived
    assert nbytes(routed.text) <= DEFAULTS.preview_size


# --- what summaries keep ---------------------------------------------------------------------


def test_search_summary_counts_matches_per_file_and_shows_the_first_matches() -> None:
    output = grep_output(6, path="src/m{}.py")

    text = route(output, "grep", threshold=256).text

    assert "13 matches in 6 files: " in text
    for f in range(6):
        assert f"src/m{f}.py ({1 + f % 4})" in text
    assert "src/m0.py:17:    result = handle_request(payload_1)" in text


def test_search_summary_over_30_files_has_every_count_when_it_fits() -> None:
    output = grep_output(30)

    text = route(output, "grep", preview_size=4096).text

    for f in range(30):
        assert f"gliding/context/module_{f:02d}.py ({1 + f % 4})" in text


def test_search_summary_over_30_files_keeps_per_file_counts_within_the_default_preview() -> None:
    output = grep_output(30)

    text = route(output, "grep").text

    assert "matches in 30 files" in text
    assert "gliding/context/module_00.py (1)" in text


def test_file_summary_has_path_line_count_and_numbered_outline() -> None:
    text = route(file_read(400), "read_file").text

    assert "file src/app/server.py, 400 lines" in text
    assert "outline (20 definitions):" in text
    assert "1: def handler_1(request):" in text
    assert "381: def handler_381(request):" in text  # the last definition, deep in the file


def test_shell_summary_keeps_exit_code_error_lines_and_the_exception() -> None:
    output, _last = traceback_output()
    assert nbytes(output) >= 20_000

    text = route(output, "bash").text

    assert "exit code 1" in text
    assert "2: Traceback (most recent call last):" in text
    last_line = len(output.splitlines())
    assert f"{last_line}: KeyError: 'missing_tenant_id'" in text
    assert nbytes(text) <= DEFAULTS.preview_size


def test_shell_summary_of_a_20kb_traceback_shows_the_last_frame() -> None:
    output, last = traceback_output()

    text = route(output, "bash").text

    assert f"/srv/app/pkg/layer_{last:03d}/handlers.py" in text
    assert f"line {100 + last}" in text


def test_json_summary_gives_the_shape_with_keys_and_array_lengths() -> None:
    text = route(JSON_DOC, "http_get").text

    shape = next(line for line in text.splitlines() if line.startswith("shape: "))
    assert shape == ('shape: {items: [500 × {id: 0, name: "n0", tags: [2 × "a"]}], '
                     "total: 500, next: null}")


def test_json_summary_keeps_each_record_with_its_ids_and_nested_fields() -> None:
    flights = [{"status": "available", "flight_number": f"HAT{n:03d}", "origin": "EWR",
                "prices": {"economy": 100 + n, "business": 400 + n}} for n in range(40)]
    output = json.dumps({"reservation_id": "ZFA04Y", "user_id": "mia_li_3668",
                         "flights": flights})

    text = route(output, "search_flights").text

    assert "reservation_id=ZFA04Y, user_id=mia_li_3668" in text
    # identifier-like keys (ids, numbers, codes, names, status) first, nested objects' scalars
    # under dotted keys
    assert ("flights[0]: status=available, flight_number=HAT000, origin=EWR, "
            "prices.economy=100, prices.business=400") in text


def test_json_records_that_share_the_focus_come_first() -> None:
    rows = [{"order_id": f"#W{n:07d}", "item": f"lamp model {n}", "price": 1000 + n}
            for n in range(200)]
    output = json.dumps(rows)

    plain = route(output, "get_orders").text
    focused = route(output, "get_orders", focus=frozenset({"1150", "lamp"})).text

    assert "#W0000150" not in plain  # the middle of the result: past the preview
    assert "[150]: order_id=#W0000150, item=lamp model 150, price=1150" in focused
    assert nbytes(focused) <= DEFAULTS.preview_size


def test_text_lines_on_the_focus_come_first_with_their_numbers() -> None:
    lines = [f"line {n} of a generic log with words alpha beta" for n in range(300)]
    lines[170] = "the session reads self.trust_env from session_settings here"
    output = "\n".join(lines)

    plain = route(output).text
    focused = route(output, focus=frozenset({"self.trust_env", "session"})).text

    assert "self.trust_env" not in plain.split("ids: ")[0]
    body = focused.splitlines()
    assert body[1] == "on the focus:"
    assert body[2] == "171: the session reads self.trust_env from session_settings here"
    # a line that only repeats what the focus names shows nothing new: not on the focus
    assert route(output, focus=frozenset({"self.trust_env", "session_settings", "session"})
                 ).text.splitlines()[1] == "head:"


def test_json_under_the_tools_own_first_line_is_summarised_as_json() -> None:
    rows = [{"order_id": f"#W{n:07d}", "total": 20 + n} for n in range(300)]
    output = "orders.json lines 1-1 of 1\n" + json.dumps(rows)

    routed = route(output, "read_file", focus=frozenset({"w0000157", "total"}))

    assert routed.kind == "json"
    lines = routed.text.splitlines()
    assert lines[1] == "orders.json lines 1-1 of 1"
    assert lines[3] == "[157]: order_id=#W0000157, total=177"  # after the shape: the focus


def test_json_records_keep_empty_objects_and_camel_case_ids_and_never_forge_lines() -> None:
    rows = [{"note": "n", "orderId": f"o{n}", "errors": {}, "bad\n[json result archived": n}
            for n in range(100)]

    text = route(json.dumps(rows), "api").text

    assert "[0]: orderId=o0, note=n, errors={}, bad [json result archived=0" in text
    assert not any(x.startswith("[json result archived") for x in text.splitlines()[1:])


def test_a_short_first_line_before_text_that_is_not_json_is_text() -> None:
    assert route("total: 3 rows\n" + "{not json " * 300).kind == "text"
    assert route(json.dumps("a long string " * 300)).kind == "text"  # a JSON scalar: text


def test_json_records_are_bounded() -> None:
    rows = [{"k": n} for n in range(50_000)]

    with deadline(seconds=5.0):
        routed = route(json.dumps(rows), "api", focus=frozenset({"49999"}))

    assert routed.kind == "json" and "[49999]" not in routed.text  # past the 2,000 records


def test_the_focus_is_found_inside_one_long_line() -> None:
    words = " ".join(f"word{n} value{n}" for n in range(3000))  # 40 KB on one line
    output = words.replace("word1500 value1500",
                           "word1500 session.trust_env = load_env(config_path) value1500")

    text = route(output, focus=frozenset({"session.trust_env", "session"})).text

    near = text.splitlines()[2]
    assert near.startswith("1: …") and "session.trust_env = load_env(config_path)" in near


def test_text_summary_keeps_head_and_tail() -> None:
    text = route(PLAIN).text

    lines = text.splitlines()
    assert lines[1] == "head:"
    assert "line 0 of a generic log with words alpha beta" in lines
    assert "line 299 of a generic log with words alpha beta" in lines
    assert "line 150 of a generic log with words alpha beta" not in lines


def test_identifiers_the_summary_does_not_show_are_listed_after_it() -> None:
    middle = [f"filler line {k} with plain words" for k in range(200)]
    middle[100] = "the failing key was tenant_lookup.by_region in cfg/prod.yaml"
    output = "\n".join(middle)

    text = route(output).text

    ids_line = next(line for line in text.splitlines() if line.startswith("ids: "))
    for ident in ("tenant_lookup.by_region", "cfg/prod.yaml"):
        assert ident in ids_line.split()


@settings(max_examples=40)
@given(st.lists(st.from_regex(r"[a-z]{2,8}(_[a-z]{2,8}|\.[a-z]{2,4}|/[a-z]{2,8})",
                              fullmatch=True), min_size=1, max_size=30))
def test_identifiers_are_found_once_each_in_order_of_first_appearance(names: list[str]) -> None:
    text = " ; ".join(names + names)

    assert identifiers(text) == list(dict.fromkeys(n for n in names if len(n) >= 4))


def test_summary_mentions_the_read_back_tools_and_size() -> None:
    output = PLAIN

    first = route(output).text.splitlines()[0]

    assert re.fullmatch(
        rf"\[text result archived as {re.escape(IRI)}: {nbytes(output)} bytes, 300 lines\. "
        r"Read it with read_result\(iri, offset, limit\) or grep_result\(iri, pattern\)\.\]",
        first)


def test_a_call_is_routed_past_its_cap_only() -> None:
    from gliding.context.router import arguments_size, route_call
    from gliding.core.messages import ToolCall

    call = ToolCall("c", "write_file", {"path": "a", "content": "é" * 50})
    size = arguments_size(call)
    assert size == len(call.arguments_json().encode())  # bytes, not characters
    assert route_call(call, iri="gliding://job/j/arguments/DA-1", cap=size) == (call, None)
    stub, seen = route_call(call, iri="gliding://job/j/arguments/DA-1", cap=size - 1)
    assert seen == size and (stub.id, stub.name) == ("c", "write_file")
    assert stub.arguments["arguments_archived"] == "gliding://job/j/arguments/DA-1"
    assert arguments_size(stub) < 200
