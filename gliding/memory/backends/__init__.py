"""Third-party stores behind the memory ports; only the composition root picks one.

    oxigraph_embedded.py   Blackboard on an on-disk pyoxigraph Store (the default)
    sparql_endpoint.py     Blackboard on any SPARQL 1.1 endpoint over HTTP (e.g. oxigraph serve)
    rdf_terms.py           what both share: pyoxigraph terms <-> result values, the put update
    qdrant_vectors.py      VectorIndex on Qdrant (a server by url:, or qdrant-client's local mode)
"""
