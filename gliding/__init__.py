"""Gliding: an agent operating system with token economy without forgetting."""

__version__ = "0.1.0"
