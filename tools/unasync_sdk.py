"""Writes the blocking client (ampfleet/sdk/client.py) from the async one (async_client.py)
with unasync, the tool httpcore writes its sync code with: one source for every method's
signature, defaults and docstring, so the two clients cannot drift apart.

    python tools/unasync_sdk.py            # rewrites ampfleet/sdk/client.py
    python tools/unasync_sdk.py --check    # exit 1 if it is not what the source gives
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import unasync

SDK = Path(__file__).resolve().parent.parent / "ampfleet" / "sdk"
SOURCE, TARGET = "async_client.py", "client.py"
NAMES = {
    "AsyncClient": "Client",
    "AsyncKeys": "Keys",
    "_AsyncIo": "_Io",
    "aclose": "close",
    "anext": "next",
    "aiter_lines": "iter_lines",
    "aiter_bytes": "iter_bytes",
    "aread": "read",
    "anyio": "time",  # `import anyio`, `await anyio.sleep(s)` -> `import time`, `time.sleep(s)`
}
# The texts that say which I/O a client does, as the blocking client says them.
TEXTS = {
    '''"""`AsyncClient`: the API from Python, with async I/O (asyncio or trio, through anyio).

This file is the one source of both clients: `Client` (client.py) is written from it by
unasync (`make sdk`; tests/sdk/test_sync_client_generated.py checks it is current).

    async with AsyncClient() as client:
        job = await client.submit("job.yaml")
        async with contextlib.aclosing(client.stream_events(job.id)) as frames:
            async for frame in frames:
                print(frame)

Close an async iterator you leave early (`aclosing`), so that its connection is released
then rather than whenever the event loop collects it.
"""''': '''# Written by tools/unasync_sdk.py (`make sdk`) from async_client.py: edit that file.
"""`Client`: the API from Python, with blocking I/O.

from ampfleet import Client

with Client() as client:  # AMPFLEET_URL, AMPFLEET_API_KEY, or var/admin.key
    job = client.submit("job.yaml")
    for frame in client.stream_events(job.id):
        print(frame)
    print(client.wait(job.id).state)
"""''',
    "with async methods and async iterators; error": "with blocking I/O; error",
    "Use it as an async context manager, or await `aclose()`.": (
        "Use it as a context manager, or call `close()`."
    ),
}


def generate(out_dir: Path) -> Path:
    """The blocking client, written into `out_dir`, formatted as the project formats."""
    work = Path(tempfile.mkdtemp())
    try:
        source = work / "from" / SOURCE
        source.parent.mkdir()
        shutil.copyfile(SDK / SOURCE, source)
        rule = unasync.Rule(f"/from/{SOURCE}", f"/to/{TARGET}", additional_replacements=NAMES)
        unasync.unasync_files([str(source)], rules=[rule])
        written = work / "to" / TARGET
        text = written.read_text()
        for async_text, sync_text in TEXTS.items():
            if async_text not in text:
                raise SystemExit(f"{SOURCE} no longer says: {async_text[:60]!r}...")
            text = text.replace(async_text, sync_text)
        out = out_dir / TARGET
        out.write_text(text)
        ruff = [sys.executable, "-m", "ruff"]
        subprocess.run([*ruff, "check", "-q", "--fix", "--select", "I", str(out)], check=True)
        subprocess.run([*ruff, "format", "-q", str(out)], check=True)
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        made = generate(Path(tmp)).read_text()
    if args.check:
        if made != (SDK / TARGET).read_text():
            sys.exit(f"ampfleet/sdk/{TARGET} is not what {SOURCE} gives: run `make sdk`")
        return
    (SDK / TARGET).write_text(made)


if __name__ == "__main__":
    main()
