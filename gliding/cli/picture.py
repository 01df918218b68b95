"""A picture of a node's neighbourhood on the blackboard (``gliding memory graph IRI --png``):
the node in the middle, its 1-hop neighbours around it, edges labelled with the property."""

from __future__ import annotations

import math
from pathlib import Path

from gliding.errors import NotFoundError, UsageError
from gliding.memory.board.blackboard import Blackboard, Ref, sparql_iri


def neighbourhood(board: Blackboard, iri: str, *, limit: int = 60
                  ) -> list[tuple[str, str, str, bool]]:
    """(subject, property, object, object_is_node) rows with ``iri`` at one end."""
    node = sparql_iri(iri)
    rows = board.query(
        f"SELECT ?s ?p ?o WHERE {{ GRAPH ?g {{ {{ {node} ?p ?o . BIND({node} AS ?s) }} UNION "
        f"{{ ?s ?p {node} . BIND({node} AS ?o) }} }} }} LIMIT {int(limit)}", timeout_s=10)
    out = []
    for r in rows:
        s, p, o = r["s"], r["p"], r["o"]
        if not isinstance(s, Ref) or not isinstance(p, Ref):
            continue
        name = p.iri.rsplit("#", 1)[-1].rsplit("/", 1)[-1]
        if isinstance(o, Ref):
            out.append((s.iri, name, o.iri, True))
        else:
            out.append((s.iri, name, str(getattr(o, "value", o)), False))
    return out


def draw(iri: str, rows: list[tuple[str, str, str, bool]], path: Path) -> None:
    if not rows:
        raise NotFoundError(f"no triple mentions {iri}", hint="check the IRI with memory query")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise UsageError("matplotlib is needed for the picture: install gliding[plots]",
                         hint="pip install 'gliding[plots]'") from exc
    others = []
    for s, p, o, _is_node in rows:
        other = o if s == iri else s
        others.append((other, p, s == iri))
    fig, ax = plt.subplots(figsize=(10, 8))
    ax.set_axis_off()
    ax.scatter([0], [0], s=900, color="#d95f02", zorder=3)
    ax.text(0, -0.14, _short(iri), ha="center", fontsize=8, weight="bold")
    n = len(others)
    for i, (label, prop, outgoing) in enumerate(others):
        angle = 2 * math.pi * i / n
        x, y = math.cos(angle), math.sin(angle)
        ax.annotate("", xy=(x, y) if outgoing else (0, 0), xytext=(0, 0) if outgoing else (x, y),
                    arrowprops={"arrowstyle": "->", "color": "#7570b3"})
        ax.scatter([x], [y], s=300, color="#1b9e77", zorder=3)
        ax.text(x * 1.12, y * 1.12, _short(label), ha="center", fontsize=7)
        ax.text(x / 2, y / 2, prop, fontsize=7, color="#555555")
    ax.set_xlim(-1.6, 1.6)
    ax.set_ylim(-1.4, 1.4)
    ax.set_title(f"Neighbourhood of {iri}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _short(text: str, width: int = 40) -> str:
    text = text.replace("gliding://job/", "")
    return text if len(text) <= width else "…" + text[-(width - 1):]
