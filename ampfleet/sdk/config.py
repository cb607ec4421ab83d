"""Where the SDK and the CLI find the API and the key when they are not given one."""

from __future__ import annotations

from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict

from ampfleet.core.settings import ADMIN_KEY_FILE_NAME

DEFAULT_URL = "http://127.0.0.1:8000"


class ClientSettings(BaseSettings):
    """`AMPFLEET_URL`, `AMPFLEET_API_KEY` and `AMPFLEET_DATA_DIR` (where the server's
    admin key is), read when a client is made, from the environment or `.env` as the
    server reads its own settings."""

    model_config = SettingsConfigDict(env_prefix="AMPFLEET_", env_file=".env", extra="ignore")

    url: str = DEFAULT_URL
    api_key: str | None = None
    data_dir: Path = Path("var")


def resolve(base_url: str | None, api_key: str | None) -> tuple[str, str | None]:
    """The URL and key to use: as given, else from the environment, else (the key only)
    from the admin key file in the data folder (`var/admin.key` by default)."""
    settings = ClientSettings()
    key = api_key or settings.api_key or _admin_key_file(settings.data_dir)
    return (base_url or settings.url).rstrip("/"), key


def _admin_key_file(data_dir: Path) -> str | None:
    try:
        return (data_dir / ADMIN_KEY_FILE_NAME).read_text().strip() or None
    except OSError:  # absent or unreadable: go without a key; the API will say 401
        return None
