"""Prompt assembly, result routing, compaction and token counting (the context engine)."""
