"""Benchmark harnesses behind `gliding bench ...` and scripts/."""
