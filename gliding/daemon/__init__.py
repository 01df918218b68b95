"""The composition root: the only place that picks backends (model, bus, archive) and wires a job.
The long-running daemon and workers will live here too."""
