"""HTTP API (FastAPI): one subpackage per resource — router (HTTP), service (rules),
repository (queries), schemas (pydantic I/O)."""
