"""What a Slurm batch job carries: the settings its agents need and no credential, however
the scheduler got its settings (its environment or its .env); where its output goes; and how
a compute node gets its credentials instead (a 0600 settings file). No Slurm needed: the
real cluster's copy of the environment is checked in test_jobs.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from ampfleet.core.models import Allocation, Job
from ampfleet.core.settings import CREDENTIAL_SETTINGS, Settings
from ampfleet.scheduler.slurm.environment import AGENT_SETTINGS, batch_environment
from ampfleet.scheduler.slurm.starts import batch_job

DATABASE_URL = "postgresql+psycopg://ampfleet:db-password-1@db.internal/ampfleet"
SECRETS = {
    "AMPFLEET_DATABASE_URL": DATABASE_URL,
    "AMPFLEET_BROKER_URL": "redis://:broker-password-2@redis.internal:6379/0",
    "AMPFLEET_SECRET_KEY": "api-secret-key-3-long-enough",
    "AMPFLEET_S3_ACCESS_KEY_ID": "s3-key-id-4",
    "AMPFLEET_S3_SECRET_ACCESS_KEY": "s3-secret-5",
    "AMPFLEET_SLURM_TOKEN": "slurm-jwt-6",
}


def scheduler_settings(tmp_path: Path, **values: str) -> Settings:
    """Settings as a scheduler reads them: every secret in its .env, the pool's own."""
    dot_env = tmp_path / ".env"
    lines = {
        **SECRETS,
        "AMPFLEET_ENVIRONMENT": "production",
        "AMPFLEET_LOG_LEVEL": "DEBUG",
        "AMPFLEET_DATA_ROOTS": '["/mnt/datasets"]',
        "AMPFLEET_SLURM_POOL": "hpc",
        "AMPFLEET_SLURM_URL": "unix:/run/slurmrestd.socket",
        **values,
    }
    dot_env.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
    return Settings(_env_file=dot_env)  # type: ignore[call-arg]


def test_the_batch_environment_carries_the_agents_settings_and_no_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Some from the scheduler's environment, the rest from its .env.
    for name in ("AMPFLEET_SECRET_KEY", "AMPFLEET_SLURM_TOKEN"):
        monkeypatch.setenv(name, SECRETS[name])
    monkeypatch.setenv("AMPFLEET_S3_REGION", "eu-west-9")
    settings = scheduler_settings(tmp_path, AMPFLEET_DATA_DIR="var")
    process = {**os.environ, "PATH": "/usr/bin", "AMPFLEET_OTHER": "x"}
    environment = batch_environment(settings, process)
    for name, secret in SECRETS.items():
        assert name not in environment
        assert all(secret not in value for value in environment.values()), name
    assert "AMPFLEET_ENVIRONMENT" not in environment
    # Read from .env, which the batch jobs never got before.
    assert environment["AMPFLEET_LOG_LEVEL"] == "DEBUG"
    assert environment["AMPFLEET_DATA_ROOTS"] == '["/mnt/datasets"]'
    assert environment["AMPFLEET_S3_REGION"] == "eu-west-9"
    assert environment["AMPFLEET_DATA_DIR"] == str(Path("var").resolve())
    assert "AMPFLEET_SLURM_POOL" not in environment  # the command line names it
    assert environment["PATH"] == "/usr/bin"
    assert "AMPFLEET_OTHER" not in environment  # nothing passes for being named AMPFLEET_*


def test_no_credential_is_on_the_allow_list() -> None:
    fields = Settings.model_fields
    assert set(AGENT_SETTINGS) <= set(fields)
    assert not set(AGENT_SETTINGS) & CREDENTIAL_SETTINGS
    secret_typed = {name for name, f in fields.items() if SecretStr in _types(f.annotation)}
    assert secret_typed <= CREDENTIAL_SETTINGS


def _types(annotation: object) -> set[object]:
    found = {annotation}
    for arg in getattr(annotation, "__args__", ()):
        found |= _types(arg)
    return found


