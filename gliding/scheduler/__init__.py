"""The supervisor: a pure policy (which pipeline, what after a check or a decision) and the async
runner that carries it out over the memory bus."""
