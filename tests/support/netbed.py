"""A multi-host network on one machine: network namespaces joined by a bridge, each link
shaped with `tc` (tbf for the rate, netem for the delay).

To TCP, gloo and torchrun a namespace is a host: its own interfaces, addresses, routes and
loopback. Gradients between hosts of the bed cross a link of a chosen rate, which is the
regime half-precision AllReduce is for; over loopback the wire is as fast as memory.

    with network_bed(hosts=2, rate="1gbit", delay_ms=0.5) as bed:
        bed.run(0, ["python", ...])            # runs inside host 0's namespace
        bed.address(1)                         # 198.18.N.11
        bed.root_address                       # where services for the hosts listen

Layout: a bridge in the root namespace carries `root_address` (198.18.N.1/24, from the range
reserved for network benchmarks, RFC 2544) and one veth pair per host. Each direction of a
host's link is shaped where it leaves an interface: uploads on the host's `eth0`, downloads
on the bridge port. Between two hosts a packet crosses both, so the rate is the link's and
the one-way delay is `delay_ms` (half of it on each side); to the root it is half that.

Teardown is the context manager's, with atexit as a second line; a test process killed
outright leaves its namespaces behind, so every bed first removes those of processes that
are gone (names carry the creating pid: `afnb<pid>-<host>`).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import ipaddress
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PREFIX = "afnb"
BENCHMARK_RANGE = ipaddress.ip_network("198.18.0.0/15")
HOST_OFFSET = 11  # host i is .11 + i; .1 is the root side
MAX_HOSTS = 16
RATE = re.compile(r"^\d+(\.\d+)?(kbit|mbit|gbit)$")
_RATE_BITS = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}


class NetworkBedUnavailableError(RuntimeError):
    """The process may not create network namespaces (no CAP_NET_ADMIN, no `ip`/`tc`)."""


def rate_bits(rate: str) -> float:
    """'1gbit' -> 1e9 bits/s."""
    match = RATE.match(rate)
    if match is None:
        raise ValueError(f"rate {rate!r} is not <number>kbit|mbit|gbit")
    return float(rate[: -len(match.group(2))]) * _RATE_BITS[match.group(2)]


def _ip(*args: str, netns: str | None = None, check: bool = True) -> str:
    command = ["ip", *(["-n", netns] if netns else []), *args]
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {done.stderr.strip()}")
    return done.stdout


def _tc(netns: str | None, *args: str) -> None:
    command = [*(["ip", "netns", "exec", netns] if netns else []), "tc", *args]
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {done.stderr.strip()}")


def unavailable_reason(*, delay: bool = False) -> str | None:
    """Why this process cannot build a bed (with link delays), or None when it can."""
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        return f"{' and '.join(missing)} not installed"
    probe = f"{PREFIX}{os.getpid()}-probe"
    done = subprocess.run(
        ["ip", "netns", "add", probe], check=False, capture_output=True, text=True
    )
    if done.returncode != 0:
        return f"cannot create network namespaces (needs CAP_NET_ADMIN): {done.stderr.strip()}"
    try:
        if delay:
            _ip("link", "add", "probe0", "type", "veth", "peer", "name", "probe1", netns=probe)
            try:
                _tc(probe, "qdisc", "add", "dev", "probe0", "root", "netem", "delay", "1ms")
            except RuntimeError as exc:
                return f"this kernel has no netem qdisc, so links cannot be delayed ({exc})"
    finally:
        subprocess.run(["ip", "netns", "delete", probe], check=False, capture_output=True)
    return None


def _owner_alive(name: str) -> bool:
    match = re.match(rf"^{PREFIX}(\d+)", name)
    return match is None or Path(f"/proc/{match.group(1)}").exists()


def remove_stale() -> list[str]:
    """Delete the namespaces and bridges of beds whose creating process is gone."""
    removed = []
    for line in _ip("netns", "list", check=False).splitlines():
        name = line.split()[0] if line.strip() else ""
        if name.startswith(PREFIX) and not _owner_alive(name):
            _ip("netns", "delete", name, check=False)
            removed.append(name)
    for line in _ip("-o", "link", "show", check=False).splitlines():
        parts = line.split(":")
        name = parts[1].strip().split("@")[0] if len(parts) > 1 else ""
        if name.startswith(PREFIX) and not _owner_alive(name):
            _ip("link", "delete", name, check=False)
            removed.append(name)
    return removed


@contextlib.contextmanager
def _subnets_chosen_one_at_a_time() -> Iterator[None]:
    """Held from choosing a free subnet until the bridge holds its address: two processes
    (a split test run's workers, a benchmark beside the tests) would otherwise both see the
    same /24 free and give it to two bridges."""
    with open(Path(tempfile.gettempdir()) / "ampfleet-netbed.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 of the benchmark range that no interface of the root namespace uses yet."""
    used = set()
    for line in _ip("-4", "-o", "addr", "show").splitlines():
        for word in line.split():
            if "/" in word and word[0].isdigit():
                used.add(ipaddress.ip_interface(word).network.network_address)
    for subnet in BENCHMARK_RANGE.subnets(new_prefix=24):
        if subnet.network_address not in used and subnet.network_address.packed[2] != 0:
            return subnet  # type: ignore[return-value]
    raise RuntimeError("every /24 of 198.18.0.0/15 is in use")


@dataclass
class Link:
    rate: str
    delay_ms: float


@dataclass
class NetworkBed:
    hosts: int
    link: Link
    subnet: ipaddress.IPv4Network = field(default_factory=_free_subnet)
    tag: str = field(default_factory=lambda: f"{PREFIX}{os.getpid()}")
    _created: list[str] = field(default_factory=list)

    # -- names and addresses --------------------------------------------------------------

    # Interface names have at most 15 characters: afnb<pid>b<subnet> and afnb<pid>p<subnet><host>.
    @property
    def _subnet_tag(self) -> str:
        return f"{self.subnet.network_address.packed[2]:02x}"

    def namespace(self, host: int) -> str:
        return f"{self.tag}-{self._subnet_tag}-{host}"

    def bridge_port(self, host: int) -> str:
        """The root side of host `host`'s veth pair."""
        return f"{self.tag}p{self._subnet_tag}{host:x}"

    @property
    def bridge(self) -> str:
        return f"{self.tag}b{self._subnet_tag}"

    @property
    def root_address(self) -> str:
        return str(self.subnet.network_address + 1)

    def address(self, host: int) -> str:
        return str(self.subnet.network_address + HOST_OFFSET + host)

    interface = "eth0"
    """The name of each host's link interface, inside its namespace."""

    # -- building and tearing down --------------------------------------------------------

    def create(self) -> NetworkBed:
        if not 1 <= self.hosts <= MAX_HOSTS:
            raise ValueError(f"hosts must be 1..{MAX_HOSTS}")
        rate_bits(self.link.rate)
        atexit.register(self.destroy)
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            self._created.append(self.bridge)
            _ip("addr", "add", f"{self.root_address}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for host in range(self.hosts):
                self._add_host(host)
        except BaseException:
            self.destroy()
            raise
        return self

    def _add_host(self, host: int) -> None:
        netns, port = self.namespace(host), self.bridge_port(host)
        _ip("netns", "add", netns)
        self._created.append(netns)
        _ip("link", "add", port, "type", "veth", "peer", "name", self.interface, "netns", netns)
        self._created.append(port)
        _ip("link", "set", port, "master", self.bridge, "up")
        _ip("addr", "add", f"{self.address(host)}/24", "dev", self.interface, netns=netns)
        _ip("link", "set", self.interface, "up", netns=netns)
        _ip("link", "set", "lo", "up", netns=netns)
        self._shape(None, port)  # the host's downloads
        self._shape(netns, self.interface)  # its uploads

    def _shape(self, netns: str | None, device: str) -> None:
        """tbf at the link's rate, then (with a delay) netem with half the one-way delay.

        The burst covers 1 ms at the rate and at least two 64 KiB segments: veth hands tbf
        whole GSO segments, and one larger than the bucket would never be sent."""
        bits = rate_bits(self.link.rate)
        burst = max(2 * 65536, int(bits / 8 / 1000))
        _tc(netns, "qdisc", "add", "dev", device, "root", "handle", "1:", "tbf",
            "rate", self.link.rate, "burst", str(burst), "latency", "100ms")  # fmt: skip
        if self.link.delay_ms > 0:
            _tc(netns, "qdisc", "add", "dev", device, "parent", "1:1", "handle", "10:",
                "netem", "delay", f"{self.link.delay_ms / 2}ms", "limit", "100000")  # fmt: skip

    def destroy(self) -> None:
        """Idempotent; also run at exit."""
        # Links first, by name: a deleted namespace's interfaces go away asynchronously,
        # and a port still there would clash with the next bed's of the same name.
        for name in reversed(self._created):
            if not name.startswith(f"{self.tag}-"):
                _ip("link", "delete", name, check=False)
        for name in reversed(self._created):
            if name.startswith(f"{self.tag}-"):
                _ip("netns", "delete", name, check=False)
        self._created.clear()
        atexit.unregister(self.destroy)

    # -- using it -------------------------------------------------------------------------

    def command(self, host: int, argv: Sequence[str]) -> list[str]:
        """`argv` run inside host `host`'s namespace."""
        return ["ip", "netns", "exec", self.namespace(host), *argv]

    def run(self, host: int, argv: Sequence[str], **kwargs: Any) -> str:
        """`argv`'s output, run to completion inside host `host`'s namespace."""
        done = subprocess.run(
            self.command(host, argv), check=True, capture_output=True, text=True, **kwargs
        )
        return str(done.stdout)

    def set_link(self, host: int, up: bool) -> None:
        """Cut (or restore) host `host`'s link, as a pulled cable would: the root side of its
        veth pair goes down, so nothing passes either way and nothing answers (no reset), and
        connections open across it live on to carry on once it is back."""
        _ip("link", "set", self.bridge_port(host), "up" if up else "down")

    @contextlib.contextmanager
    def link_cut(self, host: int) -> Iterator[None]:
        """Host `host`'s link down for the block, and up again however the block ends."""
        self.set_link(host, up=False)
        try:
            yield
        finally:
            self.set_link(host, up=True)

    def bytes_sent(self, host: int) -> int:
        """Bytes host `host` has sent over its link (TCP/IP headers included)."""
        path = f"/sys/class/net/{self.interface}/statistics/tx_bytes"
        return int(self.run(host, ["cat", path]))


@contextlib.contextmanager
def network_bed(
    hosts: int = 2, *, rate: str = "1gbit", delay_ms: float = 0.0
) -> Iterator[NetworkBed]:
    """A bed of `hosts` hosts, each on its own link of `rate` and `delay_ms` (one-way, host
    to host); raises NetworkBedUnavailableError where namespaces (or delays) cannot be made."""
    reason = unavailable_reason(delay=delay_ms > 0)
    if reason is not None:
        raise NetworkBedUnavailableError(reason)
    with _subnets_chosen_one_at_a_time():
        remove_stale()
        bed = NetworkBed(hosts, Link(rate, delay_ms)).create()
    try:
        yield bed
    finally:
        bed.destroy()
