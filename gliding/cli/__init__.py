"""The typer CLI: the only place that configures logging or prints."""
