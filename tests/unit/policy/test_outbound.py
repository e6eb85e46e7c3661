"""SPEC SEC4: jpu.policy.outbound — where a webhook may go, decided without I/O."""

from __future__ import annotations

import ipaddress
import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jpu.policy import outbound
from jpu.policy.outbound import _inet_aton

REFUSED_URLS = [
    "http://127.0.0.1:4222/",  # the platform's own NATS
    "http://[::1]/x",
    "http://0/",  # `0` is 0.0.0.0 to a resolver: this machine
    "http://0.0.0.0:8080/",
    "http://[::]/",
    "http://localhost:8080/hook",
    "http://LocalHost./hook",
    "http://api.localhost/",
    "http://127.1/",  # inet_aton forms a resolver accepts without DNS
    "http://2130706433/",
    "http://0x7f000001/",
    "http://169.254.169.254/latest/meta-data/",  # the cloud metadata service
    "http://[fe80::1]/",
    "http://10.0.0.5/",
    "http://172.16.3.4/",
    "http://192.168.1.1/",
    "http://100.64.0.1/",  # CGNAT
    "http://[fc00::1]/",
    "http://[fd12:3456::1]/",
    "http://224.0.0.1/",
    "http://[ff02::1]/",
    "http://[::ffff:127.0.0.1]/",  # IPv4-mapped loopback
    "http://240.0.0.1/",  # reserved
]


@pytest.mark.parametrize("url", REFUSED_URLS)
def test_webhook_to_a_local_private_or_multicast_address_is_refused_SEC4(url: str) -> None:
    assert outbound.url_problem(url) is not None


@pytest.mark.parametrize(
    "url", ["https://hooks.slack.com/services/T/B/x", "http://8.8.8.8/x", "https://[2606:4700::1]/"]
)
def test_webhook_to_a_public_name_or_address_passes_SEC4(url: str) -> None:
    assert outbound.url_problem(url) is None


@pytest.mark.parametrize("url", ["ftp://hooks.example/x", "file:///etc/passwd", "http://", "x"])
def test_webhook_is_http_or_https_only_SEC4(url: str) -> None:
    assert outbound.url_problem(url) is not None


def test_site_allowlist_names_a_private_network_SEC4() -> None:
    allow = outbound.parse_networks(["10.20.0.0/16", "127.0.0.0/8"])
    assert outbound.url_problem("http://10.20.1.2/hook", allow) is None
    assert outbound.url_problem("http://10.21.1.2/hook", allow) is not None
    assert outbound.url_problem("http://localhost:9/", allow) is None  # 127/8 allowed: its name
    assert outbound.url_problem("http://169.254.169.254/", allow) is not None


def test_every_resolved_address_must_pass_SEC4() -> None:
    public, loop = ipaddress.ip_address("93.184.216.34"), ipaddress.ip_address("127.0.0.1")
    assert outbound.addresses_problem([public], []) is None
    assert outbound.addresses_problem([public, loop], []) is not None  # rebinding: any one
    assert outbound.addresses_problem([], []) is not None


def test_reserved_test_names_need_no_lookup_SEC4() -> None:
    assert not outbound.needs_lookup("https://hooks.example/x")
    assert not outbound.needs_lookup("http://127.0.0.1/")
    assert outbound.needs_lookup("https://hooks.slack.com/x")


def test_allowlist_that_is_not_a_cidr_is_refused_SEC4() -> None:
    with pytest.raises(ValueError, match="not-a-net"):
        outbound.parse_networks(["not-a-net"])


@settings(max_examples=2000)
@given(
    st.lists(
        st.one_of(
            st.integers(0, 2**33).map(str),
            st.integers(0, 2**33).map(lambda n: f"0x{n:x}"),
            st.integers(0, 2**33).map(lambda n: f"0{n:o}"),
            st.sampled_from(["", "0x", "08", "0X1F", "00", "x1"]),
        ),
        min_size=1,
        max_size=5,
    ).map(".".join)
)
def test_SEC4_literal_ipv4_forms_read_as_the_resolver_reads_them(host: str) -> None:
    """The pure inet_aton agrees with libc's on every numeric form (`127.1`, `0x7f.1`, octal,
    one 32-bit number): a literal loopback in any spelling is seen as loopback."""
    try:
        expected: int | None = int(ipaddress.IPv4Address(socket.inet_aton(host)))
    except OSError:
        expected = None
    assert _inet_aton(host) == expected
