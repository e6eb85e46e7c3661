"""One configuration file, every key overridable by a `JPU_<KEY>` environment variable (SPEC O1).

Invalid configuration fails at start with the key and the reason (ConfigError).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, get_args

import msgspec
import yaml

DEFAULT_PATH = Path(__file__).with_name("default.yaml")


# SPEC R6: how R3 demotes a reserving job that is no longer rank 1 (jpu.policy.demotion)
DemotionMode = Literal["strict", "useful", "hysteresis", "damped", "yield"]
DEMOTION_MODES: tuple[str, ...] = get_args(DemotionMode)
ReservationBackfill = Literal["off", "limit"]  # SPEC R7
DEFAULT_DEMOTION_MARGIN = 0.1


class ConfigError(ValueError):
    """Configuration that cannot be used; the message names the key."""


class Tier(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    model: str
    vram_gb: int
    tflops: float
    sort_order: int
    max_gpus: int
    partition: str
    cpus_per_gpu: int = 1
    mem_gb_per_gpu: int = 1
    active: bool = True


class Node(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    gpus: dict[str, int]  # tier name -> GPU count; one node may hold several tiers


class UserConfig(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    max_active_jobs: int | None = None
    role: str = "user"


class LabConfig(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    usage: float = 0.0  # starting usage in TFLOP-s at time 0 / at load
    users: list[UserConfig] = []
    workspace_max_count: int | None = None  # X4a: this lab's quotas; None: the site's
    workspace_max_bytes: int | None = None


class Cluster(msgspec.Struct, frozen=True, kw_only=True):
    """The part shared by the services and the simulator."""

    tiers: list[Tier]
    nodes: list[Node]
    labs: list[LabConfig] = []
    # SPEC R6 (policy, so shared with the simulator): strict | useful | hysteresis | damped | yield
    reservation_demotion: DemotionMode = "strict"
    reservation_demotion_margin: float = DEFAULT_DEMOTION_MARGIN  # hysteresis: usage fraction
    reservation_backfill: ReservationBackfill = "off"  # SPEC R7: off | limit

    def tier(self, name: str) -> Tier:
        for t in self.tiers:
            if t.name == name:
                return t
        raise KeyError(name)


class Config(Cluster, frozen=True, kw_only=True):
    half_life_s: float = 7 * 24 * 3600.0
    cycle_s: float = 5.0
    min_cycle_gap_s: float = 0.2
    max_active_jobs: int = 3
    array_max_tasks: int = 1000  # Q7: tasks one array may have
    array_max_queued_per_user: int = 10_000  # Q7: a user's unfinished jobs an array may reach
    max_attempts: int = 3
    estimate_every_s: float = 15.0  # U4: the leading dispatcher's estimate cadence; 0: none
    estimate_horizon_s: float = 7 * 24 * 3600.0  # U4: no estimate further ahead (unknown)
    estimate_max_cycles: int = 400  # U4: simulated cycles per estimate (bounds its CPU)
    cancel_grace_s: float = 30.0
    kill_failed_after_s: float = 300.0
    backfill_settle_s: float = 60.0
    backfill_enabled: bool = True
    backfill_command: str = "python -m jpu.tools.backfill_stub"
    slurm_backend: str = "local"
    nats_url: str = "nats://127.0.0.1:4222"
    # SPEC SEC2: TLS to NATS where it crosses hosts (PEM paths; "": plain). The identity is
    # JPU_NATS_USER / JPU_NATS_PASSWORD (jpu.bus.auth), never in this file.
    nats_tls_ca: str = ""
    nats_tls_cert: str = ""
    nats_tls_key: str = ""
    database_url: str = "postgresql://postgres@127.0.0.1:5432/jpu"
    stream_name: str = "JPU"
    subject_prefix: str = "jpu"
    gateway_host: str = "127.0.0.1"
    gateway_port: int = 8080
    data_dir: str = ".jpu"
    snapshots: bool = True  # SPEC O6: services start from the newest snapshot of their fold
    snapshot_every_events: int = 10_000  # ... written every N events
    snapshot_every_s: float = 300.0  # ... or every T seconds when events arrived
    snapshot_keep: int = 3  # the newest K are kept in the object store
    snapshot_hourly: int = 24  # ... and the first of each of the last N hours,
    snapshot_daily: int = 31  # ... days
    snapshot_weekly: int = 52  # ... and weeks (jpu.bus.snapshots.retained)
    output_root: str = ""  # X2: <output_root>/<job_id>/<attempt>; "": <data_dir>/outputs
    outputs_keep_days: float = 0.0  # an ended job's outputs go this long after its end; 0: kept
    # SEC1: where a job's chdir may lie ("/x/*": strictly below /x); jpu.policy.workdir
    workdir_roots: list[str] = msgspec.field(
        default_factory=lambda: ["/home", "/srv", "/data", "/scratch", "/tmp/*"]
    )
    submit_rate_per_s: float = 2.0  # per-user token bucket at the gateway (429 RATE_LIMITED)
    submit_burst: int = 20
    isolation: str = "auto"  # X4: container | uid-netns | none (also auto, apptainer; isolation.py)
    container_runtime: str = "podman"  # X4a: podman | apptainer, for isolation: container
    container_image: str = "localhost/jpu-base:bookworm"  # the site's base image (podman)
    container_storage: str = ""  # where podman keeps images (its --root); "": podman's default
    container_shared_paths: list[str] = []  # host paths mounted read-only into every container
    # X4a: the package index for builds; "": the host's pip configuration (jpu.backends.pip_config)
    workspace_pip_index_url: str = ""
    workspace_pip_ca_bundle: str = ""  # a host CA file the build's pip trusts; "": the host's
    # X4a quotas of each lab: its workspaces (its members' and its own) and their images' bytes;
    # a lab's `workspace_max_count` / `workspace_max_bytes` (labs:) overrides them
    workspace_max_count: int = 20
    workspace_max_bytes: int = 50 * 2**30
    apptainer_image: str = ""  # SIF file or sandbox dir; set: Apptainer is configured
    apptainer_bin: str = "apptainer"
    apptainer_args: list[str] = []  # extra `apptainer exec` options, e.g. ["--nv"]
    # Q10 notifications (jpu_services.notifier, docs/notifications.md)
    console_url: str = ""  # the job links; "": http://<gateway_host>:<gateway_port>
    smtp_host: str = ""  # "": no e-mail is sent (each is recorded abandoned, with why)
    smtp_port: int = 25
    smtp_from: str = "jpu-share@localhost"
    smtp_user: str = ""  # with smtp_password: AUTH LOGIN after STARTTLS
    smtp_password: str = ""
    smtp_starttls: bool = False
    notify_retry_base_s: float = 1.0  # backoff while a receiver is down: base × 2^n ...
    notify_retry_max_s: float = 300.0  # ... at most this long between tries
    notify_max_attempts: int = 12  # then the notification is abandoned (logged, kept)
    # SEC4: CIDRs webhooks may reach though loopback/private/link-local (jpu.policy.outbound)
    webhook_allow_networks: list[str] = []
    # SEC5: a client address with this many failed authentications within the window gets 429
    auth_fail_limit: int = 20  # 0: no throttling
    auth_fail_window_s: float = 60.0
    # SPEC U6 (jpu.policy.sbatch): `-p NAME` aliases (NAME -> tiers; [] or ["*"]: any tier),
    # strict: refuse sbatch's site-bookkeeping options instead of warning; unknown partitions
    partition_aliases: dict[str, list[str]] = msgspec.field(default_factory=lambda: {"gpu": []})
    sbatch_compat: Literal["lenient", "strict"] = "lenient"
    sbatch_unknown_partition: Literal["warn", "refuse"] = "warn"


def _validate(cluster: Cluster) -> None:
    names = [t.name for t in cluster.tiers]
    if len(set(names)) != len(names):
        raise ConfigError("tiers: duplicate tier name")
    for i, t in enumerate(cluster.tiers):
        if t.tflops <= 0 or t.vram_gb <= 0 or t.max_gpus < 1:
            raise ConfigError(f"tiers[{i}] ({t.name}): tflops, vram_gb, max_gpus must be positive")
    for i, n in enumerate(cluster.nodes):
        for tier, count in n.gpus.items():
            if tier not in names:
                raise ConfigError(f"nodes[{i}].gpus: unknown tier {tier!r}")
            if count < 0:
                raise ConfigError(f"nodes[{i}].gpus.{tier}: negative GPU count")
    if len({n.name for n in cluster.nodes}) != len(cluster.nodes):
        raise ConfigError("nodes: duplicate node name")
    _validate_demotion(cluster)
    if isinstance(cluster, Config):
        _validate_isolation(cluster)
        _validate_snapshots(cluster)
        _validate_estimates(cluster)
        _validate_outbound(cluster)


def _validate_estimates(config: Config) -> None:
    if not config.estimate_every_s >= 0:  # also refuses NaN
        raise ConfigError("estimate_every_s: must be >= 0 (0 turns estimates off)")
    if not config.estimate_horizon_s > 0:
        raise ConfigError("estimate_horizon_s: must be positive")
    if config.estimate_max_cycles < 1:
        raise ConfigError("estimate_max_cycles: must be at least 1")
    if any(not r.startswith("/") for r in config.workdir_roots):  # SEC1
        raise ConfigError("workdir_roots: each must be an absolute path (/x, or /x/* for below)")


def _validate_outbound(config: Config) -> None:
    from jpu.policy.outbound import parse_networks  # pure; imported here to keep config light

    try:
        parse_networks(config.webhook_allow_networks)
    except ValueError as e:
        raise ConfigError(f"webhook_allow_networks: {e}") from e
    if config.auth_fail_limit < 0 or not config.auth_fail_window_s > 0:
        raise ConfigError("auth_fail_limit: must be >= 0; auth_fail_window_s: positive")


def _validate_demotion(cluster: Cluster) -> None:
    # the mode itself is checked by msgspec (a Literal): the error names the key
    if not 0.0 <= cluster.reservation_demotion_margin < 1.0:
        raise ConfigError("reservation_demotion_margin: must be in [0, 1)")


def _validate_snapshots(config: Config) -> None:
    if config.snapshot_every_events < 1:
        raise ConfigError("snapshot_every_events: must be at least 1")
    if config.snapshot_every_s <= 0:
        raise ConfigError("snapshot_every_s: must be positive")
    if config.snapshot_keep < 1:
        raise ConfigError("snapshot_keep: must be at least 1")
    if config.outputs_keep_days < 0:
        raise ConfigError("outputs_keep_days: must be >= 0 (0 keeps outputs forever)")
    for key in ("snapshot_hourly", "snapshot_daily", "snapshot_weekly"):
        if getattr(config, key) < 0:
            raise ConfigError(f"{key}: must not be negative")


def _validate_isolation(config: Config) -> None:
    modes = ("container", "uid-netns", "none", "auto", "apptainer")
    if config.isolation not in modes:
        raise ConfigError(f"isolation: {config.isolation!r} is not {' | '.join(modes)}")
    if config.container_runtime not in ("podman", "apptainer"):
        raise ConfigError(
            f"container_runtime: {config.container_runtime!r} is not podman | apptainer"
        )
    apptainer = config.isolation == "apptainer" or (
        config.isolation == "container" and config.container_runtime == "apptainer"
    )
    if apptainer and not config.apptainer_image:
        raise ConfigError("isolation: apptainer needs apptainer_image (a SIF file or sandbox)")
    if config.isolation == "container" and not config.container_image:
        raise ConfigError("container_image: required for isolation: container")
    for path in config.container_shared_paths:
        if not path.startswith("/") or "," in path or ":" in path:
            raise ConfigError(f"container_shared_paths: {path!r} is not an absolute path")


def _env_overrides(raw: dict[str, Any], env: Mapping[str, str], fields: set[str]) -> None:
    for key in fields:
        value = env.get(f"JPU_{key.upper()}")
        if value is None:
            continue
        try:
            raw[key] = yaml.safe_load(value)
        except yaml.YAMLError as e:
            raise ConfigError(f"JPU_{key.upper()}: not valid YAML/JSON: {e}") from e


def _convert(raw: dict[str, Any], kind: type[Cluster], source: str) -> Any:
    if raw.get("reservation_backfill") is False:  # R7: YAML 1.1 reads a bare `off` as false
        raw["reservation_backfill"] = "off"
    try:
        obj = msgspec.convert(raw, kind, strict=False)
    except msgspec.ValidationError as e:
        # msgspec names the key as `$.tiers[0].tflops`
        raise ConfigError(f"{source}: {e}") from e
    _validate(obj)
    return obj


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"{path}: {e}") from e
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: top level must be a mapping")
    return raw


def load_config(path: str | Path | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Load the config file (JPU_CONFIG or the default), then apply JPU_<KEY> overrides."""
    env = os.environ if env is None else env
    path = Path(path or env.get("JPU_CONFIG") or DEFAULT_PATH)
    raw = _read_yaml(DEFAULT_PATH)
    if path != DEFAULT_PATH:
        raw.update(_read_yaml(path))
    _env_overrides(raw, env, set(Config.__struct_fields__))
    config: Config = _convert(raw, Config, str(path))
    # Jobs run in other working directories: every path a service hands on must be absolute.
    return msgspec.structs.replace(config, data_dir=str(Path(config.data_dir).absolute()))


def load_cluster(path: str | Path) -> Cluster:
    """The cluster part only (tiers, nodes, labs), e.g. for the simulator."""
    raw = _read_yaml(Path(path))
    keep = {k: v for k, v in raw.items() if k in Cluster.__struct_fields__}
    return _convert(keep, Cluster, str(path))
