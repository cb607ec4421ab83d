"""Shared kernel: settings, database, models, job spec and lifecycle. Imports nothing else of ours."""
