"""Conversations into memory: sessions, speakers, turns and the names they mention become
blackboard nodes through the ingestion path (``Ingestor``), one named graph per conversation.

Nodes written (vocabulary in docs/vocabulary.md), ``<job>`` being the conversation's id:

    Event   gliding://job/<job>/session/<n>             text "session <n>", sessionDate, createdAt
    Person  gliding://job/<job>/person/<name>           name (a speaker)
    Entity  gliding://job/<job>/entity/<key>            name (a capitalised name in a turn)
    Turn    gliding://job/<job>/turn/<speaker>/<turn>   role (the speaker), name (the turn's id,
            e.g. "D3:7"), text, speaker, partOf the session, position, sessionDate, createdAt,
            mentions (its entities and the people it names)

Entities are the capitalised words and phrases that do not open a sentence ("Sweden",
"Becoming Nicole"), keyed by their lower-cased text; a turn that names a speaker mentions that
Person. Everything here is pure but for ``ConversationIngestor``, which only awaits
``Ingestor.put``, and ``ingest_conversation``, which runs it on the pass-through writer.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import anyio

from gliding.core.dates import parse_when
from gliding.core.iri import hashed_segment
from gliding.memory.archive.store import Archive
from gliding.memory.board.blackboard import Blackboard
from gliding.memory.board.nodes import DirectWriter, JobNodeStore, WriteListener
from gliding.memory.ingest.ingestor import Ingestor

WORD = re.compile(r"[^\W\d_][\w'’]+")  # two or more characters, a letter first, any script
NOT_NAMES = frozenset({"I", "I'm", "I've", "I'll", "I'd", "Im", "OK", "Ok", "Oh", "Hey", "Hi",
                       "Wow", "Yeah", "Yes", "No", "Thanks", "Thank"})
MAX_ENTITIES = 12  # per turn
MAX_NAME_WORDS = 6  # a longer run of capitalised words is cut into names of this length
MAX_SEGMENT_CHARS = 512  # a longer IRI segment (after percent-encoding) is replaced by a hash


@dataclass(frozen=True)
class Utterance:
    """One turn as the source gives it: its id (``D3:7``), speaker and text (captions added)."""

    id: str
    speaker: str
    text: str


@dataclass(frozen=True)
class Session:
    """One conversation session: its number, its date as the source writes it, its turns."""

    number: int
    date_text: str
    turns: tuple[Utterance, ...]


def named_entities(text: str, *, limit: int = MAX_ENTITIES) -> list[str]:
    """The capitalised names in ``text`` (words of any script, runs of capitalised words joined,
    at most ``MAX_NAME_WORDS`` a name) that do not open a sentence, in order, each once."""
    out: dict[str, str] = {}
    run: list[str] = []
    run_end = -1

    def close() -> None:
        for start in range(0, len(run), MAX_NAME_WORDS):
            name = " ".join(run[start:start + MAX_NAME_WORDS])
            if name not in NOT_NAMES and len(name) >= 2:
                out.setdefault(entity_key(name), name)
        run.clear()

    for match in WORD.finditer(text):
        word = match.group(0).strip("'’")
        before = text[:match.start()].rstrip()
        opens = not before or before[-1] in ".!?"
        capital = word[:1].isupper() and word not in NOT_NAMES
        if run and capital and text[run_end:match.start()] == " ":
            run.append(word)
        else:
            close()
            if capital and not opens:
                run.append(word)
        run_end = match.end()
        if len(out) >= limit:
            break
    close()
    return list(out.values())[:limit]


def segment(text: str) -> str:
    """``text`` percent-encoded as one IRI segment; past ``MAX_SEGMENT_CHARS``, a hash of it
    (the node keeps the whole text in its properties)."""
    quoted = quote(text, safe="")
    if len(quoted) <= MAX_SEGMENT_CHARS:
        return quoted
    return hashed_segment(text)


def entity_key(name: str) -> str:
    return " ".join(name.lower().replace("’", "'").split())


class ConversationIngestor:
    """Writes sessions of one conversation through an ``Ingestor`` (its job is the
    conversation). ``turn_iris`` maps each turn id (``D3:7``) to its Turn node's IRI."""

    def __init__(self, ingestor: Ingestor) -> None:
        self.ingestor = ingestor
        self.base = ingestor.job_iri
        self.turn_iris: dict[str, str] = {}
        self._people: dict[str, str] = {}  # lower-cased name -> Person IRI
        self._entities: set[str] = set()

    async def person(self, name: str) -> str:
        key = name.lower()
        iri = self._people.get(key)
        if iri is None:
            iri = await self.ingestor.put({"@id": f"{self.base}/person/{segment(name)}",
                                           "@type": "Person", "name": name})
            self._people[key] = iri
        return iri

    async def entity(self, name: str) -> str:
        iri = f"{self.base}/entity/{segment(entity_key(name))}"
        if iri not in self._entities:
            await self.ingestor.put({"@id": iri, "@type": "Entity", "name": name})
            self._entities.add(iri)
        return iri

    async def session(self, session: Session) -> list[str]:
        """Write the session's Event, its speakers, entities and turns; the Turn IRIs."""
        when = parse_when(session.date_text)
        event_iri = f"{self.base}/session/{int(session.number)}"
        event: dict[str, Any] = {"@id": event_iri, "@type": "Event",
                                 "text": f"session {int(session.number)}",
                                 "partOf": self.base}
        stamp: dict[str, Any] = {}
        if session.date_text:
            stamp["sessionDate"] = session.date_text
        if when is not None:
            stamp["createdAt"] = when.isoformat()
        out = []
        saved = dict(self._people), set(self._entities), dict(self.turn_iris)
        try:
            async with self.ingestor.batch():  # one L0 transaction per session
                await self.ingestor.put({**event, **stamp})
                for speaker in dict.fromkeys(t.speaker for t in session.turns if t.speaker):
                    # before the turns, so naming them mentions the Person
                    await self.person(speaker)
                for position, turn in enumerate(session.turns, 1):
                    out.append(await self._turn(turn, position, event_iri, stamp))
        except BaseException:  # the batch wrote nothing: forget what it would have written
            self._people, self._entities, self.turn_iris = saved
            raise
        return out

    async def _turn(self, turn: Utterance, position: int, session_iri: str,
              stamp: dict[str, Any]) -> str:
        speaker = await self.person(turn.speaker) if turn.speaker else None
        mentions = [await self.entity(name) for name in named_entities(turn.text)
                    if name.lower() not in self._people]
        mentions += [iri for key, iri in self._people.items()
                     if iri != speaker and re.search(rf"\b{re.escape(key)}\b", turn.text.lower())]
        iri = f"{self.base}/turn/{segment(turn.speaker or '-')}/{segment(turn.id)}"
        node: dict[str, Any] = {"@id": iri, "@type": "Turn", "role": turn.speaker or "-",
                                "name": turn.id, "text": turn.text, "partOf": session_iri,
                                "position": position, **stamp}
        if speaker:
            node["speaker"] = speaker
        if mentions:
            node["mentions"] = mentions
        await self.ingestor.put(node)
        self.turn_iris[turn.id] = iri
        return iri


