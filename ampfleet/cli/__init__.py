"""`ampfleet`: the command line. servers.py runs the processes (api, scheduler, worker, up)
and manages the database; the API's user commands (client_commands.py: jobs, keys,
metrics, artifacts, profiles, recipes, code) load only when one of them runs."""

from ampfleet.cli.servers import app, main

__all__ = ["app", "main"]
