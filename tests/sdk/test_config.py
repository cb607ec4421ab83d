"""The client's default URL follows the server's own configuration (AMPFLEET_API_HOST,
AMPFLEET_API_PORT, from the environment or `.env`), and AMPFLEET_URL wins over it."""

from __future__ import annotations

from pathlib import Path

import pytest

from ampfleet import Client
from ampfleet.core.settings import Settings

NAMES = (
    "AMPFLEET_URL",
    "AMPFLEET_API_HOST",
    "AMPFLEET_API_PORT",
    "AMPFLEET_API_KEY",
    "AMPFLEET_DATA_DIR",
)


@pytest.fixture(autouse=True)
def unconfigured(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No AMPFLEET_* address in the environment, and a current folder without `.env`."""
    for name in NAMES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def default_url() -> str:
    with Client() as client:
        return client.base_url


def test_without_configuration_the_url_is_the_servers_default() -> None:
    assert default_url() == "http://127.0.0.1:8000"


@pytest.mark.parametrize(
    ("host", "port", "url"),
    [
        (None, "8100", "http://127.0.0.1:8100"),
        ("0.0.0.0", "8100", "http://127.0.0.1:8100"),
        ("::", None, "http://127.0.0.1:8000"),
        ("::1", "8100", "http://[::1]:8100"),
        ("api.internal", "9000", "http://api.internal:9000"),
        ("10.0.0.5", None, "http://10.0.0.5:8000"),
    ],
)
def test_the_url_follows_the_servers_host_and_port(
    monkeypatch: pytest.MonkeyPatch, host: str | None, port: str | None, url: str
) -> None:
    if host is not None:
        monkeypatch.setenv("AMPFLEET_API_HOST", host)
    if port is not None:
        monkeypatch.setenv("AMPFLEET_API_PORT", port)
    assert default_url() == url


def test_the_client_and_the_server_read_the_same_env_file(unconfigured: Path) -> None:
    (unconfigured / ".env").write_text("AMPFLEET_API_HOST=0.0.0.0\nAMPFLEET_API_PORT=8123\n")
    server = Settings()
    assert (server.api_host, server.api_port) == ("0.0.0.0", 8123)
    assert default_url() == "http://127.0.0.1:8123"


def test_ampfleet_url_wins_over_the_servers_address(
    monkeypatch: pytest.MonkeyPatch, unconfigured: Path
) -> None:
    (unconfigured / ".env").write_text("AMPFLEET_API_PORT=8123\n")
    monkeypatch.setenv("AMPFLEET_API_PORT", "8100")
    monkeypatch.setenv("AMPFLEET_URL", "https://fleet.example/")
    assert default_url() == "https://fleet.example"
    with Client("http://given:1") as client:
        assert client.base_url == "http://given:1"


def test_the_admin_key_file_follows_the_servers_data_dir(
    monkeypatch: pytest.MonkeyPatch, unconfigured: Path
) -> None:
    (unconfigured / "elsewhere").mkdir()
    (unconfigured / "elsewhere" / "admin.key").write_text("amp_from_the_file\n")
    (unconfigured / ".env").write_text("AMPFLEET_DATA_DIR=elsewhere\n")
    with Client() as client:
        assert client.api_key == "amp_from_the_file"
