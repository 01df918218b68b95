"""Malformed task files and what their error must say; shared by the config and CLI tests.

Each row is ``(case_id, yaml_text, expected_substring)``. Write ``yaml_text`` to a file named
``task.yaml`` and load it: a ``TaskFileError`` must follow whose message contains
``expected_substring`` (which names the file, the line and the field where there is one), and
the directory must be unchanged. ``workspace: task.yaml`` points the workspace at the task
file itself, so the "workspace is a file" case needs no extra setup.

Cases that are not YAML text (missing file, a directory, bytes that are not UTF-8) live in
tests/config/test_config_task.py.
"""

from __future__ import annotations

MALFORMED_TASKS: list[tuple[str, str, str]] = [
    # -- the file as a whole
    (
        "syntax_error",
        "goal: hello\n  pipeline: auto\n",
        "task.yaml:2:11: invalid YAML: mapping values are not allowed here",
    ),
    (
        "unclosed_flow_list",
        "goal: x\npipeline: [PA, DA\n",
        "task.yaml:3:1: invalid YAML: expected ',' or ']'",
    ),
    ("empty_file", "", "task.yaml: the task file is empty"),
    ("only_comments", "# goal: later\n\n", "task.yaml: the task file is empty"),
    ("top_level_list", "- goal: x\n- goal: y\n", "task.yaml:1: the task file must be a mapping"),
    ("top_level_string", "just do it\n", "not a string"),
    (
        "two_documents",
        "goal: a\n---\ngoal: b\n",
        "task.yaml:2:1: invalid YAML: but found another document",
    ),
    (
        "python_tag",
        "goal: !!python/object/apply:os.system [ls]\n",
        "task.yaml:1:7: invalid YAML: could not determine a constructor",
    ),
    (
        "control_character",
        'goal: "bell\x07"\n',
        "task.yaml:1: invalid YAML: character U+0007 is not allowed",
    ),
    (
        "duplicate_key",
        "goal: a\nworkspace: w\ngoal: b\n",
        "task.yaml:3: duplicate key goal: first at line 1, again at line 3",
    ),
    (
        "duplicate_nested_key",
        "goal: a\nbudgets:\n  turns:\n    DA: 2\n    DA: 3\n",
        "task.yaml:5: duplicate key budgets.turns.DA: first at line 4, again at line 5",
    ),
    # -- top-level fields
    ("missing_goal", "workspace: ws\n", "task.yaml:1: goal: required field is missing"),
    ("empty_goal", 'goal: "   "\n', "task.yaml:1: goal: must not be empty"),
    (
        "goal_not_a_string",
        "goal: 42\n",
        "task.yaml:1: goal: Input should be a valid string, got 42",
    ),
    (
        "unknown_top_level_field",
        "goal: x\ncolour: red\n",
        "task.yaml:2: colour: unknown field 'colour' (fields: goal, workspace, model, pipeline,",
    ),
    ("empty_model", "goal: x\nmodel: ''\n", "task.yaml:2: model: must not be empty"),
    (
        "workspace_is_a_file",
        "goal: x\nworkspace: task.yaml\n",
        "task.yaml:2: workspace: ",
    ),
    # -- pipeline
    (
        "unknown_role_in_pipeline",
        "goal: x\npipeline: [PA, DA, QA]\n",
        "task.yaml:2: pipeline: unknown role 'QA' (roles: PA, DA, CA, AA)",
    ),
    (
        "pipeline_without_da",
        "goal: x\npipeline:\n  - PA\n  - CA\n",
        "task.yaml:2: pipeline: must contain DA",
    ),
    (
        "duplicate_role_in_pipeline",
        "goal: x\npipeline: [DA, CA, DA]\n",
        "task.yaml:2: pipeline: role 'DA' appears more than once",
    ),
    (
        "empty_pipeline",
        "goal: x\npipeline: []\n",
        "task.yaml:2: pipeline: must not be an empty list",
    ),
    (
        "pipeline_other_word",
        "goal: x\npipeline: sometimes\n",
        "task.yaml:2: pipeline: must be 'auto' or a list of roles",
    ),
    # -- budgets
    (
        "negative_turns",
        "goal: x\nbudgets:\n  turns: -1\n",
        "task.yaml:3: budgets.turns: must be from 1 to 10000, got -1",
    ),
    (
        "zero_turns_for_a_role",
        "goal: x\nbudgets:\n  turns:\n    DA: 0\n",
        "task.yaml:4: budgets.turns.DA: Input should be greater than or equal to 1",
    ),
    (
        "unknown_role_in_turns",
        "goal: x\nbudgets:\n  turns:\n    QA: 3\n",
        "task.yaml:4: budgets.turns.QA: unknown role 'QA' (roles: PA, DA, CA, AA)",
    ),
    (
        "turns_not_a_number",
        "goal: x\nbudgets:\n  turns: many\n",
        "task.yaml:3: budgets.turns: must be a whole number",
    ),
    (
        "unknown_budget",
        "goal: x\nbudgets:\n  tokens: 5\n",
        "task.yaml:3: budgets.tokens: unknown field 'tokens'",
    ),
    (
        "cost_usd_wrong_type",
        "goal: x\nbudgets:\n  cost_usd: lots\n",
        "task.yaml:3: budgets.cost_usd: Input should be a valid number, got 'lots'",
    ),
    (
        "cost_usd_quoted_number",
        'goal: x\nbudgets:\n  cost_usd: "1.0"\n',
        "task.yaml:3: budgets.cost_usd: Input should be a valid number",
    ),
    (
        "negative_cost_usd",
        "goal: x\nbudgets:\n  cost_usd: -0.5\n",
        "task.yaml:3: budgets.cost_usd: Input should be greater than or equal to 0",
    ),
    (
        "prompt_tokens_fraction",
        "goal: x\nbudgets:\n  prompt_tokens: 1.5\n",
        "task.yaml:3: budgets.prompt_tokens: Input should be a valid integer",
    ),
    (
        "cost_usd_unknown_role",
        "goal: x\nbudgets:\n  cost_usd: {XX: 1}\n",
        "task.yaml:3: budgets.cost_usd: unknown role 'XX' (roles: PA, DA, CA, AA)",
    ),
    (
        "prompt_tokens_role_fraction",
        "goal: x\nbudgets:\n  prompt_tokens: {DA: 1.5}\n",
        "task.yaml:3: budgets.prompt_tokens: DA: Input should be a valid integer, got 1.5",
    ),
    (
        "zero_wall_time",
        "goal: x\nbudgets:\n  wall_time_s: 0\n",
        "task.yaml:3: budgets.wall_time_s: Input should be greater than 0",
    ),
    # -- checks
    (
        "unknown_check_kind",
        "goal: x\nchecks:\n  - file_exists: a.txt\n  - file_missing: b.txt\n",
        "task.yaml:4: checks[1].file_missing: unknown check kind 'file_missing'",
    ),
    (
        "file_contains_without_text",
        "goal: x\nchecks:\n  - file_contains:\n      path: hello.txt\n",
        "task.yaml:3: checks[0].file_contains.text: required field is missing",
    ),
    (
        "check_path_escaping",
        "goal: x\nchecks:\n  - file_exists: ../x\n",
        "task.yaml:3: checks[0].file_exists: must stay inside the workspace: '../x'",
    ),
    (
        "check_path_escaping_midway",
        "goal: x\nchecks:\n  - file_contains: {path: a/../../x, text: hi}\n",
        "task.yaml:3: checks[0].file_contains.path: must stay inside the workspace",
    ),
    (
        "absolute_check_path",
        "goal: x\nchecks:\n  - file_exists: /etc/passwd\n",
        "task.yaml:3: checks[0].file_exists: must be relative to the workspace, not absolute",
    ),
    (
        "check_with_two_kinds",
        "goal: x\nchecks:\n  - file_exists: a\n    command: b\n",
        "task.yaml:3: checks[0]: a check has exactly one kind, got file_exists and command",
    ),
    (
        "check_not_a_mapping",
        "goal: x\nchecks:\n  - hello.txt\n",
        "task.yaml:3: checks[0]: a check is a mapping with one of file_exists, file_contains",
    ),
    (
        "empty_command",
        "goal: x\nchecks:\n  - command: '  '\n",
        "task.yaml:3: checks[0].command.run: must not be empty",
    ),
    (
        "command_zero_timeout",
        "goal: x\nchecks:\n  - command: {run: 'true', timeout_s: 0}\n",
        "task.yaml:3: checks[0].command.timeout_s: Input should be greater than 0",
    ),
    (
        "checks_not_a_list",
        "goal: x\nchecks:\n  file_exists: a\n",
        "task.yaml:2: checks: must be a list of checks, got a mapping",
    ),
]
