"""Which network interface carries this node's address: the one its ranks must talk on.

Told nothing, gloo binds to the address its host name resolves to, and NCCL's bootstrap
picks an interface by its own preference. On a host with several interfaces that is often
not the one other nodes reach: in a container or a network namespace the host name maps to
127.0.0.1, and every peer is then told to connect to its own loopback (gloo fails with
"connectFullMesh ... Connection refused, remote=[127.0.0.1]"). The node's address
(AMPFLEET_NODE_ADDRESS) is the one the operator said other nodes use, so its interface is
the right one.
"""

from __future__ import annotations

import contextlib
import fcntl
import socket
import struct
from collections.abc import Mapping

SIOCGIFADDR = 0x8915  # linux/sockios.h: an interface's (primary) IPv4 address
SOCKET_INTERFACE_VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


def interface_address(name: str) -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("256s", name.encode()[:15])
        try:
            answer = fcntl.ioctl(sock.fileno(), SIOCGIFADDR, request)
        except OSError:  # down, or no IPv4 address
            return None
    return socket.inet_ntoa(answer[20:24])


def interface_with_address(address: str) -> str | None:
    """The interface whose IPv4 address is `address` (a name is resolved first)."""
    with contextlib.suppress(OSError):
        address = socket.gethostbyname(address)
    for _, name in socket.if_nameindex():
        if interface_address(name) == address:
            return name
    return None


def socket_interface_environment(node_address: str, worker: Mapping[str, str]) -> dict[str, str]:
    """GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME naming the interface of `node_address`,
    for each the operator has not set in the worker's environment."""
    unset = [name for name in SOCKET_INTERFACE_VARIABLES if name not in worker]
    interface = interface_with_address(node_address) if unset else None
    return dict.fromkeys(unset, interface) if interface else {}
