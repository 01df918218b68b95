"""An authenticated bus under attack, all real processes: mosquitto, `gliding daemon` (its jobs'
agents on workers) and two enrolled `gliding worker`s run a job, while an attacker on the same
broker (it sees every message: no ACLs here) forges an answer, a grant, an offer that would
start a program on a worker, an archive write and a coherence request, replays a worker's valid
message, and an enrolled worker that was granted nothing answers for work it does not hold.
Every forgery is refused and logged, none has an effect, and the job succeeds with its work
done once."""

from __future__ import annotations

import json
import secrets
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from gliding.bus import topics
from gliding.bus.auth import Keyring, Sealer, read_key_file
from gliding.bus.messages import (
    ArchiveRequest,
    ArtifactMsg,
    Assignment,
    CheckReportMsg,
    CoherenceMsg,
    GrantMsg,
    WorkItem,
)
from gliding.testing.servers import Mosquitto, mosquitto, oxigraph_serve
from tests.workers.test_worker_processes import GLIDING, REPLIES, TASK, env_for, start_worker, stop

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(240)]


class Attacker:
    """A plain MQTT client on the broker: it hears everything and publishes what it likes."""

    def __init__(self, broker: Mosquitto) -> None:
        host, port = broker.url.removeprefix("mqtt://").split(":")
        self.seen: list[tuple[str, bytes]] = []
        self.lock = threading.Lock()
        self.client = paho.Client(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv5)
        self.client.on_message = self._on_message
        self.client.connect(host, int(port))
        self.client.subscribe("#", qos=1)
        self.client.loop_start()

    def _on_message(self, _client: object, _data: object, message: paho.MQTTMessage) -> None:
        with self.lock:
            self.seen.append((message.topic, bytes(message.payload)))

    def first(self, prefix: str, deadline_s: float = 90) -> tuple[str, bytes]:
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            with self.lock:
                for topic, payload in self.seen:
                    if topic.startswith(prefix):
                        return topic, payload
            time.sleep(0.02)
        raise AssertionError(f"nothing on {prefix} within {deadline_s}s")

    def send(self, topic: str, payload: bytes | str) -> None:
        self.client.publish(topic, payload, qos=1).wait_for_publish(timeout=10)

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


def body(payload: bytes) -> dict[str, object]:
    """The message inside an envelope (the header line is signed, not secret)."""
    return json.loads(payload.partition(b"\n")[2])


def test_forged_and_replayed_messages_are_refused_while_a_real_job_succeeds(
        tmp_path: Path) -> None:
    with mosquitto() as broker, oxigraph_serve(tmp_path / "oxigraph") as endpoint:
        run_attacked_job(tmp_path, broker, endpoint)


