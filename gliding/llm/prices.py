"""Where a model's price comes from, and the check that a job with a cost budget can keep it.

A price is looked up in this order: ``local`` and ``scripted`` models cost nothing by nature (a
known $0); ``llm.prices.<model>`` from the settings; litellm's cost map, the copy shipped in its
wheel (``LITELLM_LOCAL_MODEL_COST_MAP``, never downloaded), through the ``lookup`` the
composition root hands in (``gliding.llm.hosted.litellm_price``: litellm is imported only when
a hosted model is asked about). A model found in neither has no price: its calls' cost is
unknown, shown so, and a job with ``budgets.cost_usd`` that may call it is refused before
anything of it is written (``refuse_unpriced_cost_budget``). The arithmetic is
``gliding.core.prices``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gliding.config.settings import PriceSettings, Settings
from gliding.config.task import Task
from gliding.core.prices import Price
from gliding.errors import TaskFileError
from gliding.llm.port import free_backend

PriceLookup = Callable[[str], Price | None]  # a model -> its price in a provider's cost map

PRICES_HINT = ("give the model a price in the settings, in USD per million tokens, e.g. "
               "llm.prices: {'<model>': {input: 0.8, output: 4.0}} (docs/config.md, "
               "'Prices and costs'); or drop budgets.cost_usd")


def settings_price(model: str, prices: Mapping[str, PriceSettings]) -> Price | None:
    """The price ``llm.prices`` gives ``model``, if any."""
    p = prices.get(model)
    return None if p is None else Price(p.input, p.output, p.cache_read, p.cache_write)


def price_of(model: str, prices: Mapping[str, PriceSettings],
             lookup: PriceLookup | None = None) -> Price | None:
    """What ``model`` costs: a known zero for a local or scripted model, else ``llm.prices``,
    else what ``lookup`` (litellm's cost map, ``gliding.llm.hosted.litellm_price``) says;
    None when nobody knows."""
    if free_backend(model):
        return Price(0.0, 0.0)
    found = settings_price(model, prices)
    return found if found is not None or lookup is None else lookup(model)


def models_the_job_may_call(task: Task, settings: Settings, model: str | None = None) -> list[str]:
    """Every model a job of ``task`` may call, each once: the job's model (``model`` > the
    task's > ``llm.model``), its fallbacks (``llm.fallbacks``), and each role's own model and
    fallbacks (``llm.roles.<ROLE>``), as ``gliding.daemon.models.build_llm`` chains them.
    Every new way a job may reach a model is added here."""
    llm = settings.llm
    chosen = model or task.model or llm.model
    models = [chosen, *llm.fallbacks]
    for own in llm.roles.values():
        models += [own.model or chosen, *(llm.fallbacks if own.fallbacks is None
                                          else own.fallbacks)]
    return list(dict.fromkeys(models))


def refuse_unpriced_cost_budget(task: Task, settings: Settings, model: str | None = None, *,
                                lookup: PriceLookup | None = None) -> None:
    """Refuse a task with a cost budget when a model its job may call has no price (``price_of``
    with ``lookup``): its calls' cost would be unknown, so the budget could not be kept.

    Raises:
        TaskFileError: the task has ``budgets.cost_usd`` and such a model (exit 2); the
            message names the models and how to give them a price.
    """
    if task.cost_usd is None:
        return
    models = models_the_job_may_call(task, settings, model)
    missing = [m for m in models if price_of(m, settings.llm.prices, lookup) is None]
    if missing:
        names = ", ".join(missing)
        raise TaskFileError(
            f"{task.source}: budgets.cost_usd: no price is known for {names} (not in "
            "llm.prices, nor in litellm's cost map), so its calls' cost would be unknown and "
            "the cost budget could not be kept", hint=PRICES_HINT.replace("<model>", missing[0]))
