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
           (plans, checks, turns, tool results and the files,      entities.py
           symbols and errors they name) and archives every        conversation.py
           revision in L0; conversation.py writes conversations
           (sessions, speakers, turns, named entities)
    L3     projection: per-role SPARQL frames rendered into a       projection.py       built
           compact briefing within a token budget (in each role's
           system prompt); views cached and invalidated by writes
           to nodes they used
    recall long-term retrieval over what was written to L2: BM25    lexical.py          built
           (lexical), embeddings (vectors: exact numpy index, or    vectors.py
           Qdrant; item vectors cached on disk),                    vector_cache.py
           hybrid recall (fusion, graph expansion,                  recall.py
           neighbours, time, importance, access) packed into a      packing.py
           token budget;                                            knowledge.py
           knowledge.py joins it to the blackboard                  backends/qdrant_vectors.py
           (every node put through it is indexed) for the agents'
           recall / kg_search / knowledge_query
    pre-   prefetch: what the next step will need — a bounded    prefetch/lines.py   built
    fetch  line index of a session's sources and a predictor    prefetch/predictor.py
           (rarity-weighted overlap with the newest action and
           result, a learned access prior); the context
           engine's kept facts and working set read it
``archive.py`` is the L0 API (Archive, ArchivedItem, CallRecord, open_for_iri);
``archive_schema.py`` is its SQLite layout (tables, pragmas, schema version).
``blackboard.py`` is the L2 port (Blackboard, check_read_only_query, sparql_iri, sparql_literal);
``vocabulary.py`` its JSON-LD vocabulary (docs/vocabulary.md); ``backends/oxigraph_embedded.py``
and ``backends/sparql_endpoint.py`` its stores. ``vectors.py`` is the vector port (VectorIndex,
ExactVectorIndex, Embedder); ``backends/qdrant_vectors.py`` its server backend.
``knowledge.py`` (KnowledgeMemory) is what the runtime and the LoCoMo benchmark both use.

Lower levels never depend on higher ones: L1 points into L0 by IRI, L3 reads L2. Third-party stores
live only under ``memory/backends/``.
"""
