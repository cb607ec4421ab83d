"""Files and secrets at rest: server processes write private files, webhook secrets are
sealed in the database (and by the migration for rows made before), and a database error's
log carries no SQL parameters."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, insert, select, text
from sqlalchemy.exc import IntegrityError

from ampfleet.core.db import session_scope
from ampfleet.core.migrate import alembic_config, upgrade
from ampfleet.core.models import Webhook
from ampfleet.core.sealing import is_sealed, unseal
from ampfleet.core.settings import ADMIN_KEY_FILE_NAME, get_settings
from tests.support.env import environment
from tests.support.factories import job_spec
from tests.support.files import readable_by_others


def test_a_server_process_makes_its_data_dir_and_database_private(tmp_path: Path) -> None:
    data_dir = tmp_path / "var"
    data_dir.mkdir(mode=0o755)
    os.chmod(data_dir, 0o755)  # as an operator might have made it, whatever our umask
    env = {
        **os.environ,
        "AMPFLEET_DATA_DIR": str(data_dir),
        "AMPFLEET_DATABASE_URL": "",
        "AMPFLEET_ENVIRONMENT": "development",
    }
    subprocess.run(
        [sys.executable, "-m", "ampfleet.cli", "migrate"],
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    assert (data_dir / "ampfleet.db").exists()
    assert readable_by_others(data_dir) == []


def test_the_admin_key_file_is_narrowed_before_the_key_is_written(backend: str) -> None:
    from ampfleet.cli.servers import _ensure_admin_key_file

    path = get_settings().data_dir / ADMIN_KEY_FILE_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("left over\n")
    os.chmod(path, 0o644)
    _ensure_admin_key_file()
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.read_text().startswith("amp_")


def test_webhook_secrets_are_sealed_in_the_database(client: TestClient) -> None:
    hook = client.post("/v1/webhooks", json={"url": "https://93.184.215.14/x"}).json()
    with session_scope() as session:
        stored = session.scalars(select(Webhook.secret).where(Webhook.id == hook["id"])).one()
    assert hook["secret"] not in stored
    assert is_sealed(stored)
    assert unseal(stored, row_id=hook["id"], secret_key=get_settings().secret_key) == hook["secret"]
    database = get_settings().data_dir / "ampfleet.db"
    for path in (database, database.with_name("ampfleet.db-wal")):
        if path.exists():
            assert hook["secret"].encode() not in path.read_bytes()


def test_a_secret_sealed_under_another_key_fails_the_delivery_without_sending(
    client: TestClient,
) -> None:
    import httpx

    from ampfleet.scheduler.webhook_dispatch import claim, send

    client.post("/v1/webhooks", json={"url": "https://93.184.215.14/x", "states": ["QUEUED"]})
    client.post("/v1/jobs", json=job_spec())
    (delivery,) = claim(10, "a-different-server-key-entirely")
    assert delivery.secret is None
    with httpx.Client(timeout=1) as never_used:
        code, error = send(never_used, delivery, get_settings())
    assert code is None
    assert "AMPFLEET_SECRET_KEY" in (error or "")


def test_the_migration_seals_existing_secrets_and_downgrading_opens_them(tmp_path: Path) -> None:
    from alembic import command

    url = f"sqlite:///{tmp_path / 'sealing.db'}"
    plain = "ab" * 32
    with environment({"AMPFLEET_SECRET_KEY": "a-key-of-the-server-for-sealing"}):
        upgrade(url, "0007")
        engine = create_engine(url)
        try:
            with engine.begin() as connection:
                connection.execute(
                    text(
                        "INSERT INTO webhooks (id, project, url, secret, states, "
                        "metric_thresholds, active, created_at) VALUES ('wh_old', 'p', "
                        "'https://h.example/', :secret, '[]', '[]', 1, CURRENT_TIMESTAMP)"
                    ),
                    {"secret": plain},
                )
            upgrade(url)
            with engine.connect() as connection:
                sealed = connection.execute(text("SELECT secret FROM webhooks")).scalar_one()
            assert is_sealed(sealed)
            key = get_settings().secret_key
            assert unseal(sealed, row_id="wh_old", secret_key=key) == plain
            command.downgrade(alembic_config(url), "0007")
            with engine.connect() as connection:
                opened = connection.execute(text("SELECT secret FROM webhooks")).scalar_one()
            assert opened == plain
        finally:
            engine.dispose()


def test_a_database_error_logs_no_sql_parameters(
    backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    values = {
        "id": "wh_dup",
        "project": "p",
        "url": "https://h.example/",
        "secret": "the-secret-value-0123456789",
        "states": [],
        "metric_thresholds": [],
        "active": True,
    }
    with session_scope() as session:
        session.execute(insert(Webhook).values(**values))
    log = logging.getLogger("ampfleet.test")
    with pytest.raises(IntegrityError) as raised, session_scope() as session:
        session.execute(insert(Webhook).values(**values))
    log.error("the insert failed", exc_info=raised.value)
    assert values["secret"] not in caplog.text
    assert values["secret"] not in str(raised.value)
