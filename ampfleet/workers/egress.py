"""The egress filter of sandboxes that keep the host's network: a multi-node attempt's
ranks (they must reach their peer nodes) and pip installing a job's requirements (it must
reach the index). Each runs as a host uid of its own, so the kernel can tell their packets
from everyone else's by the socket's owner (`meta skuid`): one nftables table owned by
ampfleet, `inet ampfleet_egress`, whose output chain sends each filtered uid's packets to a
chain of that uid's own, which accepts what it may open and rejects the rest (a reset for
TCP, an ICMP error otherwise, so that a rank fails at once with "connection refused"
rather than hanging until a timeout). Other uids pass untouched.

Each change is one nft script fed to `nft -f -`: the kernel applies it whole or not at all.
A uid's chain is named after it and the process that set it (`u<uid>_w<pid>t<start>`), and
its entry in the table's map is created, never overwritten: a uid another live process
filters is refused, not taken over, and a worker clears at start only the chains of its
own uids whose setter is gone.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import socket
import subprocess
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

NFT = "nft"
TABLE = "inet ampfleet_egress"
DNS_PORT = 53
CHAIN = re.compile(r"^u(\d+)_w(\d+)t(\d+)$")
PORT_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
RESOLV_CONF = Path("/etc/resolv.conf")


class EgressError(RuntimeError):
    """The filter could not be set or removed; the message says why."""


@dataclass(frozen=True)
class Allowed:
    """What one uid may open; everything else of its is rejected. Addresses are only ever
    `ipaddress` objects, so nothing but addresses and numbers reaches the nft script."""

    tcp: frozenset[tuple[Address, int, int]] = frozenset()
    """(address, first port, last port): new TCP connections it may open."""
    dns: frozenset[Address] = frozenset()
    """Resolvers it may ask, on port 53 (UDP and TCP)."""

    def __or__(self, other: Allowed) -> Allowed:
        return Allowed(self.tcp | other.tcp, self.dns | other.dns)


def problem() -> str | None:
    """Why this process cannot filter sandboxes' egress, or None when it can."""
    if os.geteuid() != 0:
        return "the worker is not root, so its sandboxes run as its own uid, not one to filter"
    if shutil.which(NFT) is None:
        return "nft (Debian's nftables) is not installed (make sandbox-deps installs it)"
    done = _nft("list", "tables", check=False)
    if done.returncode != 0:
        return f"nft cannot run (it needs CAP_NET_ADMIN): {done.stderr.strip()[:300]}"
    return None


def ephemeral_ports() -> tuple[int, int]:
    """The kernel's range for ports bound as port 0: torchrun's rendezvous and store, gloo's
    pairs and NCCL's bootstrap all listen there; the control plane listens on fixed ports
    below it (README: threat model)."""
    first, last = PORT_RANGE.read_text().split()
    return int(first), int(last)


def resolvers() -> frozenset[Address]:
    found = set()
    for line in RESOLV_CONF.read_text().splitlines() if RESOLV_CONF.exists() else []:
        words = line.split()
        if len(words) >= 2 and words[0] == "nameserver":
            try:  # an IPv6 resolver may carry its interface: fe80::1%eth0
                found.add(ipaddress.ip_address(words[1].split("%")[0]))
            except ValueError:
                continue
    return frozenset(found)


def addresses_of(host: str) -> frozenset[Address]:
    """`host`'s addresses: itself if it is one, else what it resolves to now."""
    try:
        return frozenset({ipaddress.ip_address(host)})
    except ValueError:
        pass
    try:
        found = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError as exc:
        raise EgressError(f"{host!r} does not resolve: {exc}") from exc
    return frozenset(ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in found)


def to_peers(peers: Iterable[str]) -> Allowed:
    """A multi-node attempt's ranks: TCP to its nodes' addresses (this node's included) on
    ports of the ephemeral range; DNS only where a node is named rather than numbered."""
    first, last = ephemeral_ports()
    peers = list(peers)
    named = any(not _is_address(peer) for peer in peers)
    addresses = frozenset().union(*(addresses_of(peer) for peer in peers))
    return Allowed(
        frozenset((a, first, last) for a in addresses), resolvers() if named else frozenset()
    )


def to_index(endpoints: Iterable[tuple[str, int]]) -> Allowed:
    """pip: TCP to the index's addresses (resolved now) and port, and DNS, which pip asks
    again itself."""
    tcp = {(a, port, port) for host, port in endpoints for a in addresses_of(host)}
    return Allowed(frozenset(tcp), resolvers())


# -- holding a uid's filter ---------------------------------------------------------------

_lock = threading.Lock()
_holds: dict[int, tuple[int, Allowed]] = {}
"""The uids this process filters: how many holders each has, and what they allow together
(pip's uid is shared by the installs that run at once)."""


def hold(uid: int, allowed: Allowed) -> None:
    """From now on `uid` opens only what `allowed` (and what the other holders allow) says;
    raises EgressError, with the uid unfiltered by this process, where it cannot."""
    with _lock:
        count, before = _holds.get(uid, (0, Allowed()))
        together = before | allowed
        if count == 0 or together != before:
            _run(_base() + _chain_script(uid, together, create=count == 0))
        _holds[uid] = (count + 1, together)


def release(uid: int) -> None:
    """One holder fewer; with the last, the uid's rules are removed."""
    with _lock:
        count, allowed = _holds.pop(uid, (0, Allowed()))
        if count > 1:
            _holds[uid] = (count - 1, allowed)
            return
    _remove(lambda held, owner: held == uid and owner == _owner())


