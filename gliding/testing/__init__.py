"""Fakes shipped as library code: a scripted LLM (and, later, more) for tests of code built on
Gliding. Nothing here touches the network or a real model."""

from gliding.testing.scripted import ScriptedLLM, call, text

__all__ = ["ScriptedLLM", "call", "text"]
