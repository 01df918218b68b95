"""Settings (one section per subsystem) and task files; config.yaml < GLIDING_* env < CLI flags.

    settings.py        the Settings model: every key, its default, what it changes
    loader.py          load_settings (the layers, in order) and settings_as_yaml
    task.py            task.yaml: load_task, the Task value and its archived record
    task_schema.py     the task file's schema (pydantic *Spec models) and its limits
    workspace_rule.py  where a job may work: workspace_refusal
    yamlsource.py      YAML with line numbers; errors as <file>:<line>: <field>: <message>

docs/config.md documents both files for users.
"""

from gliding.config.loader import load_settings, settings_as_yaml
from gliding.config.settings import Settings
from gliding.config.task import Task, load_task

__all__ = ["Settings", "Task", "load_settings", "load_task", "settings_as_yaml"]
