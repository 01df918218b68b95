"""Agents: role specs loaded from roles/*.yaml, constitutions, and the agent step loop."""
