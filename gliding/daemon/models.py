"""The job's model, chosen from its model string and the settings: the backend (the local
model, a replies file, or litellm), its fallbacks and retries, a model per role; and the checks
that refuse a model before a job is queued (a file that is no GGUF model, a cost budget with an
unpriced model).
"""

from __future__ import annotations

import os
from pathlib import Path

from gliding.config.settings import Settings
from gliding.config.task import Task
from gliding.core.prices import Price
from gliding.errors import UsageError
from gliding.llm.port import LLM, backend_kind
from gliding.llm.prices import refuse_unpriced_cost_budget, settings_price


def build_llm(model: str, settings: Settings) -> LLM:
    """The job's model: the backend ``model`` names (``backend``) with its fallbacks
    (``llm.fallbacks``) and, when one of them is hosted, retries on provider faults
    (``gliding/llm/resilient.py``, ``llm.retry``); a role with a model or fallbacks of its
    own (``llm.roles.<ROLE>``) calls those (``gliding/llm/routing.py``).

    Raises:
        UsageError: as ``backend`` raises it.
        LLMError: the local model file is missing.
    """
    built: dict[str, LLM] = {}

    def chain(first: str, fallbacks: tuple[str, ...]) -> LLM:
        names = tuple(dict.fromkeys((first, *fallbacks)))
        models = [built[m] if m in built else built.setdefault(m, backend(m, settings))
                  for m in names]
        if len(models) == 1 and backend_kind(first) != "litellm":
            return models[0]
        from gliding.llm.faults import RetryPolicy
        from gliding.llm.resilient import ResilientLLM

        r = settings.llm.retry
        return ResilientLLM(models, RetryPolicy(r.max_attempts, r.initial_s, r.max_s,
                                                r.max_total_s, r.cooldown_s))

    default = chain(model, settings.llm.fallbacks)
    own = {role: chain(r.model or model, settings.llm.fallbacks if r.fallbacks is None
                       else r.fallbacks)
           for role, r in settings.llm.roles.items()
           if r.model is not None or r.fallbacks is not None}
    if not own:
        return default
    from gliding.llm.routing import ByRole

    return ByRole(default, own)


def backend(model: str, settings: Settings) -> LLM:
    """The backend a model string names: ``local``, ``local:<gguf>``, ``scripted:<replies>``
    or a litellm string (with ``llm.api_base`` and the key in ``llm.api_key_env``).

    Raises:
        UsageError: a control character (a NUL byte) in ``model``; a local model without the
            ``local`` extra installed (``refuse_uninstalled``); ``scripted`` without a file, or
            a replies file that cannot be used; ``llm.api_key_env`` names a variable that is
            not set.
        LLMError: the local model file is missing.
    """
    if any(ord(ch) < 0x20 or ord(ch) == 0x7f for ch in model):
        raise UsageError(f"the model {model[:80]!r} has a control character",
                         hint="local, local:/path.gguf, scripted:replies.yaml or a litellm "
                              "string such as openai/gpt-4o-mini")
    kind = backend_kind(model)
    if kind == "local":
        from gliding.llm.local import LocalLLM, refuse_uninstalled

        path = Path(model.split(":", 1)[1]).expanduser() if ":" in model else None
        refuse_uninstalled(settings.llm.local, path)
        return LocalLLM(settings.llm.local, path)
    if kind == "scripted":
        from gliding.llm.scripted import FileScriptedLLM

        if ":" not in model or not model.split(":", 1)[1]:
            raise UsageError("the scripted model needs its replies file",
                             hint="--model scripted:replies.yaml (docs/config.md)")
        return FileScriptedLLM(Path(model.split(":", 1)[1]).expanduser())
    from gliding.llm.hosted import HostedLLM

    llm_settings = settings.llm
    api_key = None
    if llm_settings.api_key_env is not None:
        api_key = os.environ.get(llm_settings.api_key_env)
        if not api_key:
            raise UsageError(f"llm.api_key_env names {llm_settings.api_key_env}, which is not "
                             "set", hint=f"export {llm_settings.api_key_env}=<the key>, or "
                             "unset llm.api_key_env to use the provider's usual variable")
    return HostedLLM(model, timeout_s=llm_settings.timeout_s, max_tokens=llm_settings.max_tokens,
                     api_base=llm_settings.api_base, api_key=api_key, stream=llm_settings.stream,
                     role_max_tokens={role: own.max_tokens
                                      for role, own in llm_settings.roles.items()
                                      if own.max_tokens is not None},
                     price=settings_price(model, llm_settings.prices))


def check_model_file(model: str) -> None:
    """Refuse a ``local:<path>`` model whose path is no GGUF model file, before a job is
    queued (a submission to a daemon or an MCP server is refused now, not failed later).
    ``gliding run`` leaves the check to the job's first call.

    Raises:
        UsageError: missing, not a regular file, or without the GGUF header; the message
            never quotes the file.
    """
    if backend_kind(model) != "local" or ":" not in model:
        return
    from gliding.llm.local import gguf_refusal

    path = Path(model.split(":", 1)[1]).expanduser()
    refused = gguf_refusal(path)
    if refused is not None:
        raise UsageError(f"the model {model[:200]!r} cannot be used: {path} {refused}",
                         hint="local:/path/to/model.gguf, or local for the packaged model")


def check_cost_budget(task: Task, settings: Settings, model: str | None = None) -> None:
    """Refuse ``task`` when it has a cost budget and a model its job may call has no price
    (``llm.prices``, else litellm's cost map: imported only then).

    Raises:
        TaskFileError: such a model (exit 2); nothing of the job is written yet.
    """
    if task.cost_usd is None:
        return

    def litellm_price(model: str) -> Price | None:
        from gliding.llm.hosted import litellm_price

        return litellm_price(model)

    refuse_unpriced_cost_budget(task, settings, model, lookup=litellm_price)
