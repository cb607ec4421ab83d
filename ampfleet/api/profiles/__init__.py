"""Profiles on demand: POST /v1/jobs/{id}/profile asks a running job's ranks to capture a
few steps with torch.profiler; their traces and summary become artifacts of the job."""
