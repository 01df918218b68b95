"""The tool groups of one job, built from what the job has.

    read       read_file, list_dir, glob, grep          (the workspace)
    write      write_file, edit_file                    (the workspace)
    exec       bash                                     (the workspace, the bash settings)
    check      run_checks                               (the task's checks)
    memory     read_result, grep_result, recall         (the archive; long-term memory if any)
    knowledge  kg_search, knowledge_query               (long-term memory; absent without it)
"""

from __future__ import annotations

from collections.abc import Sequence

from gliding.core.checks import Check
from gliding.tools.base import ToolGroup, ToolGroupManager, builtin_groups
from gliding.tools.checks import ChecksGroup
from gliding.tools.knowledge import KnowledgeAccess, KnowledgeGroup
from gliding.tools.readback import ArchiveReader, MemoryGroup

GROUP_NAMES = ("read", "write", "exec", "check", "memory", "knowledge")


def job_groups(*, checks: ChecksGroup | Sequence[Check] = (),
               reader: ArchiveReader | None = None, iri_base: str = "",
               knowledge: KnowledgeAccess | None = None) -> ToolGroupManager:
    """Every group a job's roles may name; "knowledge" is unavailable without ``knowledge``."""
    groups = [ToolGroup(name, tools) for name, tools in builtin_groups().items()]
    check = checks if isinstance(checks, ChecksGroup) else ChecksGroup(checks)
    groups += [check, MemoryGroup(reader, iri_base, knowledge)]
    if knowledge is not None:
        groups.append(KnowledgeGroup(knowledge))
    return ToolGroupManager(groups, unavailable=() if knowledge is not None else ("knowledge",))
