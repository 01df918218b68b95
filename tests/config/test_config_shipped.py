"""The shipped config.yaml and docs/config.md stay in step with Settings and the task format."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gliding.agents.roles import load_roles
from gliding.config.loader import env_var_name, load_settings, settings_keys
from gliding.config.roles import role_names
from gliding.config.settings import Settings
from gliding.config.task import load_task
from gliding.config.task_schema import CHECK_KINDS
from gliding.config.yamlsource import format_key_path, load_yaml_with_lines
from gliding.core.checks import CommandSucceeds, FileContains, FileExists
from gliding.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "config.yaml"
DOCS = ROOT / "docs" / "config.md"


def test_shipped_config_loads_to_the_defaults() -> None:
    loaded = load_settings(CONFIG, env={})
    # data_dir: .gliding in the file is anchored at the file's directory
    assert loaded == Settings(data_dir=ROOT / ".gliding")
    assert loaded.model_copy(update={"data_dir": Settings().data_dir}) == Settings()


def test_shipped_config_sets_every_key_with_a_comment() -> None:
    lines_of_text = CONFIG.read_text(encoding="utf-8").splitlines()
    data, lines = load_yaml_with_lines("\n".join(lines_of_text), str(CONFIG), error=ConfigError)

    for keys in settings_keys():
        assert keys in lines, f"config.yaml lacks {format_key_path(keys)}"
        line = lines[keys]
        above = lines_of_text[line - 2].strip()
        same = lines_of_text[line - 1]
        assert above.startswith("#") or "#" in same, f"{format_key_path(keys)} has no comment"


def test_shipped_config_sets_no_key_beyond_settings() -> None:
    data, lines = load_yaml_with_lines(CONFIG.read_text("utf-8"), str(CONFIG), error=ConfigError)
    known = set(settings_keys())
    sections = {keys[:n] for keys in known for n in range(1, len(keys))}
    mapped = {
        keys for keys in lines if keys and not isinstance(keys[-1], int) and keys not in sections
    }
    assert mapped == known


@pytest.mark.parametrize("keys", settings_keys(), ids=format_key_path)
def test_docs_name_every_key_and_its_env_var(keys: tuple[str, ...]) -> None:
    docs = DOCS.read_text(encoding="utf-8")
    assert f"`{'.'.join(keys)}`" in docs
    assert f"`{env_var_name(keys)}`" in docs


def test_docs_describe_the_task_format() -> None:
    docs = DOCS.read_text(encoding="utf-8")
    for name in (*CHECK_KINDS, *role_names(), "budgets.turns", "budgets.cost_usd", "pipeline"):
        assert name in docs
    for role, spec in load_roles().items():  # the role files' caps apply unless a task says
        assert f"{role} {spec.max_turns}" in docs


def test_the_task_example_in_the_docs_is_valid(tmp_path: Path) -> None:
    docs = DOCS.read_text(encoding="utf-8")
    section = docs[docs.index("## Task files") :]
    example = re.search(r"```yaml\n(.*?)```", section, re.DOTALL)
    assert example is not None
    path = tmp_path / "task.yaml"
    path.write_text(example.group(1), encoding="utf-8")

    task = load_task(path)

    assert task.goal == 'Create hello.txt containing exactly "Hello, World!"'
    assert task.checks == (
        FileExists("hello.txt"),
        FileContains("hello.txt", "Hello, World!"),
        CommandSucceeds("test -s hello.txt"),
    )
    assert task.turns == dict.fromkeys(role_names(), 6)


def test_every_yaml_snippet_in_the_docs_parses() -> None:
    docs = DOCS.read_text(encoding="utf-8")
    snippets = re.findall(r"```yaml\n(.*?)```", docs, re.DOTALL)
    assert len(snippets) >= 4
    for snippet in snippets:
        data, _ = load_yaml_with_lines(snippet, "docs/config.md", error=ConfigError)
        assert isinstance(data, dict)
