"""Agent memory, organised in levels the way an operating system organises storage.

This docstring is the one place the levels are listed; modules are named for what they hold.

    level  what it holds                                            modules             state
    -----  -------------------------------------------------------  ------------------  -------
    L0     archive: persistent, crash-safe, content-hashed store    archive.py          built
           of every turn, tool result and record of a job,          archive_schema.py
           addressed by IRI (gliding://job/<job>/...) and read
           back exactly; also the job's LLM call ledger and
           job metadata
    L1     summary chains: one short summary per turn with the      summaries.py        built
           IRI of the full turn in L0, bounded by a token budget;
           evicted by score, evicted IRIs kept as weak references
    L2     blackboard: the agents' shared working memory, an RDF    blackboard.py       built
           graph of JSON-LD nodes (one named graph per job)         vocabulary.py
           queried read-only with SPARQL; embedded Oxigraph or a    backends/
           SPARQL 1.1 endpoint; ingest.py writes a job's nodes     ingest.py
           and archives every revision in L0
    L3     projection: per-role SPARQL frames rendered into a       projection.py       built
           compact briefing within a token budget (in each role's
           system prompt); views cached and invalidated by writes
           to nodes they used
    recall long-term retrieval over memory items: BM25 (lexical),  lexical.py          built
           embeddings with an exact numpy index (vectors), and     vectors.py
           hybrid recall (fusion, neighbours, time, importance)    recall.py
           packed into a token budget

``archive.py`` is the L0 API (Archive, ArchivedItem, CallRecord, open_for_iri);
``archive_schema.py`` is its SQLite layout (tables, pragmas, schema version).
``blackboard.py`` is the L2 port (Blackboard, check_read_only_query, sparql_iri, sparql_literal);
``vocabulary.py`` its JSON-LD vocabulary (docs/vocabulary.md); ``backends/oxigraph_embedded.py``
and ``backends/sparql_endpoint.py`` its stores.

Lower levels never depend on higher ones: L1 points into L0 by IRI, L3 reads L2. Third-party stores
live only under ``memory/backends/``.
"""