def test_the_pools_extra_variables_may_not_carry_a_credential(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="AMPFLEET_DATABASE_URL"):
        scheduler_settings(
            tmp_path, AMPFLEET_SLURM_ENVIRONMENT=f'{{"AMPFLEET_DATABASE_URL": "{DATABASE_URL}"}}'
        )


def a_placed_attempt() -> tuple[Job, list[Allocation]]:
    job = Job(id="job_1", attempt=2, project="p", resolved={"stop": {"max_runtime_s": 600}})
    allocations = [
        Allocation(job_id="job_1", attempt=2, node_rank=rank, node_id=f"hpc-n{rank}", slots=2)
        for rank in range(2)
    ]
    return job, allocations


def test_the_batch_job_names_the_nodes_settings_file_and_its_output_folder(
    tmp_path: Path,
) -> None:
    settings = scheduler_settings(
        tmp_path,
        AMPFLEET_SLURM_NODE_SETTINGS_FILE="/etc/ampfleet/node settings.env",
        AMPFLEET_SLURM_OUTPUT_DIR="/var/log/ampfleet-slurm/",
    )
    batch = batch_job(settings, *a_placed_attempt())
    assert "run-attempt --pool hpc --job job_1 --attempt 2" in batch.script
    assert "--settings-file '/etc/ampfleet/node settings.env'" in batch.script
    assert batch.standard_output == "/var/log/ampfleet-slurm/%x-%j.out"
    assert batch.working_directory == "/var/log/ampfleet-slurm"
    assert batch.nodes == 2
    assert batch.time_limit_min == 15  # 600 s and the 300 s margin, in minutes
    assert all(secret not in batch.script for secret in SECRETS.values())


def test_without_an_output_folder_the_output_is_discarded_not_left_in_tmp(
    tmp_path: Path,
) -> None:
    batch = batch_job(scheduler_settings(tmp_path), *a_placed_attempt())
    assert batch.standard_output == "/dev/null"
    assert "--settings-file" not in batch.script


def run_settings_file(path: Path) -> subprocess.CompletedProcess[str]:
    """Load `path` in a process of its own (it changes the process's settings)."""
    code = (
        "import sys; from pathlib import Path\n"
        "from ampfleet.core.settings import SettingsFileError, load_settings_file\n"
        "try:\n"
        "    s = load_settings_file(Path(sys.argv[1]))\n"
        "except SettingsFileError as e:\n"
        "    sys.exit(f'refused: {e}')\n"
        "print(s.database_url, s.log_level)\n"
    )
    env = {
        **os.environ,
        "AMPFLEET_DATABASE_URL": "sqlite:///from-the-job",
        "AMPFLEET_LOG_LEVEL": "WARNING",
    }
    return subprocess.run(
        [sys.executable, "-c", code, str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_a_nodes_settings_file_gives_the_agent_its_credentials(tmp_path: Path) -> None:
    path = tmp_path / "node.env"
    path.write_text(f"AMPFLEET_DATABASE_URL={DATABASE_URL}\nNOT_OURS=1\n")
    path.chmod(0o600)
    done = run_settings_file(path)
    assert done.returncode == 0, done.stderr
    # The file's credentials over the job's environment; the rest as the job says.
    assert done.stdout.split() == [DATABASE_URL, "WARNING"]


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620])
def test_a_settings_file_others_may_read_or_write_is_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "node.env"
    path.write_text(f"AMPFLEET_DATABASE_URL={DATABASE_URL}\n")
    path.chmod(mode)
    done = run_settings_file(path)
    assert done.returncode == 1
    assert "refused" in done.stderr
    assert "chmod 600" in done.stderr
    assert DATABASE_URL not in done.stderr


def test_run_attempt_refuses_a_missing_settings_file_saying_so(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ampfleet.cli",
            "run-attempt",
            "--pool",
            "hpc",
            "--job",
            "job_x",
            "--attempt",
            "1",
            "--settings-file",
            str(tmp_path / "absent.env"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert "absent.env" in done.stderr
