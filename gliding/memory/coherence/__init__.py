"""Coherence: the MESI cache-coherence engine for the shared RDF blackboard.

The package holds the protocol (a pure transition table over Modified / Exclusive / Shared /
Invalid), the directory service that tracks which agent caches hold which node, the per-agent
caches, and ``linearizability.py``, the checker that the coherence benchmark runs over recorded
histories of concurrent reads and writes. Modules land one by one; this file imports nothing.
"""
