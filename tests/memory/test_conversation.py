"""Conversations into memory: LoCoMo-format sessions become Event, Person, Entity and Turn nodes
through the real ingestion path (embedded Oxigraph + a real L0 archive), with hostile speaker
names and turn ids; the pure helpers (dates, names, keys) on their own."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gliding.bench.conversation import (
    MAX_ENTITIES,
    ConversationIngestor,
    Session,
    Utterance,
    entity_key,
    named_entities,
    sessions_of,
    turn_count,
)
from gliding.core.dates import parse_date, parse_when
from gliding.memory.archive.store import Archive
from gliding.memory.backends.oxigraph_embedded import OxigraphBlackboard
from gliding.memory.board.blackboard import Ref
from gliding.memory.board.nodes import DirectWriter, JobNodeStore
from gliding.memory.board.vocabulary import MAX_IRI_CHARS, VocabularyError, check_iri, from_jsonld
from gliding.memory.ingest.ingestor import Ingestor
from gliding.testing.blocking import Blocking

JOB = "conv-1"
BASE = f"gliding://job/{JOB}"


# --- dates ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("1:56 pm on 8 May, 2023", datetime(2023, 5, 8, 13, 56)),
    ("10:04 am on 19 Jan, 2023", datetime(2023, 1, 19, 10, 4)),
    ("12:00 am on 1 January, 2024", datetime(2024, 1, 1, 0, 0)),
    ("12:30 pm on 29 February, 2024", datetime(2024, 2, 29, 12, 30)),
    ("8 May, 2023", datetime(2023, 5, 8)),
    ("8 May 2023", datetime(2023, 5, 8)),
    ("  1:56   pm on\n8 May,  2023 ", datetime(2023, 5, 8, 13, 56)),  # whitespace folded
    ("sometime around 3 Sep, 2022 (evening)", datetime(2022, 9, 3)),  # a date inside text
    ("13:99 pm on 8 May, 2023", datetime(2023, 5, 8)),  # a bad time: the date at midnight
])
def test_parse_when_reads_locomo_dates(text: str, expected: datetime) -> None:
    assert parse_when(text) == expected
    assert parse_date(text) == expected.date()


@pytest.mark.parametrize("text", [
    "", "garbage", "31 February, 2023", "8 Smarch, 2023",
    "0 May, 2023", "9" * 10_000, "\x00\ud800",
])
def test_parse_when_gives_none_for_what_is_not_a_date(text: str) -> None:
    assert parse_when(text) is None
    assert parse_date(text) is None


@pytest.mark.parametrize("value", [None, 20230508, 3.5, ["8 May, 2023"], b"8 May, 2023"])
def test_parse_date_of_a_non_string_is_none(value: object) -> None:
    assert parse_date(value) is None


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_parse_when_never_raises(text: str) -> None:
    result = parse_when(text)
    assert result is None or isinstance(result, datetime)


# --- names ------------------------------------------------------------------------------------


def test_named_entities_skips_sentence_openers_and_stock_words() -> None:
    text = ("Sweden is lovely. I went with Jon to Becoming Nicole in Stockholm! Oh, and Yeah "
            "I loved it. Paris was next? Hey, I think OK is fine.")
    assert named_entities(text) == ["Jon", "Becoming Nicole", "Stockholm"]


def test_named_entities_dedupes_case_insensitively_keeping_the_first_spelling() -> None:
    assert named_entities("we saw Oslo, then OSLO again, and Oslo once more") == ["Oslo"]


def test_named_entities_strips_quotes_and_caps_the_count() -> None:
    assert named_entities("the word ’Tis and 'Nope' here") == ["Tis", "Nope"]
    many = "and " + " and ".join(f"N{chr(97 + i)}x" for i in range(20))
    assert len(named_entities(many)) == MAX_ENTITIES
    assert named_entities(many, limit=3) == ["Nax", "Nbx", "Ncx"]


def test_named_entities_of_empty_or_lowercase_text() -> None:
    assert named_entities("") == []
    assert named_entities("nothing capitalised here at all") == []
    assert named_entities("a b c A B C") == []  # single letters are not names


def test_named_entities_keeps_non_ascii_names_whole() -> None:
    assert named_entities("then I met Zoë, later Zoé, in München with Åsa") == [
        "Zoë", "Zoé", "München", "Åsa"]


@pytest.mark.parametrize(("name", "key"), [
    ("Becoming Nicole", "becoming nicole"),
    ("  Becoming\t\nNicole ", "becoming nicole"),
    ("Caroline’s", "caroline's"),
    ("ZOË", "zoë"),
])
def test_entity_key_folds_case_quotes_and_space(name: str, key: str) -> None:
    assert entity_key(name) == key


# --- LoCoMo dicts -----------------------------------------------------------------------------


def test_sessions_of_reads_sessions_in_numeric_order_with_captions() -> None:
    conversation: dict[str, Any] = {
        "speaker_a": "Caroline", "speaker_b": "Melanie",
        "session_10": [{"speaker": "Melanie", "dia_id": "D10:1", "text": "late"}],
        "session_10_date_time": "9:00 am on 2 March, 2024",
        "session_2": [
            {"speaker": "Caroline", "dia_id": "D2:1", "text": "look", "blip_caption": "a dog"},
            {"speaker": "Melanie", "text": "no id, skipped"},
            "not a turn",
            {"dia_id": 7, "text": 42},
        ],
        "session_2_date_time": 20230508,  # not a string: no date
        "session_2_summary": "not read",
        "session_1_observation": ["not read"],
        "session_3": "not a list: skipped",
        "session_1": [],
    }
    sessions = sessions_of(conversation)
    assert [s.number for s in sessions] == [1, 2, 10]
    assert sessions[0] == Session(1, "", ())
    assert sessions[1].date_text == ""
    assert sessions[1].turns == (Utterance("D2:1", "Caroline", "look [image: a dog]"),
                                 Utterance("7", "", "42"))
    assert sessions[2].date_text == "9:00 am on 2 March, 2024"
    assert turn_count(sessions) == 3
    assert sessions_of({}) == [] and turn_count([]) == 0


# --- ingestion --------------------------------------------------------------------------------


def open_all(tmp: Path) -> tuple[Any, OxigraphBlackboard, Archive]:
    """A conversation ingestor on the pass-through writer, each call run to its end here."""
    board = OxigraphBlackboard.in_memory()
    archive = Archive.open(tmp, JOB)
    writer = DirectWriter(JobNodeStore(board, archive, JOB))
    return Blocking(ConversationIngestor(Ingestor(board, archive, JOB, writer))), board, archive


def subjects(board: OxigraphBlackboard, graph: str = BASE) -> set[str]:
    rows = board.query("SELECT DISTINCT ?s WHERE { ?s ?p ?o }", graph=graph)
    return {row["s"].iri for row in rows if isinstance(row["s"], Ref)}


def latest_revisions(archive: Archive) -> dict[str, dict[str, Any]]:
    """Node IRI -> its last archived revision, parsed back from the JSON-LD in L0."""
    out: dict[str, dict[str, Any]] = {}
    for entry in archive.list(kind="node"):
        out[entry.meta["node"]] = from_jsonld(archive.get(entry.iri).content or b"")
    return out


def test_a_session_becomes_event_people_entities_and_turns(tmp_path: Path) -> None:
    ingest, board, archive = open_all(tmp_path)
    session = Session(1, "1:56 pm on 8 May, 2023", (
        Utterance("D1:1", "Caroline", "I went to a support group in Stockholm yesterday."),
        Utterance("D1:2", "Melanie", "Wow Caroline, Stockholm sounds far! Was Jon there?"),
        Utterance("D1:3", "Caroline", "No, sadly Jon stayed home."),
    ))
    with archive:
        iris = ingest.session(session)
        assert iris == [ingest.turn_iris[t.id] for t in session.turns]
        event = board.get(f"{BASE}/session/1", graph=BASE)
        assert event == {"@id": f"{BASE}/session/1", "@type": "Event", "text": "session 1",
                         "partOf": BASE, "sessionDate": "1:56 pm on 8 May, 2023",
                         "createdAt": "2023-05-08T13:56:00"}
        caroline, melanie = f"{BASE}/person/Caroline", f"{BASE}/person/Melanie"
        assert board.get(caroline, graph=BASE) == {"@id": caroline, "@type": "Person",
                                                   "name": "Caroline"}
        stockholm, jon = f"{BASE}/entity/stockholm", f"{BASE}/entity/jon"
        assert board.get(stockholm, graph=BASE) == {"@id": stockholm, "@type": "Entity",
                                                    "name": "Stockholm"}
        second = board.get(iris[1], graph=BASE)
        assert second == {
            "@id": f"{BASE}/turn/Melanie/D1%3A2", "@type": "Turn", "role": "Melanie",
            "name": "D1:2", "text": "Wow Caroline, Stockholm sounds far! Was Jon there?",
            "partOf": f"{BASE}/session/1", "position": 2, "speaker": melanie,
            "sessionDate": "1:56 pm on 8 May, 2023", "createdAt": "2023-05-08T13:56:00",
            "mentions": sorted([stockholm, jon, caroline])}  # the speaker it names is a Person
        third = board.get(iris[2], graph=BASE)
        assert third is not None and third["mentions"] == [jon] and third["position"] == 3
        # every node's L0 revision equals what the board holds
        revisions = latest_revisions(archive)
        assert set(revisions) == subjects(board)
        for iri, node in revisions.items():
            assert board.get(iri, graph=BASE) == node


def test_people_and_entities_are_written_once_across_sessions(tmp_path: Path) -> None:
    ingest, board, archive = open_all(tmp_path)
    with archive:
        ingest.session(Session(1, "8 May, 2023", (
            Utterance("D1:1", "Caroline", "I love the band Lorde a lot."),)))
        ingest.session(Session(2, "9 June, 2023", (
            Utterance("D2:1", "caroline", "Saw Lorde again, loved it."),
            Utterance("D2:2", "Melanie", "lucky you"),)))
        nodes = [e.meta["node"] for e in archive.list(kind="node")]
        assert nodes.count(f"{BASE}/person/Caroline") == 1  # one Person whatever the case
        assert nodes.count(f"{BASE}/entity/lorde") == 1
        assert f"{BASE}/person/caroline" not in subjects(board)
        second = board.get(ingest.turn_iris["D2:1"], graph=BASE)
        assert second is not None and second["speaker"] == f"{BASE}/person/Caroline"
        assert second["role"] == "caroline"  # the role keeps the source's spelling
        plain = board.get(ingest.turn_iris["D2:2"], graph=BASE)
        assert plain is not None and "mentions" not in plain
        later = board.get(f"{BASE}/session/2", graph=BASE)
        assert later is not None and later["createdAt"] == "2023-06-09T00:00:00"


def test_a_session_without_a_readable_date_has_no_stamp(tmp_path: Path) -> None:
    ingest, board, archive = open_all(tmp_path)
    with archive:
        ingest.session(Session(1, "", (Utterance("D1:1", "", "anonymous words"),)))
        ingest.session(Session(2, "the day after", (Utterance("D2:1", "A", "x"),)))
        assert board.get(f"{BASE}/session/1", graph=BASE) == {
            "@id": f"{BASE}/session/1", "@type": "Event", "text": "session 1", "partOf": BASE}
        anonymous = board.get(ingest.turn_iris["D1:1"], graph=BASE)
        assert anonymous is not None and anonymous["role"] == "-"
        assert "speaker" not in anonymous and "createdAt" not in anonymous
        assert ingest.turn_iris["D1:1"] == f"{BASE}/turn/-/D1%3A1"
        later = board.get(f"{BASE}/session/2", graph=BASE)
        assert later is not None and later["sessionDate"] == "the day after"
        assert "createdAt" not in later


HOSTILE_SPEAKERS = ["Mary Ann", 'Dr. "Q" O\'Neil', "<script>alert(1)</script>", "Zoë 😀",
                    "../../etc/passwd", "a/b?c#d&e=f", "100%", "x" * 300, "名" * 100, "-",
                    "tab\there", "{curly}|pipe^`\\"]
HOSTILE_TURNS = ["D1:1", "D 1:2", '"3"', "<4>", "../5", "..", ".", "日本:6", "y" * 300, "%2F",
                 "a%2Fb", "a/b"]


def test_hostile_speakers_and_turn_ids_get_valid_iris_and_read_back_exactly(
        tmp_path: Path) -> None:
    ingest, board, archive = open_all(tmp_path)
    turns = tuple(Utterance(turn_id, speaker, f"line {n} from {speaker!r} about Ångström Labs")
                  for n, (speaker, turn_id) in enumerate(
                      (s, t) for s in HOSTILE_SPEAKERS for t in HOSTILE_TURNS[:3]))
    odd_ids = tuple(Utterance(turn_id, "Caroline", f"odd id {turn_id}")
                    for turn_id in HOSTILE_TURNS)
    with archive:
        iris = ingest.session(Session(1, "8 May, 2023", turns + odd_ids))
        assert len(set(iris)) == len(iris) == len(turns) + len(odd_ids)
        written = subjects(board)
        assert set(iris) <= written
        for iri in written:
            assert check_iri(iri) == iri
            assert iri.startswith(BASE + "/")  # nothing escapes the conversation's namespace
            assert board.get(iri, graph=BASE) is not None
        for turn, iri in zip(turns + odd_ids, iris, strict=True):
            node = board.get(iri, graph=BASE)
            assert node is not None
            assert node["name"] == turn.id and node["role"] == turn.speaker
            assert node["text"] == turn.text
            person = board.get(node["speaker"], graph=BASE)
            assert person is not None and person["name"] == turn.speaker
        revisions = latest_revisions(archive)
        assert set(revisions) == written
        for iri, node in revisions.items():
            assert board.get(iri, graph=BASE) == node
        assert archive.verify() == []
        assert board.count(graph="gliding://job/other") == 0


def test_a_turn_that_fails_validation_rolls_back_its_whole_session(tmp_path: Path) -> None:
    ingest, board, archive = open_all(tmp_path)
    with archive:
        ingest.session(Session(1, "8 May, 2023", (Utterance("D1:1", "Caroline", "first"),)))
        before_board, before_l0 = board.count(graph=BASE), len(archive.list())
        with pytest.raises(VocabularyError, match="surrogate"):
            ingest.session(Session(2, "9 May, 2023", (
                Utterance("D2:1", "Caroline", "fine"),
                Utterance("D2:2", "Melanie", "broken \ud800 text"),)))
        assert board.count(graph=BASE) == before_board
        assert len(archive.list()) == before_l0
        assert board.get(f"{BASE}/session/2", graph=BASE) is None


def test_people_of_a_rolled_back_session_are_written_by_the_next_one(tmp_path: Path) -> None:
    ingest, board, archive = open_all(tmp_path)
    with archive:
        with pytest.raises(VocabularyError):
            ingest.session(Session(1, "", (
                Utterance("D1:1", "Bob", "I moved to Lisbon."),
                Utterance("D1:2", "Bob", "broken \ud800"),)))
        ingest.session(Session(2, "", (Utterance("D2:1", "Bob", "I love Lisbon."),)))
        turn = board.get(ingest.turn_iris["D2:1"], graph=BASE)
        assert turn is not None
        assert board.get(turn["speaker"], graph=BASE) is not None
        for mentioned in turn["mentions"]:
            assert board.get(mentioned, graph=BASE) is not None


@pytest.mark.parametrize(("speaker", "text"), [
    ("名" * 500, "hello"),
    ("Caroline", "We met " + " ".join(["Aaaa"] * 1000)),
], ids=["long-unicode-speaker", "long-capitalised-phrase"])
def test_very_long_names_still_ingest(tmp_path: Path, speaker: str, text: str) -> None:
    ingest, board, archive = open_all(tmp_path)
    with archive:
        (iri,) = ingest.session(Session(1, "", (Utterance("D1:1", speaker, text),)))
        node = board.get(iri, graph=BASE)
        assert node is not None and node["role"] == speaker and node["text"] == text
        for other in subjects(board):
            assert len(check_iri(other)) <= MAX_IRI_CHARS


def test_long_but_valid_names_are_hashed_in_l0_and_kept_whole_on_the_board(
        tmp_path: Path) -> None:
    ingest, board, archive = open_all(tmp_path)
    speaker, turn_id = "Ü" * 250, "T" * 250  # segments far past L0's 200 characters
    with archive:
        (iri,) = ingest.session(Session(1, "", (Utterance(turn_id, speaker, "hi"),)))
        node = board.get(iri, graph=BASE)
        assert node is not None and node["role"] == speaker and node["name"] == turn_id
        entries = [e for e in archive.list(kind="node") if e.meta["node"] == iri]
        assert len(entries) == 1 and "sha256-" in entries[0].iri
        assert from_jsonld(archive.get(entries[0].iri).content or b"") == node


def test_naming_a_speaker_before_they_speak_mentions_the_person(tmp_path: Path) -> None:
    ingest, board, archive = open_all(tmp_path)
    with archive:
        ingest.session(Session(1, "", (
            Utterance("D1:1", "Caroline", "Hey there Melanie, how are you?"),
            Utterance("D1:2", "Melanie", "Good!"),)))
        first = board.get(ingest.turn_iris["D1:1"], graph=BASE)
        assert first is not None
        assert first.get("mentions") == [f"{BASE}/person/Melanie"]
        assert f"{BASE}/entity/melanie" not in subjects(board)


def test_every_turn_id_maps_to_its_turn_iri(tmp_path: Path) -> None:
    ingest, _board, archive = open_all(tmp_path)
    conversation = {
        "session_1": [{"speaker": "A", "dia_id": "D1:1", "text": "one"},
                      {"speaker": "B", "dia_id": "D1:2", "text": "two"}],
        "session_2": [{"speaker": "A", "dia_id": "D2:1", "text": "three"}],
    }
    with archive:
        for session in sessions_of(conversation):
            ingest.session(session)
    assert ingest.turn_iris == {"D1:1": f"{BASE}/turn/A/D1%3A1",
                                "D1:2": f"{BASE}/turn/B/D1%3A2",
                                "D2:1": f"{BASE}/turn/A/D2%3A1"}