def ingest_conversation(board: Blackboard, archive: Archive, job: str,
                        sessions: Sequence[Session],
                        listener: WriteListener | None = None) -> ConversationIngestor:
    """Write ``sessions`` as job ``job``'s nodes through the pass-through board writer, telling
    ``listener`` (long-term memory's ``observe``) of each; blocking (runs an event loop of its
    own). Returns the ingestor, whose ``turn_iris`` name the Turn nodes."""
    nodes = JobNodeStore(board, archive, job)
    if listener is not None:
        nodes.listen(listener)
    ingest = ConversationIngestor(Ingestor(board, archive, job, DirectWriter(nodes)))

    async def write() -> None:
        for session in sessions:
            await ingest.session(session)

    anyio.run(write)
    return ingest


def sessions_of(conversation: dict[str, Any]) -> list[Session]:
    """The sessions of a LoCoMo-format ``conversation`` dict (``session_<n>`` lists of turns
    ``{speaker, dia_id, text, blip_caption?}``, ``session_<n>_date_time``), in order. A turn's
    ``blip_caption`` is appended as ``[image: ...]``. Summaries and observations are not read."""
    numbers = sorted(int(m.group(1)) for key in conversation
                     if (m := re.fullmatch(r"session_(\d+)", key))
                     and isinstance(conversation[key], list))
    out = []
    for number in numbers:
        turns: list[Utterance] = []
        for raw in conversation[f"session_{number}"]:
            if not isinstance(raw, dict) or "dia_id" not in raw:
                continue
            text = str(raw.get("text", ""))
            caption = raw.get("blip_caption")
            if caption:
                text = f"{text} [image: {caption}]"
            turns.append(Utterance(str(raw["dia_id"]), str(raw.get("speaker", "")), text))
        date_text = conversation.get(f"session_{number}_date_time")
        out.append(Session(number, date_text if isinstance(date_text, str) else "",
                           tuple(turns)))
    return out


def turn_count(sessions: Sequence[Session]) -> int:
    return sum(len(s.turns) for s in sessions)
