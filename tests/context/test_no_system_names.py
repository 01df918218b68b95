"""The context engine generalises: no code of it names an agent system, a benchmark, a dataset
or a task domain. A rule that holds only for one system's trajectories is tuning, not design;
what the engine does must follow from settings and from the shape of what it sees."""

from __future__ import annotations

import re
from pathlib import Path

import gliding.context

ROOT = Path(gliding.context.__file__).parent
# agent systems and benchmarks whose trajectories the benchmarks replay (a provider, whose cache
# rules the engine follows, is not one), their tools' names, and the domains of their tasks
NAMES = re.compile(
    r"\b(tau2?|tau-bench|claude|openhands|swe-?agent|mini-swe|sweagent|aide|"
    r"toolorchestra|nemotron|ironshell|distyl|agentshield|locomo|airline|retail|telecom|"
    r"flights?|reservations?|django|sympy|str_replace_editor|execute_ipython_cell|"
    r"execute_bash|search_dir|find_file|scroll_(up|down))\b", re.IGNORECASE)


def test_no_module_of_the_context_engine_names_a_system_source_or_domain() -> None:
    found = [f"{path.relative_to(ROOT.parent.parent)}:{n}: {m.group(0)}"
             for path in sorted(ROOT.rglob("*.py"))
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             for m in NAMES.finditer(line)]

    assert len(list(ROOT.rglob("*.py"))) >= 8  # the package is where the test looks
    assert found == []
