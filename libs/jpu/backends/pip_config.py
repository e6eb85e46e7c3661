"""Which package index a workspace build uses (SPEC X4a, SEC4): the host's own pip configuration
by default — what `pip config list` reports on the machine the agent runs on (its files and its
PIP_* environment, pip's own precedence) — each part overridden by the site's settings
(`workspace_pip_index_url`, `workspace_pip_ca_bundle`). A container sees none of the host's
pip configuration, so without this a host whose pip needs its own index or CA (a site mirror, a
proxy with its own CA) built workspaces that failed at the first download.

Pure: the listing is passed in (jpu.backends.workspaces.host_pip_listing reads it)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from urllib.parse import urlsplit, urlunsplit

# pip's option names that say where packages come from and whom to trust
CARRIED = ("index-url", "extra-index-url", "trusted-host", "cert")
PIP_DEFAULT_INDEX = "https://pypi.org/simple"
_LINE = re.compile(r"^(?P<section>[^.=\s]*)\.(?P<key>[a-z-]+)=(?P<value>.*)$")
# later wins: a file's [install] section over its [global], the environment over any file
_RANK = {"global": 0, "install": 1, ":env:": 2}


@dataclass(frozen=True)
class PipSite:
    """The package-index configuration a build hands its pip (never the host's pip.conf)."""

    index_url: str = ""  # "": pip's default index
    ca_bundle: str = ""  # a host CA file mounted read-only into the build as PIP_CERT
    extra_index_urls: tuple[str, ...] = ()
    trusted_hosts: tuple[str, ...] = ()
    source: str = ""  # where it came from, for the build log

    def local_dirs(self) -> tuple[str, ...]:
        """The host directories of `file://` indexes, to mount read-only at the same path (the
        build's network reaches no host, SEC4). A mirror's `<root>/simple` pages link to its
        files beside them (`../../files/…`): for an index named `simple`, its parent."""
        urls = (self.index_url, *self.extra_index_urls)
        dirs = [u.removeprefix("file://").rstrip("/") for u in urls if u.startswith("file:///")]
        return tuple(
            dict.fromkeys(d.rsplit("/", 1)[0] or "/" if d.endswith("/simple") else d for d in dirs)
        )


def parse_listing(text: str) -> dict[str, str]:
    """`pip config list` output (`global.cert='/etc/ssl/…'`, `:env:.index-url='…'`) → the
    carried options' values as pip applies them to `pip install`."""
    best: dict[str, tuple[int, str]] = {}
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if m is None or m["key"] not in CARRIED:
            continue
        rank = _RANK.get(m["section"])
        if rank is None:  # another command's section ([download], [wheel], …)
            continue
        value = m["value"].strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        if m["key"] not in best or rank >= best[m["key"]][0]:
            best[m["key"]] = (rank, value)
    return {k: v for k, (_, v) in best.items()}


def from_host(options: dict[str, str]) -> PipSite:
    return PipSite(
        index_url=options.get("index-url", "").strip(),
        ca_bundle=options.get("cert", "").strip(),
        extra_index_urls=tuple(options.get("extra-index-url", "").split()),
        trusted_hosts=tuple(options.get("trusted-host", "").split()),
        source="the host's pip configuration" if options else "",
    )


def resolve(index_url: str, ca_bundle: str, host: PipSite) -> PipSite:
    """The settings override the host's index and CA each; the host's extra indexes and trusted
    hosts go with its own index only (a site that names its index means that one alone)."""
    site = host
    if index_url:
        site = replace(site, index_url=index_url, extra_index_urls=(), trusted_hosts=())
    if ca_bundle:
        site = replace(site, ca_bundle=ca_bundle)
    if index_url or ca_bundle:
        named = " and ".join(
            n for n, v in (("JPU_WORKSPACE_PIP_INDEX_URL", index_url),
                           ("JPU_WORKSPACE_PIP_CA_BUNDLE", ca_bundle)) if v
        )  # fmt: skip
        site = replace(site, source=f"the site's settings ({named})" + (
            f" over {host.source}" if host.source else ""))  # fmt: skip
    return site


def redact(url: str) -> str:
    """`url` without its password (and user): the build log is the owner's to read."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=f"***@{host}"))


def describe(site: PipSite) -> str:
    """The build log's line naming the index used (credentials redacted)."""
    index = redact(site.index_url) if site.index_url else f"{PIP_DEFAULT_INDEX} (pip's default)"
    parts = [f"package index: {index}"]
    if site.extra_index_urls:
        parts.append("extra indexes: " + " ".join(redact(u) for u in site.extra_index_urls))
    if site.trusted_hosts:
        parts.append("trusted hosts: " + " ".join(site.trusted_hosts))
    parts.append(f"CA bundle: {site.ca_bundle or 'the base image’s'}")
    return "; ".join(parts) + f" (from {site.source or 'pip’s defaults'})"
