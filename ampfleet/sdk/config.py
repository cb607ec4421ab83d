"""Where the SDK and the CLI find the API and the key when they are not given one.

The URL follows the server's own configuration: the client reads the names the server reads
(`AMPFLEET_API_HOST`, `AMPFLEET_API_PORT`), from the environment or the same `.env`, with
the server's defaults, so a `make run` on another port is found without `AMPFLEET_URL`.
Those come off the server's settings class without making one: building it would validate
server settings (the secret key outside development) that a client has no business with.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict

from ampfleet.core.settings import ADMIN_KEY_FILE_NAME, Settings

_SERVER_FIELDS = Settings.model_fields
LOOPBACK = ipaddress.ip_address("127.0.0.1")


class ClientSettings(BaseSettings):
    """`AMPFLEET_URL`, `AMPFLEET_API_KEY`, and the server's `AMPFLEET_API_HOST`,
    `AMPFLEET_API_PORT` and `AMPFLEET_DATA_DIR` (where its admin key is), read when a
    client is made."""

    model_config = SettingsConfigDict(
        env_prefix=Settings.model_config.get("env_prefix", ""),
        env_file=Settings.model_config.get("env_file"),
        extra="ignore",
    )

    url: str | None = None
    api_key: str | None = None
    api_host: str = _SERVER_FIELDS["api_host"].default
    api_port: int = _SERVER_FIELDS["api_port"].default
    data_dir: Path = _SERVER_FIELDS["data_dir"].default

    @property
    def base_url(self) -> str:
        """`AMPFLEET_URL` where it is set, else the address the server listens on."""
        return self.url or server_url(self.api_host, self.api_port)


def server_url(host: str, port: int) -> str:
    """The URL that reaches, from this machine, a server listening on `host:port`."""
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:  # a host name
        return f"http://{host}:{port}"
    if address.is_unspecified:  # 0.0.0.0 or ::, every address: loopback is one of them
        address = LOOPBACK
    return f"http://[{address}]:{port}" if address.version == 6 else f"http://{address}:{port}"


def resolve(base_url: str | None, api_key: str | None) -> tuple[str, str | None]:
    """The URL and key to use: as given, else from the environment (or `.env`), else the
    server's address (the URL) and the admin key file in its data folder (`var/admin.key`
    by default)."""
    settings = ClientSettings()
    key = api_key or settings.api_key or _admin_key_file(settings.data_dir)
    return (base_url or settings.base_url).rstrip("/"), key


def _admin_key_file(data_dir: Path) -> str | None:
    try:
        return (data_dir / ADMIN_KEY_FILE_NAME).read_text().strip() or None
    except OSError:  # absent or unreadable: go without a key; the API will say 401
        return None
