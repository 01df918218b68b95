"""The tool groups of one job, built from what the job has.

    read       read_file, list_dir, glob, grep          (the workspace)
    write      write_file, edit_file                    (the workspace)
    exec       bash                                     (the workspace, the bash settings)
    check      run_checks                               (the task's checks)
    memory     read_result, grep_result, recall, note   (the archive; long-term memory if any)
    knowledge  kg_search, knowledge_query               (long-term memory; absent without it)
    web        web_fetch, web_search                    (tools.web; web_search with a service)
    mcp_<name> <name>__<tool> for each tool it lists    (the MCP server <name>: gliding.mcp;
                                                          absent when the job declares none)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gliding.config.settings import MCP_NAME_CHARS, MCP_NAME_MAX, WebSettings
from gliding.core.checks import Check
from gliding.tools.base import ToolGroup, ToolGroupManager, builtin_groups
from gliding.tools.checks import ChecksGroup
from gliding.tools.knowledge import KnowledgeAccess, KnowledgeGroup
from gliding.tools.readback import ArchiveReader, MemoryGroup
from gliding.tools.web import WebGroup

GROUP_NAMES = ("read", "write", "exec", "check", "memory", "knowledge", "web")
MCP_PREFIX = "mcp_"  # mcp_<server>: the tools of one MCP server (gliding.tools.mcp.client.MCPGroup)


def known_group(name: str) -> bool:
    """Whether a role may name ``name``: one of GROUP_NAMES, or ``mcp_<server>`` for any
    server name the settings allow (declared by this job or not)."""
    server = name.removeprefix(MCP_PREFIX)
    return name in GROUP_NAMES or (name.startswith(MCP_PREFIX)
                                   and 0 < len(server) <= MCP_NAME_MAX
                                   and set(server) <= MCP_NAME_CHARS)


def job_groups(*, checks: ChecksGroup | Sequence[Check] = (),
               reader: ArchiveReader | None = None, iri_base: str = "",
               knowledge: KnowledgeAccess | None = None,
               web: WebSettings | None = None, mcp: Sequence[ToolGroup] = (),
               asked: Iterable[str] = ()) -> ToolGroupManager:
    """Every group a job's roles may name; "knowledge" is unavailable without ``knowledge``.

    ``mcp`` are the groups of the job's MCP servers (not yet open); an ``mcp_<server>`` named
    in ``asked`` (the roles' group names) whose server the job does not declare is unavailable,
    so a role naming it goes without it.
    """
    groups = [ToolGroup(name, tools) for name, tools in builtin_groups().items()]
    check = checks if isinstance(checks, ChecksGroup) else ChecksGroup(checks)
    groups += [check, MemoryGroup(reader, iri_base, knowledge)]
    if knowledge is not None:
        groups.append(KnowledgeGroup(knowledge))
    groups += [WebGroup(web if web is not None else WebSettings()), *mcp]
    declared = {g.name for g in mcp}
    unavailable = [] if knowledge is not None else ["knowledge"]
    unavailable += [n for n in asked if n.startswith(MCP_PREFIX) and n not in declared]
    return ToolGroupManager(groups, unavailable=unavailable)
