"""L2 and L3, the blackboard: the agents' shared RDF working memory and what each role sees of it.

    blackboard.py   the port (Blackboard, read-only SPARQL, IRI and literal quoting); its stores
                    live in ``memory/backends/``
    vocabulary.py   the JSON-LD vocabulary: node types, properties, validation, RDF mapping
    nodes.py        a job's nodes: revisions in L0, state on the board, the one write path
                    (``BoardWriter``; ``DirectWriter`` when coherence is off) and its listeners
    projection.py   L3: per-role SPARQL frames rendered into a compact briefing, cached

This file imports nothing.
"""
