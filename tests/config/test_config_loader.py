"""load_settings: defaults < config file < GLIDING_* variables < overrides; errors that name the
file and line, the variable or the override; settings_as_yaml reading back to equal Settings."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gliding.config.loader import (
    env_var_name,
    load_settings,
    settings_as_yaml,
    settings_keys,
)
from gliding.config.settings import (
    LLMSettings,
    LocalModelSettings,
    SchedulerSettings,
    Settings,
    ToolSettings,
)
from gliding.errors import ConfigError


@pytest.fixture(autouse=True)
def empty_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test runs in an empty directory, so no stray ./config.yaml is found."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# --- where settings come from -----------------------------------------------------------------


def test_without_any_source_the_defaults_apply(empty_cwd: Path) -> None:
    assert load_settings(env={}) == Settings(data_dir=empty_cwd.resolve() / ".gliding")


def test_config_yaml_in_the_cwd_is_found(empty_cwd: Path) -> None:
    write(empty_cwd / "config.yaml", "log_level: info\n")
    assert load_settings(env={}).log_level == "info"


def test_gliding_config_names_the_file(tmp_path: Path, empty_cwd: Path) -> None:
    write(empty_cwd / "config.yaml", "log_level: info\n")
    named = write(tmp_path / "other.yaml", "log_level: error\n")
    assert load_settings(env={"GLIDING_CONFIG": str(named)}).log_level == "error"


def test_explicit_path_wins_over_gliding_config(tmp_path: Path) -> None:
    named = write(tmp_path / "named.yaml", "log_level: error\n")
    given_path = write(tmp_path / "given.yaml", "log_level: debug\n")
    settings_ = load_settings(given_path, env={"GLIDING_CONFIG": str(named)})
    assert settings_.log_level == "debug"


def test_gliding_config_naming_a_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml: config file not found .*GLIDING_CONFIG"):
        load_settings(env={"GLIDING_CONFIG": str(tmp_path / "nope.yaml")})


def test_explicit_missing_path_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml: config file not found"):
        load_settings(tmp_path / "nope.yaml", env={})


def test_precedence_is_defaults_file_env_overrides(tmp_path: Path) -> None:
    path = write(
        tmp_path / "c.yaml",
        "log_level: info\nllm:\n  model: from-file\n  local:\n    n_ctx: 1024\n    seed: 7\n",
    )
    env = {"GLIDING_LLM__MODEL": "from-env", "GLIDING_LLM__LOCAL__N_CTX": "2048"}

    loaded = load_settings(path, env=env, overrides={"llm.model": "from-override"})

    assert loaded.llm.model == "from-override"  # override > env > file
    assert loaded.llm.local.n_ctx == 2048  # env > file
    assert loaded.llm.local.seed == 7  # file > default
    assert loaded.log_level == "info"  # file > default
    assert loaded.llm.local.max_tokens == 256  # default
    assert load_settings(path, env=env).llm.model == "from-env"
    assert load_settings(path, env={}).llm.model == "from-file"


def test_env_names_are_case_insensitive_and_lists_take_commas() -> None:
    loaded = load_settings(
        env={
            "gliding_tools__bash__TIMEOUT_S": "2.5",
            "GLIDING_TOOLS__ENV_ALLOW": "PATH, HOME,,LANG",
            "GLIDING_LOG_FORMAT": "json",
            "UNRELATED": "x",
        }
    )
    assert loaded.tools.bash.timeout_s == 2.5
    assert loaded.tools.env_allow == ("PATH", "HOME", "LANG")
    assert loaded.log_format == "json"


def test_empty_env_value_sets_an_optional_key_to_null(tmp_path: Path) -> None:
    path = write(tmp_path / "c.yaml", "llm:\n  local:\n    n_threads: 4\n    model_path: m.gguf\n")
    loaded = load_settings(
        path, env={"GLIDING_LLM__LOCAL__N_THREADS": "", "GLIDING_LLM__LOCAL__MODEL_PATH": ""}
    )
    assert (loaded.llm.local.n_threads, loaded.llm.local.model_path) == (None, None)


def test_env_defaults_to_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GLIDING_LOG_LEVEL", "debug")
    assert load_settings().log_level == "debug"
    assert load_settings(env={}).log_level == "warning"  # an explicit env replaces os.environ


def test_overrides_take_dotted_keys_and_comma_strings() -> None:
    loaded = load_settings(
        env={},
        overrides={"tools.env_allow": "PATH,TERM", "scheduler.max_cycles": 5, "log_level": "info"},
    )
    assert loaded.tools.env_allow == ("PATH", "TERM")
    assert loaded.scheduler.max_cycles == 5
    assert loaded.log_level == "info"


def test_empty_file_and_empty_sections_mean_defaults(tmp_path: Path, empty_cwd: Path) -> None:
    defaults = Settings(data_dir=empty_cwd.resolve() / ".gliding")
    assert load_settings(write(tmp_path / "a.yaml", "# nothing yet\n"), env={}) == defaults
    text = "llm:\n  # model: x\n  local:\ntools:\n"
    assert load_settings(write(tmp_path / "b.yaml", text), env={}) == defaults


# --- data_dir -----------------------------------------------------------------------------------


def test_relative_data_dir_in_a_file_is_relative_to_the_file(tmp_path: Path) -> None:
    path = write(tmp_path / "conf" / "c.yaml", "data_dir: ../state\n")
    assert load_settings(path, env={}).data_dir == tmp_path.resolve() / "state"


def test_relative_data_dir_from_env_or_override_is_relative_to_the_cwd(
    tmp_path: Path, empty_cwd: Path
) -> None:
    path = write(tmp_path / "conf" / "c.yaml", "data_dir: from-file\n")
    assert load_settings(path, env={"GLIDING_DATA_DIR": "e"}).data_dir == empty_cwd / "e"
    loaded = load_settings(path, env={}, overrides={"data_dir": Path("o")})
    assert loaded.data_dir == empty_cwd / "o"


def test_absolute_data_dir_is_kept(tmp_path: Path) -> None:
    path = write(tmp_path / "c.yaml", f"data_dir: {tmp_path / 'abs'}\n")
    assert load_settings(path, env={}).data_dir == tmp_path.resolve() / "abs"


def test_loading_creates_nothing(tmp_path: Path, empty_cwd: Path) -> None:
    path = write(tmp_path / "c.yaml", "data_dir: store\n")
    load_settings(path, env={"GLIDING_LOG_LEVEL": "info"})
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["c.yaml", "cwd"]


# --- errors -------------------------------------------------------------------------------------


def test_unknown_key_in_file_names_file_key_and_line(tmp_path: Path) -> None:
    path = write(tmp_path / "c.yaml", "llm:\n  local:\n    n_ctx: 2048\n    nctx: 1\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(path, env={})
    assert caught.value.message == (
        f"{path}:4: llm.local.nctx: unknown key 'nctx' "
        "(keys: model_path, n_ctx, n_threads, temperature, max_tokens, seed)"
    )
    assert caught.value.exit_code == 2


def test_bad_value_in_file_names_file_key_and_line(tmp_path: Path) -> None:
    path = write(tmp_path / "c.yaml", "log_level: warning\ntools:\n  bash:\n    timeout_s: 0\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(path, env={})
    assert caught.value.message == (
        f"{path}:4: tools.bash.timeout_s: Input should be greater than 0, got 0"
    )


def test_every_bad_value_in_a_file_is_reported(tmp_path: Path) -> None:
    path = write(tmp_path / "c.yaml", "log_level: loud\nllm:\n  model: 3\ndata_dir: ''\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(path, env={})
    assert caught.value.message.splitlines() == [
        f"{path}:1: log_level: Input should be 'debug', 'info', 'warning' or 'error', got 'loud'",
        f"{path}:3: llm.model: Input should be a valid string, got 3",
        f"{path}:4: data_dir: must not be empty; give a directory such as .gliding",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("llm: [\n", "c.yaml:2:1: invalid YAML"),
        ("log_level: info\nlog_level: debug\n", "c.yaml:2: duplicate key log_level"),
        ("- llm\n", "c.yaml:1: a config file is a mapping of keys"),
        ("llm: local\n", "c.yaml:1: llm: Input should be a valid dictionary"),
    ],
)
def test_malformed_config_file_names_file_and_line(
    tmp_path: Path, text: str, expected: str
) -> None:
    with pytest.raises(ConfigError, match=expected.replace(".", r"\.").replace("[", r"\[")):
        load_settings(write(tmp_path / "c.yaml", text), env={})


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (
            {"GLIDING_LLM__MODLE": "x"},
            "environment variable GLIDING_LLM__MODLE: unknown setting llm.modle "
            "(keys in llm: model, timeout_s, ",  # then the others, in Settings' order
        ),
        ({"GLIDING_COLOUR": "red"}, "environment variable GLIDING_COLOUR: unknown setting colour"),
        ({"GLIDING_LLM": "x"}, "environment variable GLIDING_LLM: llm is a section"),
        (
            {"GLIDING_LOG_LEVEL__X": "x"},
            "environment variable GLIDING_LOG_LEVEL__X: log_level is a value, not a section",
        ),
        (
            {"GLIDING_LOG_LEVEL": "info", "gliding_log_level": "debug"},
            "environment variables GLIDING_LOG_LEVEL and gliding_log_level both set log_level",
        ),
    ],
)
def test_env_var_naming_no_key_is_refused_by_name(env: dict[str, str], expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(env=env)
    assert caught.value.message.startswith(expected)


def test_bad_env_value_names_the_variable_and_key() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(env={"GLIDING_LLM__LOCAL__N_CTX": "lots", "GLIDING_LOG_LEVEL": "info"})
    assert caught.value.message == (
        "environment variable GLIDING_LLM__LOCAL__N_CTX='lots': llm.local.n_ctx: "
        "Input should be a valid integer, unable to parse string as an integer, got 'lots'"
    )


def test_gliding_config_is_not_taken_for_a_key(tmp_path: Path) -> None:
    path = write(tmp_path / "c.yaml", "log_level: info\n")
    assert load_settings(env={"GLIDING_CONFIG": str(path)}).log_level == "info"


def test_bad_override_names_the_override() -> None:
    with pytest.raises(ConfigError, match=r"override llm\.modle: unknown setting llm\.modle"):
        load_settings(env={}, overrides={"llm.modle": "x"})
    with pytest.raises(ConfigError) as caught:
        load_settings(env={}, overrides={"llm.local.temperature": 9})
    assert caught.value.message == (
        "override llm.local.temperature=9: llm.local.temperature: "
        "Input should be less than or equal to 2, got 9"
    )


# --- settings_as_yaml ---------------------------------------------------------------------------


def test_relative_data_dir_reads_back_equal_from_a_file_in_the_cwd(empty_cwd: Path) -> None:
    shown = Settings(data_dir=Path("rel"), log_level="debug")
    write(empty_cwd / "config.yaml", settings_as_yaml(shown))
    expected = Settings(data_dir=empty_cwd.resolve() / "rel", log_level="debug")
    assert load_settings(env={}) == expected


names = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), min_size=1
).filter(lambda s: s.strip() != "")


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    model=names,
    model_path=st.none() | names,
    n_threads=st.none() | st.integers(1, 512),
    temperature=st.floats(0.0, 2.0),
    seed=st.integers(0, 2**32 - 1),
    env_allow=st.lists(names, max_size=4).map(tuple),
    timeout_s=st.floats(min_value=1e-6, max_value=3600),
    log_level=st.sampled_from(["debug", "info", "warning", "error"]),
    max_corrections=st.integers(0, 100),
)
def test_settings_as_yaml_reads_back_to_equal_settings(
    tmp_path: Path,
    model: str,
    model_path: str | None,
    n_threads: int | None,
    temperature: float,
    seed: int,
    env_allow: tuple[str, ...],
    timeout_s: float,
    log_level: str,
    max_corrections: int,
) -> None:
    original = Settings(
        data_dir=tmp_path / "data dir: #1",
        log_level=log_level,  # type: ignore[arg-type]
        llm=LLMSettings(
            model=model,
            timeout_s=timeout_s,
            local=LocalModelSettings(
                model_path=model_path, n_threads=n_threads, temperature=temperature, seed=seed
            ),
        ),
        tools=ToolSettings(env_allow=env_allow),
        scheduler=SchedulerSettings(max_corrections=max_corrections),
    )
    path = write(tmp_path / "shown.yaml", settings_as_yaml(original))
    assert load_settings(path, env={}) == original


def test_settings_keys_and_env_names() -> None:
    keys = settings_keys()
    assert keys[:3] == [("data_dir",), ("log_level",), ("log_format",)]
    assert ("llm", "local", "n_ctx") in keys
    assert ("llm", "local") not in keys  # sections are not keys
    # 22 under context: (window.whole_below), 9 under memory:, 4 under mcp:, 5 under bus:,
    # 7 under daemon:, 36 elsewhere (21 under tools:: 6 sandbox, 8 web; 4 under scheduler:)
    # issue 19: provider faults: llm.api_base, api_key_env, fallbacks, retry.* (5) = 8;
    # costs: llm.max_tokens, roles, prices = 3; toolchain: tools.toolchain.auto, mounts,
    # allow = 3; issue 20: tools.allow_home_dot_workspaces = 1
    # issue 20: bus.auth, bus.key_file, bus.max_message_bytes, username, password_file = 5
    # issue 20: mcp.task_pass_env = 1; bus.ca_file (TLS to the broker) = 1
    # loop guard: scheduler.loop_limit = 1; hooks: hooks.run, hooks.allow_task = 2;
    # traces.endpoint = 1; llm.stream = 1; approvals.ask, approvals.allow, approvals.timeout_s = 3;
    # tools.snapshots = 1
    assert len(keys) == len(set(keys)) == (22 + 36 + 9 + 4 + 5 + 7 + 8 + 3 + 3 + 1 + 5 + 1 + 1
                                           + 1 + 2 + 1 + 1 + 3 + 1)
    assert env_var_name(("llm", "local", "n_ctx")) == "GLIDING_LLM__LOCAL__N_CTX"


def test_gliding_variables_that_are_not_settings_are_left_alone(tmp_path: Path) -> None:
    env = {"GLIDING_HOME": str(tmp_path), "GLIDING_VENV": ".venv",
           "GLIDING_WHEEL_CACHE": str(tmp_path), "GLIDING_LOG_LEVEL": "error"}
    assert load_settings(env=env).log_level == "error"
