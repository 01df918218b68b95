"""A job's model when roles use different ones (``llm.roles.<ROLE>.model`` / ``.fallbacks``):
each call goes to the role's model (``request.meta["role"]``), the others to the job's.

    llm = ByRole(default=job_model, roles={"PA": planner_model})
"""

from __future__ import annotations

from collections.abc import Mapping

from gliding.core.messages import Completion
from gliding.llm.port import LLM, LLMRequest


class ByRole:
    """``roles[role]`` for a request of that role, ``default`` for every other; named after
    ``default`` (the job's model)."""

    def __init__(self, default: LLM, roles: Mapping[str, LLM]) -> None:
        self.default = default
        self.roles = dict(roles)

    @property
    def name(self) -> str:
        return self.default.name

    async def complete(self, request: LLMRequest) -> Completion:
        """The answer of the request's role's model.

        Raises:
            LLMError: as that model raises it.
        """
        model = self.roles.get(str(request.meta.get("role", "")), self.default)
        return await model.complete(request)
