"""MQTT topic matching: properties checked against an independent regex oracle and by rewrites."""

from __future__ import annotations

import re

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from gliding.bus.port import check_pattern, check_topic, split_shared, topic_matches
from gliding.errors import BusError

# A small alphabet so that random filters and topics often match.
levels = st.sampled_from(["", "a", "b", "job", "$SYS", "x$"])
topic_levels = st.lists(levels, min_size=1, max_size=5)
topics = topic_levels.map("/".join).filter(bool)


@st.composite
def patterns(draw: st.DrawFn) -> str:
    parts = draw(st.lists(levels | st.just("+"), min_size=1, max_size=5))
    if draw(st.booleans()):
        parts.append("#")
    pattern = "/".join(parts)
    assume(pattern)
    return pattern


def oracle(pattern: str, topic: str) -> bool:
    """MQTT 3.1.1 section 4.7 as a regular expression, written independently of topic_matches."""
    if topic.startswith("$") and pattern[0] in "+#":
        return False
    parts = pattern.split("/")
    regex = ""
    for i, part in enumerate(parts):
        sep = "/" if i else ""
        if part == "#":
            # '#' also matches the parent level: 'a/#' matches 'a'
            regex = regex + "(/.*)?" if i else ".*"
        elif part == "+":
            regex += sep + "[^/]*"
        else:
            regex += sep + re.escape(part)
    return re.fullmatch(regex, topic) is not None


@given(patterns(), topics)
def test_agrees_with_the_regex_oracle(pattern: str, topic: str) -> None:
    assert topic_matches(pattern, topic) == oracle(pattern, topic)


@given(topics)
def test_a_topic_matches_itself_and_nothing_else_exact(topic: str) -> None:
    assert topic_matches(topic, topic)
    assert not topic_matches(topic, topic + "/more")
    assert not topic_matches(topic + "/more", topic)


@given(topic_levels.filter(lambda ls: "/".join(ls) != ""), st.data())
def test_plus_on_any_level_still_matches(parts: list[str], data: st.DataObject) -> None:
    topic = "/".join(parts)
    i = data.draw(st.integers(min_value=0, max_value=len(parts) - 1))
    if i == 0 and topic.startswith("$"):
        assert not topic_matches("/".join(["+", *parts[1:]]), topic)
    else:
        assert topic_matches("/".join([*parts[:i], "+", *parts[i + 1 :]]), topic)


@given(topic_levels.filter(lambda ls: "/".join(ls) != ""), st.data())
def test_hash_after_any_prefix_matches(parts: list[str], data: st.DataObject) -> None:
    topic = "/".join(parts)
    i = data.draw(st.integers(min_value=0, max_value=len(parts)))
    pattern = "/".join([*parts[:i], "#"])
    assert topic_matches(pattern, topic) == (i > 0 or not topic.startswith("$"))


@given(topics, topics)
def test_without_wildcards_only_equal_topics_match(pattern: str, topic: str) -> None:
    assert topic_matches(pattern, topic) == (pattern == topic)


@given(st.lists(st.just("+"), min_size=1, max_size=5), topics)
def test_plus_levels_match_topics_of_the_same_depth(pluses: list[str], topic: str) -> None:
    expected = len(pluses) == topic.count("/") + 1 and not topic.startswith("$")
    assert topic_matches("/".join(pluses), topic) == expected


@pytest.mark.parametrize(
    ("pattern", "topic", "expected"),
    [
        ("sport/tennis/player1/#", "sport/tennis/player1", True),
        ("sport/tennis/player1/#", "sport/tennis/player1/ranking", True),
        ("sport/tennis/player1/#", "sport/tennis/player1/score/wimbledon", True),
        ("sport/#", "sport", True),
        ("sport/tennis/+", "sport/tennis/player1", True),
        ("sport/tennis/+", "sport/tennis/player1/ranking", False),
        ("sport/+", "sport", False),
        ("sport/+", "sport/", True),
        ("+/+", "/finance", True),
        ("/+", "/finance", True),
        ("+", "/finance", False),
        ("#", "$SYS/monitor", False),
        ("+/monitor", "$SYS/monitor", False),
        ("$SYS/#", "$SYS/monitor", True),
    ],
)
def test_examples_from_the_mqtt_specification(pattern: str, topic: str, expected: bool) -> None:
    assert topic_matches(pattern, topic) is expected


@pytest.mark.parametrize("pattern", ["", "a/#/b", "#/a", "a#", "a/b+", "+a", "a/\x00"])
def test_bad_filters_raise(pattern: str) -> None:
    with pytest.raises(BusError):
        check_pattern(pattern)
    with pytest.raises(BusError):
        topic_matches(pattern, "a/b")


@pytest.mark.parametrize("topic", ["", "a/+", "a/#", "#", "a+b", "x" * 70_000])
def test_bad_publish_topics_raise(topic: str) -> None:
    with pytest.raises(BusError):
        check_topic(topic)
    with pytest.raises(BusError):
        topic_matches("#", topic)


@pytest.mark.parametrize(
    ("pattern", "topic", "expected"),
    [
        ("$share/g/sport/+", "sport/tennis", True),
        ("$share/g/sport/+", "sport/tennis/player1", False),
        ("$share/g/#", "sport", True),
        ("$share/g/#", "$SYS/monitor", False),
        ("$share/g/$SYS/#", "$SYS/monitor", True),
        ("$share/g/g/x", "g/x", True),  # the group name is not a topic level
        ("$share/g/g/x", "$share/g/g/x", None),  # nobody publishes on $share/...
    ],
)
def test_shared_filters_match_what_their_filter_matches(
    pattern: str, topic: str, expected: bool | None
) -> None:
    if expected is None:
        with pytest.raises(BusError, match="share"):
            topic_matches(pattern, topic)
    else:
        assert topic_matches(pattern, topic) is expected


def test_split_shared() -> None:
    assert split_shared("$share/workers/gliding/job/+/agent/DA") == (
        "workers",
        "gliding/job/+/agent/DA",
    )
    assert split_shared("gliding/#") == (None, "gliding/#")
    assert split_shared("$shared/x") == (None, "$shared/x")  # not the $share/ prefix


@pytest.mark.parametrize(
    "pattern", ["$share/", "$share/g", "$share/g/", "$share//a", "$share/g#/a", "$share/+/a",
                "$share/g/a/#/b", "$share/g/a+"],
)
def test_bad_shared_filters_raise(pattern: str) -> None:
    with pytest.raises(BusError):
        check_pattern(pattern)
