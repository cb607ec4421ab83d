"""Where the SDK and the CLI find the API and the key when they are not given one."""

from __future__ import annotations

from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_URL = "http://127.0.0.1:8000"
# `make run` (ampfleet up) leaves the first admin key here, relative to where it ran.
ADMIN_KEY_FILE = Path("var") / "admin.key"


class ClientSettings(BaseSettings):
    """`AMPFLEET_URL` and `AMPFLEET_API_KEY`, read when a client is made."""

    model_config = SettingsConfigDict(env_prefix="AMPFLEET_", extra="ignore")

    url: str = DEFAULT_URL
    api_key: str | None = None


def resolve(base_url: str | None, api_key: str | None) -> tuple[str, str | None]:
    """The URL and key to use: as given, else from the environment, else (the key only)
    from `var/admin.key` in the current folder."""
    settings = ClientSettings()
    key = api_key or settings.api_key or _admin_key_file()
    return (base_url or settings.url).rstrip("/"), key


def _admin_key_file() -> str | None:
    try:
        return ADMIN_KEY_FILE.read_text().strip() or None
    except OSError:  # absent or unreadable: go without a key; the API will say 401
        return None
