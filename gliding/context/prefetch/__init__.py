"""Prefetch: predicts what an agent's next step needs from what it has seen and done, and warms
it before the model call (``lines.py`` indexes sources by the identifiers of their lines;
``predictor.py`` ranks lines and learns which sources the agent comes back to)."""
