"""SPEC U5, X4: may the job's Unix account enter and write its `chdir`? The pure rule
(jpu.policy.workdir.access) on stat's answers; the account the backend maps a user to
(AccountMap.expected, never creating it); `jpu show` naming it. Live: test_api_logs."""

from __future__ import annotations

import os
import pwd
import stat

import pytest

from jpu.backends.accounts import AccountMap
from jpu.cli.rest import views as rest_views
from jpu.policy.workdir import DirMode, RunAs, access

D = stat.S_IFDIR
ROOT = DirMode("/", D | 0o755, 0, 0)
ALICE = RunAs("jpu-bcg-alice", 993, frozenset({992, 50}))


def chain(mode: int, uid: int = 1000, gid: int = 1000, acl: bool = False) -> list[DirMode]:
    return [ROOT, DirMode("/home", D | 0o755, 0, 0), DirMode("/home/u/p", D | mode, uid, gid, acl)]


@pytest.mark.parametrize(
    ("mode", "uid", "gid", "enter", "write"),
    [
        (0o755, 1000, 1000, True, False),  # someone else's project: it runs, its writes are lost
        (0o700, 1000, 1000, False, False),  # cannot even get in
        (0o711, 1000, 1000, True, False),
        (0o777, 1000, 1000, True, True),
        (0o1777, 1000, 1000, True, True),  # like /tmp
        (0o700, 993, 1000, True, True),  # its own
        (0o570, 993, 1000, True, False),  # its own, owner bits decide (not write)
        (0o770, 1000, 50, True, True),  # a group it is in
        (0o750, 1000, 50, True, False),
    ],
)
def test_U5_access_by_the_mode_bits(
    mode: int, uid: int, gid: int, enter: bool, write: bool
) -> None:
    got = access(chain(mode, uid, gid), ALICE)
    assert got is not None and (got.enter, got.write) == (enter, write)
    assert (got.message == "") is write
    if not write:
        assert "jpu-bcg-alice" in got.message and "/home/u/p" in got.message
        assert f"setfacl -m u:jpu-bcg-alice:{'rwx' if enter else 'x'} /home/u/p" in got.message
        assert "package acl" in got.message  # where setfacl comes from
        assert ("chmod o+x" if not enter else "chown jpu-bcg-alice /home/u/p") in got.message


def test_U5_a_parent_it_cannot_enter_is_named() -> None:
    way = [ROOT, DirMode("/root", D | 0o700, 0, 0), DirMode("/root/p", D | 0o777, 0, 0)]
    got = access(way, ALICE)
    assert got is not None and not got.enter
    assert "cannot enter /root (mode 0700, owner uid 0, group gid 0)" in got.message


def test_U5_a_new_account_owns_nothing_and_is_in_no_group() -> None:
    new = RunAs("jpu-new", None, frozenset())
    assert access(chain(0o770, 1000, 1000), new).enter is False  # type: ignore[union-attr]
    assert access(chain(0o777), new).write is True  # type: ignore[union-attr]


def test_U5_what_the_mode_bits_cannot_decide_is_left_to_the_node() -> None:
    assert access(chain(0o700, acl=True), ALICE) is None  # an ACL may grant it
    assert access(chain(0o700), RunAs("root", 0, frozenset({0}))) is None
    assert access([], ALICE) is None
    not_dir = [ROOT, DirMode("/f", stat.S_IFREG | 0o777, 0, 0)]
    assert "/f is not a directory" in access(not_dir, ALICE).message  # type: ignore[union-attr]


def test_X4_expected_account_is_the_mapping_without_creating_it() -> None:
    m = AccountMap("jpu-{user}", create=True)
    if os.getuid() != 0:  # an agent that is not root runs every job as itself
        assert m.expected("bcg-alice").name == pwd.getpwuid(os.getuid()).pw_name
        return
    missing = "zz-no-such-user-x"
    got = m.expected(missing)
    assert got == RunAs(f"jpu-{missing}", None, frozenset())  # created only at its first job
    with pytest.raises(KeyError):
        pwd.getpwnam(f"jpu-{missing}")
    nobody = pwd.getpwnam("nobody")
    assert AccountMap("jpu-{user}", create=False).expected(missing).uid == nobody.pw_uid
    assert AccountMap("{user}", create=False).expected("root").name == "nobody"  # never root


def test_X4_jpu_show_names_the_account() -> None:
    job = {"id": "j1", "state": "RUNNING", "attempt": 1, "attempts": [], "account": "jpu-bcg-bob"}
    assert "Account: jpu-bcg-bob" in rest_views.job(job)
