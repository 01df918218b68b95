"""What a job's agents work with, built the same way in the job's process and on a
``gliding worker``: the budget tracker, the checks, the MCP servers as tool groups, the roles
with the tool groups the task and the servers give them, and the job's tool groups.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from gliding.agents.approvals import Approvals
from gliding.agents.hooks import Hooks
from gliding.agents.roles import RoleSpec
from gliding.bus import topics
from gliding.bus.messages import JobEvent
from gliding.bus.port import Bus
from gliding.config.settings import Settings
from gliding.config.task import Task
from gliding.core.budget import BudgetTracker, Limits
from gliding.core.clock import Clock
from gliding.core.messages import Usage
from gliding.daemon.runtime import Runtime
from gliding.errors import TaskFileError
from gliding.memory.archive.port import ArchivePort
from gliding.tools.base import ToolGroupManager
from gliding.tools.checks import ChecksGroup
from gliding.tools.groups import GROUP_NAMES, job_groups, known_group
from gliding.tools.knowledge import KnowledgeAccess
from gliding.tools.netguard import Policy
from gliding.tools.sandbox import Sandbox

if TYPE_CHECKING:
    from gliding.tools.mcp.client import MCPGroup


def job_hooks(job: str, task: Task, settings: Settings, sandbox: Sandbox | None,
              bus: Bus) -> Hooks | None:
    """The job's hooks where its agents run (this host's and, where it allows them, the
    task's), their events published on the job's event topic; None without hooks."""
    async def publish(event: Any) -> None:
        await bus.publish(topics.events(job), JobEvent.of(job, event))

    return Hooks.of(job, task, settings, sandbox, publish)


def job_approvals(job: str, task: Task, settings: Settings, port: ArchivePort, clock: Clock,
                  bus: Bus) -> Approvals | None:
    """The job's approvals where its agents run (this host's policy, then the task's: a call
    asks when either asks); None when neither ever asks."""
    policies = (settings.approvals, task.approvals)
    if all(p.ask == "nothing" for p in policies):
        return None

    async def publish(event: Any) -> None:
        await bus.publish(topics.events(job), JobEvent.of(job, event))

    return Approvals(port, job, policies, settings.approvals.timeout_s, task.workspace,
                     publish, clock.monotonic)


def mcp_groups(task: Task, settings: Settings, sandbox: Sandbox | None = None
               ) -> list[MCPGroup]:
    """The job's MCP servers as tool groups, not yet open (docs/mcp.md); none declared: the
    MCP SDK is not even imported. The task's own stdio servers run in ``sandbox``, the job's
    command sandbox (``job_sandbox``); without one, in a sandbox the settings ask for (no
    toolchain), never unconfined by omission. The host's own ``mcp.servers`` run as configured.
    """
    if not settings.mcp.servers and not task.mcp_servers:
        return []
    from gliding.tools.mcp.client import mcp_groups

    if sandbox is None and task.mcp_servers:
        sandbox = Sandbox.of(settings.tools, network=task.network,
                             hidden=(settings.data_dir,))
    return mcp_groups(settings.mcp, task.mcp_servers, workspace=task.workspace,
                      env_allow=settings.tools.env_allow, sandbox=sandbox,
                      guard=Policy.of(settings.tools.web.allow))


async def agent_parts(job: str, task: Task, settings: Settings, base: dict[str, RoleSpec],
                      port: ArchivePort, rt: Runtime, clock: Clock,
                      sandbox: Sandbox | None = None, *,
                      knowledge: KnowledgeAccess | None = None,
                      ) -> tuple[BudgetTracker, ChecksGroup, list[MCPGroup],
                                 dict[str, RoleSpec], ToolGroupManager]:
    """What a job's agents work with, wherever they run (this process or a worker): the budget
    tracker charged with what earlier runs paid, the checks, the MCP groups (the task's own
    servers in ``sandbox``, the job's command sandbox: ``mcp_groups``), the roles with their
    task and MCP groups, and the tool groups (not yet open). Long-term memory is
    ``knowledge`` when given (a worker's, over the bus), else the runtime's.

    Raises:
        ArchiveError: the ledger cannot be read. TaskFileError: an unknown tool group.
    """
    budget = BudgetTracker(limits_of(task), started_at=clock.monotonic())
    for call in await port.calls():  # what earlier runs of the job already paid
        budget.record(call.role, Usage(call.prompt_tokens, call.completion_tokens,
                                       call.cached_tokens, call.cost_usd,
                                       0 if call.priced else 1))
    checks = ChecksGroup(task.checks)
    mcp = mcp_groups(task, settings, sandbox)
    roles = task_roles(base, mcp, task)
    tools = job_groups(checks=checks, reader=port, iri_base=f"gliding://job/{job}/",
                       knowledge=knowledge if knowledge is not None else rt.access(),
                       web=settings.tools.web, mcp=mcp,
                       asked=[g for r in roles.values()
                              for g in (*r.tool_groups, *r.tool_groups_on_demand)])
    return budget, checks, mcp, roles, tools


def task_roles(roles: dict[str, RoleSpec], mcp: list[MCPGroup],
               task: Task) -> dict[str, RoleSpec]:
    """The roles of ``task``'s job: with the MCP groups and the task's own tool groups.

    Raises:
        TaskFileError: the task names a tool group no role may name.
    """
    return with_task_groups(_with_mcp(roles, mcp), task)


def _with_mcp(roles: dict[str, RoleSpec], groups: list[MCPGroup]) -> dict[str, RoleSpec]:
    """``roles`` with each MCP group added to the roles its server names (``roles``), always
    offered or, with ``on_demand``, loadable with tool_search."""
    if not groups:
        return roles
    from gliding.tools.mcp.client import role_groups

    out: dict[str, RoleSpec] = {}
    for name, spec in roles.items():
        always, on_demand = role_groups(groups, name)
        out[name] = dataclasses.replace(
            spec, tool_groups=tuple(dict.fromkeys((*spec.tool_groups, *always))),
            tool_groups_on_demand=tuple(dict.fromkeys((*spec.tool_groups_on_demand,
                                                       *on_demand))))
    return out


def with_task_groups(roles: dict[str, RoleSpec], task: Task) -> dict[str, RoleSpec]:
    """``roles`` with the tool groups the task file gives them (``tool_groups``).

    Raises:
        TaskFileError: a group no role may name.
    """
    out = dict(roles)
    for name, groups in task.tool_groups.items():
        unknown = [g for g in groups if not known_group(g)]
        if unknown:
            raise TaskFileError(
                f"{task.source}: tool_groups.{name}: unknown tool group "
                f"{', '.join(repr(g) for g in unknown)}",
                hint=f"tool groups: {', '.join(GROUP_NAMES)}, or mcp_<server> (docs/mcp.md)")
        if name in out:
            spec = out[name]
            out[name] = dataclasses.replace(
                spec, tool_groups=tuple(dict.fromkeys((*spec.tool_groups, *groups))))
    return out


def limits_of(task: Task) -> Limits:
    """The task's budgets as the budget tracker reads them."""
    def split(value: Any) -> tuple[Any, dict[str, Any]]:
        return (None, dict(value)) if isinstance(value, dict) else (value, {})

    prompt, role_prompt = split(task.prompt_tokens)
    completion, role_completion = split(task.completion_tokens)
    cost, role_cost = split(task.cost_usd)
    return Limits(turns=dict(task.turns), prompt_tokens=prompt, completion_tokens=completion,
                  cost_usd=cost, wall_time_s=task.wall_time_s, role_prompt_tokens=role_prompt,
                  role_completion_tokens=role_completion, role_cost_usd=role_cost)
