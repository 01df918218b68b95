"""Tools the agents call: the Tool value, role tool groups, and the builtin tools.

    workspace.py   confinement: every path a tool touches is resolved inside the workspace
    base.py        Tool, ToolContext, ToolOutcome, Toolset, ToolGroupManager, builtin_groups()
    files.py       read_file, write_file, edit_file, list_dir           (groups "read", "write")
    search.py      glob, grep                                           (group "read")
    shell.py       bash: one process group, filtered env, timeout, capped output  (group "exec")
    checks.py      run_checks_on() and the run_checks tool              (group "check")

A tool refuses with ToolError (a path outside the workspace with ConfinementError); the
Toolset turns every failure into a ToolOutcome the model reads, so no tool can crash the loop.
Nothing is re-exported here; import from the module that owns the name.
"""
