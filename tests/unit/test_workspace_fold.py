"""SPEC X4a, decided in jpu.domain.workspaces: the fold of a workspace's events, who may read,
use and manage it, the lab's quota, and whether a job may name it."""

from __future__ import annotations

from jpu.commands import CommandReply, SubmitCommand
from jpu.config import Cluster, load_config
from jpu.domain import codec
from jpu.domain.cluster import ClusterState, evolve
from jpu.domain.submission import checked, with_workspace
from jpu.domain.workspaces import (
    can_manage,
    can_read,
    containerfile_problem,
    default_problem,
    fold,
    quota_problem,
    usable_problem,
    with_default,
    workspace_id,
)
from jpu.events import (
    Delivered,
    Event,
    WorkspaceBuildFailed,
    WorkspaceBuildRequested,
    WorkspaceBuilt,
    WorkspaceDefaultChanged,
    WorkspaceDeleted,
)

WID = workspace_id("user", "BCG", "alice", "six")


def _req(build: int = 1, ts: float = 10.0, scope: str = "user") -> WorkspaceBuildRequested:
    return WorkspaceBuildRequested(
        event_id=f"r{build}", ts=ts, workspace_id=WID, build=build, user="alice", lab="BCG",
        name="six", scope=scope, source_kind="requirements", source="six\n",  # type: ignore[arg-type]
    )  # fmt: skip


def _built(build: int = 1, size: int = 100) -> WorkspaceBuilt:
    return WorkspaceBuilt(
        event_id=f"b{build}", ts=20.0, workspace_id=WID, build=build,
        image=f"localhost/jpu-ws-{WID}-b{build}:latest", size=size, created_at=19.0, log="ok",
    )  # fmt: skip


def _failed(build: int = 1) -> WorkspaceBuildFailed:
    return WorkspaceBuildFailed(
        event_id=f"f{build}", ts=20.0, workspace_id=WID, build=build, reason="the builder died"
    )


def _seq(*events: Event) -> list[tuple[int, Event]]:
    return list(enumerate(events, start=1))


def test_X4a_building_then_ready_with_image_size_and_created_at() -> None:
    assert fold(_seq(_req())).state == "BUILDING"  # type: ignore[union-attr]
    ws = fold(_seq(_req(), _built()))
    assert ws is not None and ws.state == "READY" and ws.size == 100 and ws.created_at == 19.0
    assert ws.image and ws.image.endswith("-b1:latest") and ws.last_seq == 2


def test_X4a_failed_keeps_its_reason_and_log() -> None:
    ws = fold(_seq(_req(), _failed()))
    assert ws is not None and ws.state == "FAILED" and ws.reason == "the builder died"


def test_X4a_a_late_outcome_of_an_earlier_build_never_changes_a_rebuild() -> None:
    ws = fold(_seq(_req(1), _built(1), _req(2, ts=30.0), _failed(1)))
    assert ws is not None and ws.state == "BUILDING" and ws.build == 2


def test_X4a_deleted_is_gone_and_its_late_outcome_does_not_revive_it() -> None:
    deleted = WorkspaceDeleted(event_id="d", ts=25.0, workspace_id=WID, by="alice")
    assert fold(_seq(_req(), deleted, _built())) is None


def test_X4a_a_job_names_only_a_READY_workspace_it_may_use() -> None:
    ready = fold(_seq(_req(), _built()))
    assert usable_problem(ready, "six", "alice", "BCG") is None
    assert "BUILDING" in (usable_problem(fold(_seq(_req())), "six", "alice", "BCG") or "")
    assert "FAILED" in (usable_problem(fold(_seq(_req(), _failed())), "six", "alice", "BCG") or "")
    assert usable_problem(None, "six", "alice", "BCG") is not None
    assert usable_problem(ready, "six", "bob", "BCG") is not None  # another user's own


