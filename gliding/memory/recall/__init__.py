"""Recall: long-term retrieval over what was written to the blackboard.

    lexical.py        BM25 over short texts (pure Python and numpy)
    vectors.py        the vector port, an exact numpy index, the offline MiniLM embedder
    vector_cache.py   embeddings kept on disk across processes
    hybrid.py         hybrid recall: fusion, graph expansion, neighbours, time, importance
    packing.py        memory items packed into a prompt within a token budget
    knowledge.py      KnowledgeMemory: the blackboard joined to recall (every node indexed);
                      the one retrieval API (an import contract keeps lexical, vectors and
                      hybrid behind it)
    access.py         KnowledgeAccess: recall, kg_search and knowledge_query as tools use them
    access_log.py     recall's use counts on disk (<data_dir>/recall_access.sqlite3)

This file imports nothing.
"""
