"""Largest values the database columns behind the API can hold: inputs are bounded by these
so that a huge number is a 422, not a database error."""

MAX_INT = 2**31 - 1  # INTEGER columns: steps, ranks, quotas
MAX_ID = 2**63 - 1  # BIGINT identity columns: event, metric, log line, delivery ids