def test_X4a_a_labs_workspace_is_read_by_its_members_managed_by_lab_admins() -> None:
    lab = fold(_seq(_req(scope="lab"), _built()))
    assert lab is not None
    assert can_read(lab, "bob", "BCG", "user") and not can_read(lab, "carol", "KDG", "user")
    assert usable_problem(lab, "six", "bob", "BCG") is None
    assert not can_manage("lab", "bob", "BCG", "bob", "BCG", "user")
    assert can_manage("lab", "bob", "BCG", "dora", "BCG", "lab_admin")
    assert not can_manage("lab", "bob", "BCG", "kim", "KDG", "lab_admin")
    own = fold(_seq(_req(), _built()))
    assert own is not None and not can_read(own, "carol", "KDG", "user")
    assert can_manage("user", "alice", "BCG", "alice", "BCG", "user")
    assert not can_manage("user", "alice", "BCG", "bob", "BCG", "user")


def test_X4a_lab_quota_count_and_size_name_their_field() -> None:
    one = fold(_seq(_req(), _built(size=600)))
    assert one is not None
    assert quota_problem([one], None, 1, None) == (
        "workspace_max_count", "the lab has 1 workspaces of 1"
    )  # fmt: skip
    assert quota_problem([one], WID, 1, None) is None  # a rebuild is not one more
    problem = quota_problem([one], None, None, 500)
    assert problem is not None and problem[0] == "workspace_max_bytes"
    assert quota_problem([one], None, 5, 1000) is None


def test_E1_X4a_job_submitted_v3_carries_the_workspace_and_v2_still_decodes() -> None:
    import msgspec

    from jpu.domain.states import request_digest
    from jpu.events import JobSubmitted, decode, encode

    kw = {"event_id": "e", "ts": 1.0, "job_id": "j", "lab": "L", "user": "u", "name": "n",
          "command": "c", "num_gpus": 1, "chdir": "/p"}  # fmt: skip
    event = JobSubmitted(**kw, workspace="six", workspace_image="localhost/x:latest")  # type: ignore[arg-type]
    assert event.schema_version >= 3 and decode(encode(event)) == event  # v3 and after
    old = decode(msgspec.json.encode({"type": "JobSubmitted", "schema_version": 2, **kw}))
    assert isinstance(old, JobSubmitted) and old.workspace is None and old.workspace_image is None
    # Q6: a v2 body's digest is unchanged; another workspace is another body
    assert request_digest(old) == request_digest(JobSubmitted(**kw))  # type: ignore[arg-type]
    assert request_digest(event) != request_digest(old)


def _folded(*events: Event) -> ClusterState:
    state = ClusterState.new(Cluster(tiers=[], nodes=[]))
    for seq, event in enumerate(events, 1):
        evolve(state, Delivered(seq=seq, subject="", event=event, headers={}))
    return state


def _cmd(body: dict[str, object], user: str = "alice", lab: str = "BCG") -> SubmitCommand:
    return SubmitCommand(user=user, lab=lab, body={"command": "true", "num_gpus": 1, **body})