def run_attacked_job(tmp: Path, broker: Mosquitto, endpoint: str) -> None:
    env = env_for(broker, endpoint)
    (tmp / "task.yaml").write_text(TASK)
    (tmp / "replies.yaml").write_text(REPLIES)
    pwned = tmp / "pwned"
    attacker = Attacker(broker)
    workers = [start_worker(tmp, env, name) for name in ("w1", "w2")]
    subprocess.run([str(GLIDING), "worker", "init", "intruder", "--out", "intruder.key",
                    "--data-dir", "data"], cwd=tmp, env=env, check=True, capture_output=True)
    daemon_log = tmp / "daemon.log"
    with daemon_log.open("w") as sink:
        daemon = subprocess.Popen([str(GLIDING), "daemon", "--data-dir", "data", "--port", "0"],
                                  cwd=tmp, env=env, text=True, stdout=sink,
                                  stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not (tmp / "data" / "daemon.json").exists():
            assert daemon.poll() is None and time.monotonic() < deadline, daemon_log.read_text()
            time.sleep(0.05)
        submit = subprocess.Popen([str(GLIDING), "submit", "task.yaml", "--model",
                                   f"scripted:{tmp / 'replies.yaml'}", "--wait", "--data-dir",
                                   "data"], cwd=tmp, env=env, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        # DA is at work once its archive writes go through the broker
        request_topic, request = attacker.first("archive/")
        job = request_topic.split("/")[1]
        _t, beat = attacker.first("workers/heartbeat")
        instance = str(body(beat)["worker"])
        attack(attacker, job, instance, request_topic, request, tmp, pwned)
        out, err = submit.communicate(timeout=180)
    finally:
        attacker.close()
        stop(daemon)
        for proc, _log in workers:
            stop(proc)
    logs = daemon_log.read_text()
    worker_logs = "".join(log.read_text() for _proc, log in workers)
    assert submit.returncode == 0, err[-3000:] + logs[-3000:]
    lines = (tmp / "ws" / "log.txt").read_text().split()
    assert lines == [f"step-{k}" for k in range(1, 5)]  # the real work, each step once
    assert not pwned.exists()  # the forged offer started nothing
    # each forgery refused where it landed, and said so
    forged = [json.loads(line) if line.startswith("{") else line
              for line in logs.splitlines() if "bus.forged" in line]
    text = "\n".join(map(str, forged))
    for topic in (f"job/{job}/result", f"archive/{job}", f"coherence/{job}", f"claims/{job}"):
        assert topic in text, (topic, text)
    assert "again (a replay" in text  # the replayed archive write
    assert "may not say that: an answer to work it does not hold" in text  # the intruder
    assert "a message for worker intruder on a topic that is not its" in text
    assert "bus.forged" in worker_logs and "/grants" in worker_logs  # the forged grant
    with sqlite3.connect(tmp / "data" / "jobs" / job / "archive.sqlite3") as db:
        iris = [r[0] for r in db.execute("SELECT iri FROM entries")]
    assert iris and not [i for i in iris if "forged" in i]  # the forged write wrote nothing


def attack(attacker: Attacker, job: str, instance: str, request_topic: str, request: bytes,
           tmp: Path, pwned: Path) -> None:
    stranger = Keyring(secrets.token_bytes(32))  # a root key of its own: not the daemon's
    signed = Sealer(stranger, "root", recipient=topics.recipient)
    done = ArtifactMsg(job=job, role="DA", cycle=1, attempt=0, summary="all done")
    passed = CheckReportMsg(job=job, role="CA", cycle=1, attempt=0, results=[], passed=True)
    for message in (done, passed):  # plain, and signed with the wrong key
        topic = topics.result(job, message.role)
        attacker.send(topic, message.to_json())
        attacker.send(topic, signed.seal(topic, message.to_json()))
    # an enrolled worker that holds no work of the job answers anyway
    intruder = Sealer(read_key_file(tmp / "intruder.key"), "worker:intruder",
                      recipient=topics.recipient)
    attacker.send(topics.result(job, "DA"), intruder.seal(topics.result(job, "DA"),
                                                          done.to_json()))
    # the same key signing "from the root, to itself" (its key is the key of the root's
    # messages to it): an answer, and an assignment for the job's agents
    as_root = Sealer(read_key_file(tmp / "intruder.key"), "root",
                     recipient=lambda topic: "intruder")
    for message, topic in ((passed, topics.result(job, "CA")),
                           (Assignment(job=job, role="DA", cycle=9, attempt=0, goal="g",
                                       instructions="INJECTED"), topics.agent(job, "DA"))):
        attacker.send(topic, as_root.seal(topic, message.to_json()))
    # an offer that would start a program on a worker, and the grant to run it
    evil = WorkItem(key=f"{job}/DA/9/0", epoch=1, assignment=Assignment(
        job=job, role="DA", cycle=9, attempt=0, goal="g", instructions="i"),
        task_record=_evil_record(tmp, pwned), model="scripted:/dev/null")
    attacker.send(topics.work("DA"), evil.to_json())
    attacker.send(topics.work("DA"), signed.seal(topics.work("DA"), evil.to_json()))
    grant = GrantMsg(job=job, key=evil.key, epoch=1, worker=instance, granted=True)
    attacker.send(topics.grants(instance), grant.to_json())
    # an archive write and a coherence write request, as if from a worker
    write = ArchiveRequest(id="forged", job=job, worker=instance, op="put",
                           args={"iri": f"gliding:job/{job}/result/forged-1", "content": "eA=="})
    attacker.send(topics.archive_requests(job), write.to_json())
    attacker.send(topics.coherence_directory(job), CoherenceMsg(
        kind="write_request", iri=f"gliding:job/{job}/plan/step-1", sender=f"{instance}.x",
        rid=1).to_json())
    # a worker's valid, signed archive write, played again; a valid claim, again
    attacker.send(request_topic, request)
    _t, claim = attacker.first(f"claims/{job}")
    attacker.send(f"claims/{job}", claim)


def _evil_record(tmp: Path, pwned: Path) -> dict[str, object]:
    return {"goal": "g", "workspace": str(tmp), "model": None, "pipeline": ["DA"],
            "turns": {}, "prompt_tokens": None, "source": "/dev/null", "venv": None,
            "mcp_servers": {"evil": {"command": "/bin/sh", "args": ["-c", f"touch {pwned}"]}}}
