"""A workspace build uses the site's package index as the host's pip is configured (SPEC X4a,
SEC4): `pip config list` read into what the build hands pip, each part overridable by the site's
settings, and the index named in the build log without its credentials."""

from __future__ import annotations

from jpu.backends.pip_config import (
    PIP_DEFAULT_INDEX,
    PipSite,
    describe,
    from_host,
    parse_listing,
    redact,
    resolve,
)
from jpu.backends.workspaces import pip_site

# what `pip config list` printed on this project's machines (files, then the PIP_* environment)
LISTING = """\
:env:.cert='/etc/ssl/certs/ca-certificates.crt'
:env:.default-timeout='180'
:env:.find-links='/opt/wheels'
global.cert='/etc/ssl/old-ca.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.index-url='https://builder:s3cr%40t@pypi.mirror.example/simple'
install.index-url='https://mirror.example/pypi/simple'
install.trusted-host='mirror.example'
download.index-url='https://elsewhere.example/simple'
"""


def test_X4a_host_listing_is_read_with_pips_own_precedence() -> None:
    options = parse_listing(LISTING)
    assert options == {
        "cert": "/etc/ssl/certs/ca-certificates.crt",  # the environment over the file
        "extra-index-url": "file:///opt/pypi/simple file:///opt/pypi-more/simple",
        "index-url": "https://mirror.example/pypi/simple",  # [install] over [global]
        "trusted-host": "mirror.example",
    }  # [download] is another command's; timeouts and find-links are not the index
    site = from_host(options)
    assert site == PipSite(
        index_url="https://mirror.example/pypi/simple",
        ca_bundle="/etc/ssl/certs/ca-certificates.crt",
        extra_index_urls=("file:///opt/pypi/simple", "file:///opt/pypi-more/simple"),
        trusted_hosts=("mirror.example",),
        source="the host's pip configuration",
    )
    assert site.local_dirs() == ("/opt/pypi", "/opt/pypi-more")  # a mirror's pages and files
    assert PipSite(index_url="file:///srv/wheels/").local_dirs() == ("/srv/wheels",)


def test_X4a_no_pip_configuration_is_pips_default_index() -> None:
    site = from_host(parse_listing(""))
    assert site == PipSite()
    assert describe(site).startswith(f"package index: {PIP_DEFAULT_INDEX} (pip's default)")


def test_X4a_site_settings_override_the_host_each_part() -> None:
    host = from_host(parse_listing(LISTING))
    ca_only = resolve("", "/srv/site-ca.pem", host)
    assert ca_only.index_url == host.index_url and ca_only.ca_bundle == "/srv/site-ca.pem"
    assert ca_only.extra_index_urls == host.extra_index_urls
    assert "JPU_WORKSPACE_PIP_CA_BUNDLE" in ca_only.source and "host" in ca_only.source
    index = resolve("https://index.site.example/simple", "", host)
    assert index.index_url == "https://index.site.example/simple"
    assert index.extra_index_urls == () and index.trusted_hosts == ()  # the site's index alone
    assert index.ca_bundle == host.ca_bundle
    assert resolve("", "", host) == host


def test_X4a_credentials_never_reach_the_build_log() -> None:
    assert redact("https://builder:s3cr%40t@pypi.mirror.example:8443/simple") == (
        "https://***@pypi.mirror.example:8443/simple"
    )
    assert redact("https://token@mirror.example/simple") == "https://***@mirror.example/simple"
    assert redact("https://mirror.example/simple") == "https://mirror.example/simple"
    assert redact("file:///opt/pypi/simple") == "file:///opt/pypi/simple"
    site = PipSite(
        index_url="https://builder:s3cr%40t@pypi.mirror.example/simple",
        extra_index_urls=("https://u:p@extra.example/simple",),
        ca_bundle="/etc/ssl/certs/ca-certificates.crt",
        source="the host's pip configuration",
    )
    line = describe(site)
    assert "s3cr" not in line and "builder" not in line and "u:p" not in line
    assert "https://***@pypi.mirror.example/simple" in line and "***@extra.example" in line
    assert "/etc/ssl/certs/ca-certificates.crt" in line and "host's pip configuration" in line


def test_X4a_the_agent_reads_this_hosts_pip() -> None:
    """The edge: `pip config list` of this very host, as the agent runs it, read into the
    build's site; with a listing passed in, that one is used (the pure path)."""
    site = pip_site("", "", LISTING)
    assert site.index_url == "https://mirror.example/pypi/simple"
    here = pip_site("", "")
    assert here == resolve("", "", here)  # no settings: the host's own, unchanged