def test_X4a_intake_decides_the_workspace_on_its_fold_of_the_log() -> None:
    """The workspace a job runs in is decided by intake on its own fold (never a projection
    that may lag the log): the one it names, else the user's default; READY, the user's to
    use, else a 422 naming `workspace` and nothing appended."""
    building = _folded(_req())
    cmd, image, refusal = with_workspace(_cmd({"workspace": "six"}), building)
    assert image is None and refusal is not None and refusal.error is not None
    assert (refusal.status, refusal.error.code) == (422, "VALIDATION_ERROR")
    assert refusal.error.message == "workspace 'six' is BUILDING, not READY"
    assert refusal.error.details == {"field": "workspace"}
    ready = _folded(_req(), _built())
    cmd, image, refusal = with_workspace(_cmd({"workspace": "six"}), ready)
    assert refusal is None and image == f"localhost/jpu-ws-{WID}-b1:latest"
    # another user of the lab may not use alice's own workspace
    _, image, refusal = with_workspace(_cmd({"workspace": "six"}, user="bob"), ready)
    assert image is None and refusal is not None and refusal.error is not None
    assert refusal.error.message == "workspace: no workspace 'six' for bob"
    # no workspace named: the user's default, as its last WorkspaceDefaultChanged says
    default = WorkspaceDefaultChanged(event_id="d", ts=30.0, user="alice", workspace="six")
    state = _folded(_req(), _built(), default)
    cmd, image, refusal = with_workspace(_cmd({}), state)
    assert refusal is None and cmd.body["workspace"] == "six" and image is not None
    cleared = _folded(_req(), _built(), default, WorkspaceDefaultChanged(
        event_id="c", ts=31.0, user="alice", workspace=None))  # fmt: skip
    cmd, image, refusal = with_workspace(_cmd({}), cleared)
    assert (refusal, image, "workspace" in cmd.body) == (None, None, False)
    deleted = _folded(_req(), _built(), WorkspaceDeleted(
        event_id="x", ts=40.0, workspace_id=WID, by="alice"))  # fmt: skip
    _, image, refusal = with_workspace(_cmd({"workspace": "six"}), deleted)
    assert image is None and refusal is not None
    # a malformed name is Q1's to refuse, in its words, naming the field
    bad, image, refusal = with_workspace(_cmd({"workspace": "Not A Name"}), ready)
    assert (image, refusal) == (None, None)
    tiers = {t.name: t for t in load_config(env={}).tiers}
    reply = checked(bad, tiers)
    assert isinstance(reply, CommandReply) and reply.error is not None
    assert reply.error.details["field"] == "workspace"


def test_O6_X4a_a_snapshot_keeps_the_workspaces_and_defaults_the_fold_holds() -> None:
    default = WorkspaceDefaultChanged(event_id="d", ts=30.0, user="alice", workspace="six")
    state = _folded(_req(), _built(), default)
    assert state.workspaces[WID].log == "" and state.workspaces[WID].source == ""  # kept lean
    _, restored = codec.unpack(codec.pack(state, "JPU", 0.0), Cluster(tiers=[], nodes=[]))
    assert restored.workspaces == state.workspaces
    assert restored.default_workspace == {"alice": "six"}


BASE = "localhost/jpu-base:bookworm"


def test_X4a_a_containerfile_builds_one_stage_on_the_configured_base_image() -> None:
    ok = f"# comment\nFROM {BASE}\nENV A=1\nRUN python3 -m venv /opt/venv \\\n && true\n"
    assert containerfile_problem(ok, BASE) is None
    refusals = {
        "FROM docker.io/library/debian\n": "only the platform's base image",
        f"FROM {BASE} AS build\n": "only the platform's base image",
        "RUN true\n": f"first instruction must be `FROM {BASE}`",
        f"FROM {BASE}\nFROM {BASE}\n": "one stage only",
        f"FROM {BASE}\nCOPY . /src\n": "COPY needs a build context",
        f"FROM {BASE}\nADD https://example.org/x /x\n": "ADD needs a build context",
        f"FROM {BASE}\nRUN --mount=type=bind,source=/,target=/h ls\n": "options are not accepted",
        f"# escape=`\nFROM {BASE}\n": "parser directives",
        "": "a non-empty Containerfile text",
        f"FROM {BASE}\n!!\n": "not an instruction",
    }
    for text, why in refusals.items():
        problem = containerfile_problem(text, BASE)
        assert problem is not None and why in problem, (text, problem)


def test_X4a_a_users_default_workspace_applies_only_when_a_job_names_none() -> None:
    assert with_default({"command": "c"}, "six") == {"command": "c", "workspace": "six"}
    assert with_default({"workspace": None}, "six") == {"workspace": "six"}  # null is absent
    assert with_default({"workspace": "torch"}, "six") == {"workspace": "torch"}
    assert with_default({"command": "c"}, None) == {"command": "c"}
    building = fold(_seq(_req()))
    assert default_problem(building, "six", "alice", "BCG") is None  # may still be building
    assert default_problem(None, "six", "alice", "BCG") == "no workspace 'six' for alice"
    assert default_problem(building, "six", "bob", "BCG") == "no workspace 'six' for bob"
