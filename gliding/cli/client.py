"""The CLI's client of a running daemon (``gliding submit``, ``status``, ``logs``, ``cancel``,
``jobs``, ``schedule``): its HTTP API through httpx.

``DaemonClient.find(data_dir)`` finds the daemon of a data directory from
``<data_dir>/daemon.json`` and ``<data_dir>/daemon.token``; a ``daemon.json`` whose daemon is
gone (its lock on ``<data_dir>/daemon/daemon.lock`` is free) is ignored. ``url`` overrides
where it listens (the token is still the data directory's). Proxies from the environment are
never used: the daemon is local. An error the daemon answers becomes the GlidingError its code
names (``error.code``), with its message and hint; a daemon that cannot be reached is a
GlidingError saying so.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import structlog

from gliding.core import events
from gliding.daemon.jobs import DaemonLock
from gliding.daemon.queue import TERMINAL, read_info, read_token
from gliding.errors import (
    GlidingError,
    IRIError,
    NotFoundError,
    TaskFileError,
    UsageError,
)

TIMEOUT_S = 30.0  # one request (a submission validates its model: a hosted one imports litellm)
_ERRORS: dict[str, type[GlidingError]] = {
    "task.invalid": TaskFileError, "iri.invalid": IRIError, "not_found": NotFoundError,
}


class DaemonUnreachable(GlidingError):
    """The daemon's address answers nothing (it stopped, or is restarting)."""

    code = "daemon.unreachable"


def no_daemon(data_dir: Path) -> UsageError:
    return UsageError(f"no daemon is running for data dir {data_dir}: start one with "
                      "`gliding daemon`", hint="or pass the --data-dir the daemon serves")


