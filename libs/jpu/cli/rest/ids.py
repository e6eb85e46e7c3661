"""Job ids on the command line (SPEC U8): each checked and ranges expanded by the one parser
(jpu.domain.jobids); the API resolves prefixes and tasks (`PREFIX_K`)."""

from __future__ import annotations

from collections.abc import Iterable

from jpu.cli.rest.client import RestError
from jpu.domain import jobids


def expand_ids(texts: Iterable[str], *, ranges: bool) -> list[str]:
    """`ID`, `ID_K` as given; `ID_[2-4,7]` (with `ranges`: cancel, hold, release) → one id per
    task. RestError says what is accepted."""
    out: list[str] = []
    for text in texts:
        try:
            out += jobids.parse(text, ranges=ranges).ids()
        except ValueError as e:
            raise RestError(str(e)) from e
    return out


def one_id(text: str) -> str:
    """One job (show, events, logs, files): `ID` or `ID_K`, any unique prefix of the ID."""
    (job_id,) = expand_ids([text], ranges=False)
    return job_id
