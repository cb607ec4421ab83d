"""A rank's environment is the allow-listed part of its worker's: no platform or store
credential reaches code the user brought."""

from __future__ import annotations

import os

from ampfleet.workers.launch import rank_environment, threads_per_rank

WORKER = {
    "PATH": "/usr/bin",
    "OMP_PROC_BIND": "close",
    "MALLOC_MMAP_THRESHOLD_": "65536",
    "AMPFLEET_DATABASE_URL": "postgresql://ampfleet:hunter2@db/ampfleet",
    "AMPFLEET_SECRET_KEY": "server-secret",
    "AMPFLEET_S3_ACCESS_KEY_ID": "store-key-id",
    "AMPFLEET_S3_SECRET_ACCESS_KEY": "store-secret",
    "AWS_ACCESS_KEY_ID": "aws-key-id",
    "AWS_SECRET_ACCESS_KEY": "aws-secret",
    "AWS_SESSION_TOKEN": "aws-token",
}


def test_no_credential_reaches_a_rank() -> None:
    env = rank_environment(WORKER, ranks_at_once=2)
    assert env["PATH"] == "/usr/bin"
    assert env["OMP_PROC_BIND"] == "close"
    assert env["MALLOC_MMAP_THRESHOLD_"] == "65536"  # the operator's allocator tuning
    secrets = {v for k, v in WORKER.items() if k.startswith(("AMPFLEET_", "AWS_"))}
    assert not [name for name, value in env.items() if value in secrets]
    assert not [name for name in env if name.startswith(("AMPFLEET_", "AWS_"))]


def test_a_rank_computes_on_its_share_of_the_cores_of_every_slot() -> None:
    cores = len(os.sched_getaffinity(0))
    assert threads_per_rank(1) == cores
    assert threads_per_rank(cores) == 1
    assert threads_per_rank(4 * cores) == 1  # never none
    assert rank_environment({}, ranks_at_once=2)["OMP_NUM_THREADS"] == str(max(1, cores // 2))


def test_the_operators_thread_count_stands() -> None:
    env = rank_environment({"OMP_NUM_THREADS": "3"}, ranks_at_once=64)
    assert env["OMP_NUM_THREADS"] == "3"