class DaemonClient:
    """Requests to one daemon; ``close()`` when done (or ``with``)."""

    def __init__(self, url: str, token: str, *, data_dir: Path | None = None,
                 timeout_s: float = TIMEOUT_S) -> None:
        self.url = url.rstrip("/")
        self.data_dir = data_dir
        self._http = httpx.Client(base_url=self.url, trust_env=False,
                                  headers={"Authorization": f"Bearer {token}"},
                                  timeout=httpx.Timeout(timeout_s, connect=5.0))

    @classmethod
    def find(cls, data_dir: Path, *, url: str | None = None) -> DaemonClient | None:
        """The client of the daemon serving ``data_dir``; None when none runs.

        Raises:
            ArchiveError: it runs but its token cannot be read.
        """
        info = read_info(data_dir)
        if url is None and (info is None or not DaemonLock(data_dir).held_elsewhere()):
            return None
        address = url or str((info or {}).get("url") or "")
        if not address:
            return None
        return cls(address, read_token(data_dir), data_dir=data_dir)

    @classmethod
    def connect(cls, data_dir: Path, *, url: str | None = None) -> DaemonClient:
        """Like ``find``; raises UsageError ("no daemon is running ...") instead of None."""
        client = cls.find(data_dir, url=url)
        if client is None:
            raise no_daemon(data_dir)
        return client

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> DaemonClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests -----------------------------------------------------------------------------

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise DaemonUnreachable(f"cannot reach the daemon at {self.url}: {exc}",
                                    hint="is it running? gliding daemon starts one") from exc
        return _answer(response)

    def submit(self, task: str, name: str, *, model: str | None = None,
               base_dir: str | None = None) -> dict[str, Any]:
        body = {"task": task, "name": name, "model": model, "base_dir": base_dir}
        return dict(self._call("POST", "/v1/jobs", json=body))

    def jobs(self, limit: int = 1000, offset: int = 0) -> dict[str, Any]:
        return dict(self._call("GET", "/v1/jobs", params={"limit": limit, "offset": offset}))

    def all_jobs(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while True:
            page = self.jobs(1000, len(out))
            out += page["jobs"]
            if not page["jobs"] or len(out) >= page["total"]:
                return out

    def status(self, job: str) -> dict[str, Any]:
        return dict(self._call("GET", f"/v1/jobs/{_segment(job)}"))

    def cancel(self, job: str) -> dict[str, Any]:
        return dict(self._call("POST", f"/v1/jobs/{_segment(job)}/cancel"))

    def fork(self, job: str, at: str, workspace: str | None) -> dict[str, Any]:
        return dict(self._call("POST", f"/v1/jobs/{_segment(job)}/fork",
                               json={"at": at, "workspace": workspace}))

    def interrupt(self, job: str) -> dict[str, Any]:
        return dict(self._call("POST", f"/v1/jobs/{_segment(job)}/interrupt"))

    def resume(self, job: str) -> dict[str, Any]:
        return dict(self._call("POST", f"/v1/jobs/{_segment(job)}/resume"))

    def steer(self, job: str, message: str) -> dict[str, Any]:
        return dict(self._call("POST", f"/v1/jobs/{_segment(job)}/steer",
                               json={"message": message}))

    def approvals(self, job: str) -> list[dict[str, Any]]:
        return list(self._call("GET", f"/v1/jobs/{_segment(job)}/approvals")["approvals"])

    def answer(self, job: str, approval: str, *, approve: bool, note: str,
               digest: str | None) -> dict[str, Any]:
        return dict(self._call("POST", f"/v1/jobs/{_segment(job)}/approvals/"
                               f"{_segment(approval)}",
                               json={"approve": approve, "note": note, "digest": digest}))

    def schedules(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/v1/schedules")["schedules"])

    def add_schedule(self, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` as ``POST /v1/schedules`` takes it (name, cron, task, ...)."""
        return dict(self._call("POST", "/v1/schedules", json=body))

    def remove_schedule(self, name: str) -> dict[str, Any]:
        return dict(self._call("DELETE", f"/v1/schedules/{_segment(name)}"))

    def dashboard_link(self) -> str:
        """A one-time login URL of the daemon's web dashboard."""
        return self.url + str(self._call("POST", "/v1/dashboard/links")["path"])

    def read(self, iri: str, offset: int = 0, limit: int = 16_000) -> dict[str, Any]:
        return dict(self._call("GET", "/v1/iri", params={"iri": iri, "offset": offset,
                                                          "limit": limit}))

    def events(self, job: str, *, after: int = 0, follow: bool = True
               ) -> Iterator[dict[str, Any]]:
        """The job's events above ``after`` (Server-Sent Events, parsed); a stream that fell
        behind yields ``{"event": "dropped", "after": seq}`` last. An event this Gliding does
        not know (``gliding.core.events``: a newer daemon's) is skipped, with a debug log.

        Raises:
            DaemonUnreachable: the connection failed or broke off. GlidingError: the daemon
                refused (unknown job, ...).
        """
        params = {"after": after, "follow": "true" if follow else "false"}
        try:
            with self._http.stream("GET", f"/v1/jobs/{_segment(job)}/events", params=params,
                                   timeout=httpx.Timeout(TIMEOUT_S, read=None)) as response:
                if response.status_code != 200:
                    response.read()
                    _answer(response)
                yield from known_events(_sse(response.iter_lines()))
        except httpx.HTTPError as exc:
            raise DaemonUnreachable(f"the event stream of job {job} broke off: {exc}") from exc


def known_events(records: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """``records`` without the events whose name is not in ``gliding.core.events``."""
    for record in records:
        name = record.get("event")
        if name == "dropped" or name in events.EVENTS:
            yield record
        else:
            structlog.get_logger("gliding.cli").debug(
                "cli.event.unknown", event_name=str(name)[:100],
                schema_version=record.get("schema_version"))


def _segment(job: str) -> str:
    """A job id as one path segment (an id with a slash is the daemon's to refuse)."""
    from urllib.parse import quote

    return quote(job, safe="")


def _answer(response: httpx.Response) -> Any:
    try:
        data = response.json()
    except ValueError:
        data = None
    if response.is_success:
        return data
    error = (data or {}).get("error") if isinstance(data, dict) else None
    if not isinstance(error, dict):
        raise GlidingError(f"the daemon answered {response.status_code}: "
                           f"{response.text[:300]}")
    code = str(error.get("code") or "")
    kind = _ERRORS.get(code) or (NotFoundError if response.status_code == 404 else
                                 UsageError if response.status_code in (400, 401, 409, 413,
                                                                        422, 503)
                                 else GlidingError)
    exc = kind(str(error.get("message") or "the daemon refused"), hint=error.get("hint"))
    exc.code = code or exc.code  # what the daemon said, for --json and scripts
    raise exc


def _sse(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """Server-Sent Events: each event's JSON data, ``dropped`` as its marker."""
    name = ""
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                record = json.loads("\n".join(data))
                if name == "dropped":
                    record = {"event": "dropped", "after": record.get("after", 0)}
                yield record
            name, data = "", []
        elif line.startswith(":"):
            continue  # a ping
        else:
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)


def follow(data_dir: Path, job: str, *, after: int = 0, url: str | None = None,
           patience_s: float = 120.0, poll_s: float = 0.5) -> Iterator[dict[str, Any]]:
    """Every event of ``job`` above ``after`` until a terminal one (``job.paused`` is not: a
    paused job is followed on until it ends), across dropped streams and daemon restarts
    (the daemon is found again from ``data_dir``; its port may have changed); gives up when
    no daemon has answered for ``patience_s``. When a job's stream ends without
    a terminal event and the job has ended (its run was cut as it ended), the last record is
    ``{"event": "job.ended", "data": <its status>}``.

    Raises:
        UsageError: no daemon answered for ``patience_s``. GlidingError: it refused (an
            unknown job, ...).
    """
    last = after
    failing_since: float | None = None  # when the daemon stopped answering

    def unreachable() -> bool:
        nonlocal failing_since
        now = time.monotonic()
        failing_since = failing_since if failing_since is not None else now
        return now - failing_since > patience_s

    while True:
        client = DaemonClient.find(data_dir, url=url)
        if client is None:
            if unreachable():
                raise no_daemon(data_dir)
            time.sleep(poll_s)
            continue
        with client:
            try:
                for record in client.events(job, after=last):
                    failing_since = None
                    if record["event"] == "dropped":
                        break
                    last = int(record["seq"])
                    yield record
                    if record["event"] in TERMINAL and record["event"] != "job.paused":
                        return  # a paused job runs on after a steer or resume: followed on
                else:
                    status = client.status(job)
                    failing_since = None
                    if status["state"] in ("finished", "cancelled", "interrupted"):
                        yield {"event": "job.ended", "job": job, "seq": last, "data": status}
                        return
            except DaemonUnreachable:
                if unreachable():
                    raise
        time.sleep(poll_s)
