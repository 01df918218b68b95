"""Agent memory, organised in levels the way an operating system organises storage, and kept
in rooms named for what they hold.

This docstring is the one place the levels are listed.

    level   what it holds                                                  room
    ------  -------------------------------------------------------------  -----------------
    L0      archive: persistent, crash-safe, content-hashed store of       archive/
            every turn, tool result and record of a job, addressed by
            IRI (gliding://job/<job>/...) and read back exactly; the
            job's LLM call ledger, its metadata and the supervisor's
            journal
    L1      summary chains: one short summary per turn with the IRI of     (context/summaries.py:
            the full turn in L0, within a token budget                      the engine's own)
    L2      blackboard: the agents' shared working memory, an RDF graph    board/ (port,
            of JSON-LD nodes (one named graph per job), queried            vocabulary, search),
            read-only with SPARQL; embedded Oxigraph or a SPARQL 1.1       backends/ (stores)
            endpoint; ingestion writes a job's nodes (plans, checks,       ingest/
            turns, tool results and the files, symbols and errors they
            name) and archives every revision in L0
    L3      projection: per-role SPARQL frames rendered into a compact     board/projection.py
            briefing within a token budget, cached, invalidated by writes
    recall  long-term retrieval over what was written to L2: BM25,         recall/
            embeddings (exact numpy or Qdrant; vectors cached on disk),
            hybrid recall packed into a token budget; knowledge.py joins
            it to the blackboard for the agents' recall, kg_search and
            knowledge_query
    MESI    coherence of the blackboard across processes: a pure           coherence/
            transition table, the directory service, per-agent caches,
            the linearizability checker

Prefetch (what the next step will need) belongs to the context engine (``context/prefetch/``).
Lower levels never depend on higher ones: L1 points into L0 by IRI, L3 reads L2. Third-party
stores live only under ``memory/backends/``; only the composition root picks one. This file
imports nothing.
"""