def clear_stale(first: int, count: int) -> list[int]:
    """Remove the rules of uids in [first, first + count) whose setter has exited (a worker
    or doctor killed before it could): at a worker's start, none of its uids is held."""
    return _remove(lambda uid, owner: first <= uid < first + count and not _alive(owner))


def rules_of(uid: int) -> list[str]:
    """The chains filtering `uid` now, as nft lists them (empty: it is not filtered)."""
    listed = []
    for chain in _chains():
        if int(CHAIN.match(chain).group(1)) == uid:  # type: ignore[union-attr]
            listed.append(_nft("list", "chain", *TABLE.split(), chain).stdout)
    return listed


# -- the rules ----------------------------------------------------------------------------


def _base() -> str:
    """The table, its map of filtered uids and its output chain; the chain's one rule is
    written anew each time, in the same transaction, so it is there exactly once."""
    return (
        f"add table {TABLE}\n"
        f"add map {TABLE} owners {{ type uid : verdict ; }}\n"
        f"add chain {TABLE} output {{ type filter hook output priority 0 ; policy accept ; }}\n"
        f"flush chain {TABLE} output\n"
        f"add rule {TABLE} output meta skuid vmap @owners\n"
    )


def _chain_script(uid: int, allowed: Allowed, *, create: bool) -> str:
    chain = f"u{uid}_{_owner()}"
    rule = f"add rule {TABLE} {chain}"
    lines = [f"add chain {TABLE} {chain}", f"flush chain {TABLE} {chain}"]
    lines.append(f"{rule} ct state established,related accept")
    ranges: dict[tuple[int, int], list[Address]] = {}
    for address, first, last in sorted(allowed.tcp, key=str):
        ranges.setdefault((first, last), []).append(address)
    for (first, last), addresses in sorted(ranges.items()):
        ports = str(first) if first == last else f"{first}-{last}"
        for family, chosen in _by_family(addresses):
            lines.append(f"{rule} {family} daddr {{ {chosen} }} tcp dport {ports} accept")
    for family, chosen in _by_family(allowed.dns):
        for protocol in ("udp", "tcp"):
            lines.append(f"{rule} {family} daddr {{ {chosen} }} {protocol} dport {DNS_PORT} accept")
    lines.append(f"{rule} meta l4proto tcp reject with tcp reset")
    lines.append(f"{rule} reject with icmpx type admin-prohibited")
    if create:  # fails, and so does the whole script, where another process holds the uid
        lines.append(f"create element {TABLE} owners {{ {uid} : jump {chain} }}")
    return "\n".join(lines) + "\n"


def _by_family(
    addresses: Iterable[Address],
) -> list[tuple[str, str]]:
    """An uid's IPv6 is rejected whole unless an allowed address is IPv6."""
    chosen = sorted(set(addresses), key=str)
    v4 = ", ".join(str(a) for a in chosen if a.version == 4)
    v6 = ", ".join(str(a) for a in chosen if a.version == 6)
    return [(family, listed) for family, listed in (("ip", v4), ("ip6", v6)) if listed]


def _remove(which: Callable[[int, str], bool]) -> list[int]:
    """Remove the chains (and their map entries) `which(uid, owner)` picks, in one script."""
    chosen = []
    for chain in _chains():
        match = CHAIN.match(chain)
        if match and which(int(match.group(1)), chain.split("_", 1)[1]):
            chosen.append((int(match.group(1)), chain))
    if not chosen:
        return []
    pointed = _map_targets()
    script = ""
    for uid, chain in chosen:
        if pointed.get(uid) == chain:
            script += f"delete element {TABLE} owners {{ {uid} }}\n"
        script += f"flush chain {TABLE} {chain}\ndelete chain {TABLE} {chain}\n"
    _run(script)
    return [uid for uid, _ in chosen]


def _listing() -> list[dict[str, object]]:
    done = _nft("-j", "list", "table", *TABLE.split(), check=False)
    if done.returncode != 0:
        if "No such file or directory" in done.stderr:
            return []  # no table: nothing is filtered
        raise EgressError(f"nft could not list {TABLE}: {done.stderr.strip()[:300]}")
    items: list[dict[str, object]] = json.loads(done.stdout)["nftables"]
    return items


def _chains() -> list[str]:
    names = [item["chain"]["name"] for item in _listing() if "chain" in item]  # type: ignore[index]
    return [str(name) for name in names if CHAIN.match(str(name))]


def _map_targets() -> dict[int, str]:
    found = {}
    for item in _listing():
        if isinstance(found_map := item.get("map"), dict) and found_map.get("name") == "owners":
            for uid, verdict in found_map.get("elem", []):
                found[int(uid)] = str(verdict["jump"]["target"])
    return found


def _owner() -> str:
    """This process, as the chains it sets name it: its pid and start time, so that a
    recycled pid is not taken for it."""
    return f"w{os.getpid()}t{_start_time(os.getpid())}"


def _alive(owner: str) -> bool:
    pid, _, start = owner.removeprefix("w").partition("t")
    return _start_time(int(pid)) == int(start)


def _start_time(pid: int) -> int:
    try:  # field 22 of stat, counted after the command's parenthesis (it may hold spaces)
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return -1


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _nft(
    *args: str, check: bool = True, script: str | None = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [NFT, *args], input=script, capture_output=True, text=True, timeout=30, check=False
    )
    if check and done.returncode != 0:
        raise EgressError(f"nft {' '.join(args)}: {done.stderr.strip()[:500]}")
    return done


def _run(script: str) -> None:
    _nft("-f", "-", script=script)
