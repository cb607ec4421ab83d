"""GET /v1/jobs/{id}/diagnosis: why a job's accelerators idle, from its step breakdown."""
