"""Ingestion: what a job produces becomes blackboard nodes, each revision kept in L0.

    ingestor.py   Ingestor: plans, checks, turns, tool results and what they name, as nodes
    service.py    ingestion as a bus subscriber of a job's messages
    entities.py   the files, symbols, errors and ids one tool call names
    findings.py   the lines of one tool result worth keeping as facts, with their line range

This file imports nothing.
"""
