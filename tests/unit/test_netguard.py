"""The SSRF guard by address class: only globally routable targets pass, judged by the IPv4
address an IPv6 one carries where it carries one; malformed URLs are refused, never raised."""

from __future__ import annotations

import pytest

from ampfleet.core.netguard import RefusedTargetError, pin, refuse_reason


def resolving_to(*answers: str):
    return lambda _host, _port: list(answers)


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",  # loopback
        "10.1.2.3",  # private
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",  # link-local, cloud metadata
        "100.64.0.1",  # shared address space (carrier-grade NAT)
        "100.100.100.200",  # a cloud metadata address inside it
        "0.0.0.0",
        "224.0.0.1",  # multicast
        "192.0.2.1",  # documentation
        "198.18.0.1",  # benchmarking
        "240.0.0.1",  # reserved
        "255.255.255.255",
        "::1",
        "::",
        "fe80::1",  # link-local
        "fc00::1",  # unique local
        "fec0::1",  # site-local (deprecated; this Python calls it global)
        "ff0e::1",  # global-scope multicast
        "2001:db8::1",  # documentation
        "::ffff:127.0.0.1",  # IPv4-mapped loopback
        "::ffff:10.0.0.1",
        "2002:a00:1::1",  # 6to4 carrying 10.0.0.1
        "2002:7f00:1::1",  # 6to4 carrying 127.0.0.1
        "2001:0:4136:e378:8000:63bf:3fff:fdd2",  # Teredo (client 192.0.2.45)
        "64:ff9b::a00:1",  # NAT64 carrying 10.0.0.1
        "64:ff9b::7f00:1",  # NAT64 carrying 127.0.0.1
        "::127.0.0.1",  # IPv4-compatible loopback (::/96), which this Python calls global
        "::7f00:2",  # the same form, written in hex
        "::10.0.0.1",
        "::169.254.169.254",
        "::ffff:0:127.0.0.1",  # IPv4-translated (SIIT) loopback
        "::ffff:0:a00:1",
        "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo, client 127.0.0.1
    ],
)
def test_non_global_addresses_are_refused(address: str) -> None:
    reason = refuse_reason(
        "https://hooks.example/x", allow_private=False, resolve=resolving_to(address)
    )
    assert reason is not None
    assert "loopback or private" in reason
    literal = f"[{address}]" if ":" in address else address
    assert refuse_reason(f"http://{literal}/x", allow_private=False) is not None


@pytest.mark.parametrize(
    "address",
    [
        "8.8.8.8",
        "1.1.1.1",
        "2606:4700::1111",
        "::ffff:8.8.8.8",
        "2002:808:808::1",
        "::8.8.8.8",  # IPv4-compatible, carrying a global address
    ],
)
def test_global_addresses_pass(address: str) -> None:
    assert (
        refuse_reason("https://h.example/", allow_private=False, resolve=resolving_to(address))
        is None
    )


def test_one_private_answer_among_public_ones_refuses() -> None:
    resolve = resolving_to("8.8.8.8", "10.0.0.1")
    assert refuse_reason("https://h.example/", allow_private=False, resolve=resolve) is not None


@pytest.mark.parametrize(
    "url",
    [
        "http://[::1/",
        "http://127.0.0.1:99999/",
        "http://a..b/",
        f"http://{'a' * 64}.example.com/",
        "http://.example.com/",
        "",
        "ftp://example.com/",
        "http:///path",
        "http://user:pw@example.com/",
    ],
)
def test_malformed_urls_are_refused_not_raised(url: str) -> None:
    for allow_private in (False, True):
        assert refuse_reason(url, allow_private=allow_private, resolve=resolving_to("8.8.8.8"))


def test_a_name_that_does_not_resolve_is_refused() -> None:
    def fails(_host: str, _port: int) -> list[str]:
        raise OSError("no such name")

    assert "cannot resolve" in (
        refuse_reason("https://x.example/", allow_private=False, resolve=fails) or ""
    )


def test_pin_puts_the_checked_address_in_the_url_and_keeps_the_name() -> None:
    target = pin(
        "https://hooks.example:8443/a?b=1", allow_private=False, resolve=resolving_to("8.8.8.8")
    )
    assert (target.url, target.host_header, target.server_name) == (
        "https://8.8.8.8:8443/a?b=1",
        "hooks.example:8443",
        "hooks.example",
    )
    target = pin("http://hooks.example/", allow_private=False, resolve=resolving_to("2606:4700::1"))
    assert target.url == "http://[2606:4700::1]:80/"
    international = pin(
        "https://bücher.example/", allow_private=False, resolve=resolving_to("8.8.8.8")
    )
    assert (international.host_header, international.server_name) == (
        "xn--bcher-kva.example",
        "xn--bcher-kva.example",
    )
    literal = pin("https://[2606:4700::1111]/x", allow_private=False)
    assert (literal.host_header, literal.server_name) == ("[2606:4700::1111]", None)
    with pytest.raises(RefusedTargetError, match=r"10\.0\.0\.1"):
        pin("https://hooks.example/", allow_private=False, resolve=resolving_to("10.0.0.1"))
