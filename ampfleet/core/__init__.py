"""Shared kernel: settings, database, models, job spec, lifecycle. Imports nothing else of ours."""
