"""The prompts the engine builds do not depend on the process's hash seed: the same session
replayed under two ``PYTHONHASHSEED`` values gives byte-identical prompts (set iteration order
must never decide which fact line, identifier or record a prompt shows)."""

from __future__ import annotations

import os
import subprocess
import sys

SESSION = r"""
import hashlib, json
from gliding.config.settings import ContextSettings, WindowSettings
from gliding.context.engine import ContextEngine
from gliding.context.tokens import TokenCounter
from gliding.core.messages import Message, ToolCall

settings = ContextSettings(window=WindowSettings(target_tokens=1200, whole_below=0.0))
engine = ContextEngine(settings, TokenCounter(), [Message("system", "You act."),
                                                  Message("user", "Fix order_7731 in app/db.py")])
digest = hashlib.sha256()
for n in range(40):
    ids = " ".join(f"credit_card_{n}{k} credit_card pay_{k}.id app/m{k}.py" for k in range(6))
    back = max(0, n - 3)  # identifiers of a result three turns back: facts once it leaves
    engine.add(Message("assistant", f"use u_{back}_0, u_{back}_11 and credit_card_{back}5",
                       (ToolCall(f"c{n}", "get", {"id": f"pay_{n % 6}.id"}),)),
               iri=f"gliding://job/j/turn/DA/{n}")
    engine.add(Message("tool", json.dumps([{"user_id": f"u_{n}_{k}", "note": ids}
                                           for k in range(12)]), (), f"c{n}", "get"),
               iri=f"gliding://job/j/result/DA-{n}-0", tool="get")
    for m in engine.prompt():
        digest.update(m.content.encode())
print(digest.hexdigest(), engine.stats.compactions)
"""


def run_with_seed(seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    done = subprocess.run([sys.executable, "-c", SESSION], env=env, capture_output=True,
                          text=True, timeout=120, check=True)
    return done.stdout.strip()


def test_prompts_are_the_same_under_any_hash_seed() -> None:
    first, second = run_with_seed("1"), run_with_seed("2")

    assert first == second
    assert int(first.split()[1]) >= 3  # the session compacted: fact lines and lists were chosen
