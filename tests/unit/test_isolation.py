"""SPEC X4 (and X3): the pure isolation builders both backends share — which isolation a mode
asks for, the `apptainer exec` argv, the environment it gets, the Slurm wrapper lines."""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path

import pytest

from jpu.backends import BackendError, make_backend, process
from jpu.backends.accounts import Account
from jpu.backends.isolation import (
    ENTER_WORKDIR,
    NONE,
    PODMAN,
    RUNTIME_PATH,
    SLURM_HELPER,
    Apptainer,
    Podman,
    container,
    job_argv,
    job_env,
    netns,
    podman,
    podman_argv,
    slurm_wrapper_line,
    wants,
)
from jpu.backends.podman_job import HelperConfig, allowed_image, container_of, run_argv
from jpu.backends.podman_job import main as podman_job_main
from jpu.backends.process import LOADER, launch_argv
from jpu.backends.slurm.jobs import comment_for, parse_comment
from jpu.backends.slurm.submit import wrapper
from jpu.backends.supervise import ARGV as SUPERVISOR
from jpu.config import ConfigError, load_config

IMAGE = Apptainer("/opt/images/vllm.sif", "apptainer", ("--nv",))
OUT = "/data/out/j1/2"
SUP = shlex.join(SUPERVISOR)  # U6/U7: the supervisor runs every job's script (supervise.py)


def test_X4_apptainer_runs_job_sh_contained_with_no_network() -> None:
    assert job_argv(container(IMAGE), OUT) == [
        "apptainer", "exec", "--containall", "--net", "--network", "none", "--no-eval",
        "--bind", OUT, "--pwd", OUT, "--nv", "/opt/images/vllm.sif",
        *SUPERVISOR, "/bin/bash", f"{OUT}/job.sh",
    ]  # fmt: skip
    assert job_argv(NONE, OUT) == job_argv(netns(["unshare", "--net", "--"]), OUT)
    assert job_argv(NONE, OUT) == [*SUPERVISOR, "/bin/bash", f"{OUT}/job.sh"]


def test_U5_apptainer_binds_the_chdir_once_and_starts_there() -> None:
    assert job_argv(container(IMAGE), OUT, "/home/alice/proj") == [
        "apptainer", "exec", "--containall", "--net", "--network", "none", "--no-eval",
        "--bind", OUT, "--bind", "/home/alice/proj", "--pwd", "/home/alice/proj", "--nv",
        "/opt/images/vllm.sif", *SUPERVISOR, "/bin/bash", f"{OUT}/job.sh",
    ]  # fmt: skip
    assert job_argv(container(IMAGE), OUT, OUT) == job_argv(container(IMAGE), OUT)
    assert job_argv(NONE, OUT, "/home/alice/proj") == [*SUPERVISOR, "/bin/bash", f"{OUT}/job.sh"]


def test_X4_modes_choose_apptainer_when_configured_never_silently_weaker() -> None:
    assert wants("auto", None) == "netns"
    assert wants("auto", IMAGE) == "apptainer"  # configured: Apptainer
    assert wants("apptainer", IMAGE) == "apptainer"
    assert wants("none", IMAGE) == "none"
    with pytest.raises(BackendError, match="apptainer_image"):
        wants("apptainer", None)
    with pytest.raises(BackendError, match="not one of"):
        wants("docker", IMAGE)


def test_X4_apptainer_env_carries_every_job_variable_prefixed_and_none_raw() -> None:
    env = {
        "PATH": "/home/alice/bin:/usr/bin", "HOME": OUT, "USER": "jpu-alice", "LANG": "C.UTF-8",
        "JOB_ATTEMPT": "2", "JOB_OUTPUT_DIR": OUT, "CUDA_VISIBLE_DEVICES": "0,1",
        "MY_VAR": "x,y $(touch /tmp/pwned)", "LD_PRELOAD": "/tmp/evil.so",
    }  # fmt: skip
    outside = job_env(container(IMAGE), env)
    # --containall = --cleanenv: the job's variables reach the container only prefixed
    assert outside["APPTAINERENV_JOB_ATTEMPT"] == "2"
    assert outside["APPTAINERENV_CUDA_VISIBLE_DEVICES"] == "0,1"
    assert outside["APPTAINERENV_MY_VAR"] == "x,y $(touch /tmp/pwned)"  # verbatim (--no-eval)
    assert outside["APPTAINERENV_PATH"] == "/home/alice/bin:/usr/bin"  # the user's PATH inside
    assert "APPTAINERENV_HOME" not in outside  # apptainer refuses it; it sets HOME itself
    # apptainer itself runs with our PATH and none of the user's variables
    assert outside["PATH"] == RUNTIME_PATH
    assert "LD_PRELOAD" not in outside and "MY_VAR" not in outside
    assert outside["JOB_OUTPUT_DIR"] == OUT  # the Slurm wrapper's own variable
    assert job_env(NONE, env) == env  # without a container: as is


def test_X3_X4_slurm_wrapper_quotes_operator_words_and_forwards_slurm_gpus() -> None:
    image = Apptainer("/opt/my images/a'b.sif", "/usr/local/bin/apptainer", ("--bind", "/x y"))
    text = slurm_wrapper_line(container(image))
    lines = [*text.split("\nexec ", 1)[0].splitlines(), _exec_line(text)]
    assert lines[0] == (
        'if [ -n "${CUDA_VISIBLE_DEVICES+x}" ]; then '
        'export APPTAINERENV_CUDA_VISIBLE_DEVICES="$CUDA_VISIBLE_DEVICES"; fi'
    )
    words = shlex.split(lines[-1])
    assert words == [
        "exec",
        "/usr/local/bin/apptainer",
        "exec",
        "--containall",
        "--net",
        "--network",
        "none",
        "--no-eval",
        "--bind",
        "$JOB_OUTPUT_DIR",
        "$@",
        "--pwd",
        "$JPU_WORKDIR",
        "--bind",
        "/x y",
        "/opt/my images/a'b.sif",
        *SUPERVISOR,
        "/bin/bash",
        "$JOB_OUTPUT_DIR/job.sh",
    ]  # fmt: skip  ("$@": `--bind $JPU_WORKDIR` when the job's chdir is not OUT, SPEC U5)
    assert '"$JOB_OUTPUT_DIR/job.sh"' in lines[-1]  # expanded by the wrapper, as one word
    # without Apptainer the wrapper is the one it always was
    prefix = netns(["unshare", "--user", "--map-current-user", "--net", "--"])
    assert _exec_line(wrapper(prefix).decode()) == (
        f'exec unshare --user --map-current-user --net -- {SUP} /bin/bash "$JOB_OUTPUT_DIR/job.sh"'
    )
    assert _exec_line(wrapper(NONE).decode()) == f'exec {SUP} /bin/bash "$JOB_OUTPUT_DIR/job.sh"'


def _exec_line(wrapper_text: str) -> str:
    """The wrapper's last command (the supervisor's quoted text spans lines)."""
    return "exec " + wrapper_text.split("\nexec ", 1)[1].rstrip("\n")


def test_X4_local_chain_drops_to_the_user_before_apptainer() -> None:
    root = Account("root", 0, 0, "/root")
    alice = Account("jpu-alice", 999, 995, "/nonexistent")
    argv = launch_argv(Path("/st/status"), Path(OUT), alice, root, container(IMAGE))
    setpriv = next(i for i, w in enumerate(argv) if w.endswith("setpriv"))
    assert argv[setpriv + 1 : setpriv + 3] == ["--reuid=999", "--regid=995"]
    loader = argv[setpriv + 6 : setpriv + 11]  # the user's env is loaded after the drop
    assert loader[1:] == ["-c", LOADER, "jpu-env", f"{OUT}/.jpu-env"]
    assert argv[setpriv + 11 :] == job_argv(container(IMAGE), OUT)  # apptainer runs as alice
    assert argv[0].startswith("/") and argv[1:3] == ["-p", "-c"]  # bash -p: no BASH_ENV as root


def test_X4_isolation_is_configured_in_the_config_file(tmp_path: Path) -> None:
    assert load_config(env={}).isolation == "auto"
    c = load_config(env={"JPU_APPTAINER_IMAGE": "/opt/x.sif", "JPU_APPTAINER_ARGS": '["--nv"]'})
    assert (c.apptainer_image, c.apptainer_bin, c.apptainer_args) == (
        "/opt/x.sif", "apptainer", ["--nv"],
    )  # fmt: skip
    with pytest.raises(ConfigError, match="isolation"):
        load_config(env={"JPU_ISOLATION": "docker"})
    with pytest.raises(ConfigError, match="apptainer_image"):
        load_config(env={"JPU_ISOLATION": "apptainer"})
    # configured but unusable: a clear error when the agent builds its backend
    bad = load_config(
        env={"JPU_APPTAINER_IMAGE": str(tmp_path / "missing.sif"), "JPU_DATA_DIR": str(tmp_path)}
    )
    with pytest.raises(BackendError, match="apptainer"):
        make_backend(bad, env={})


POD = Podman(
    "localhost/ws:1", "podman", "/srv/images", ("/datasets",), ("--device", "nvidia.com/gpu=0")
)


def test_X4a_container_modes_ask_for_their_runtime() -> None:
    assert wants("container", None) == "podman"  # the default runtime
    assert wants("container", IMAGE, "apptainer") == "apptainer"
    assert wants("uid-netns", IMAGE) == "netns" and wants("none", None) == "none"
    with pytest.raises(BackendError, match="container_runtime"):
        wants("container", None, "docker")
    with pytest.raises(BackendError, match="apptainer_image"):
        wants("container", None, "apptainer")


def test_X4a_podman_run_has_no_network_the_users_uid_and_only_its_dirs_writable() -> None:
    argv = podman_argv(POD, "jpu-local-j1-2", 1001, 1002, OUT, "/home/alice/proj", ["job"], 29.5)
    assert argv[:4] == ["podman", "--root", "/srv/images", "run"]
    flags = argv[4 : argv.index("localhost/ws:1")]
    for flag in ("--network=none", "--read-only", "--init", "--pid=private", "--cap-drop=all"):
        assert flag in flags
    assert flags[flags.index("--user") + 1] == "1001:1002"
    assert flags[flags.index("--name") + 1] == "jpu-local-j1-2"
    assert flags[flags.index("--stop-timeout") + 1] == "30"  # the grace, whole seconds up
    volumes = [flags[i + 1] for i, f in enumerate(flags) if f == "--volume"]
    assert volumes == [f"{OUT}:{OUT}:rw", "/home/alice/proj:/home/alice/proj:rw",
                       "/datasets:/datasets:ro"]  # fmt: skip
    assert flags[flags.index("--workdir") + 1] == "/home/alice/proj"
    assert flags[-2:] == ["--device", "nvidia.com/gpu=0"]  # the site's CDI devices
    assert argv[-1] == "job"


def test_X4a_podman_launch_loads_the_env_inside_as_the_user() -> None:
    alice = Account("jpu-alice", 999, 995, "/nonexistent")
    root = Account("root", 0, 0, "/root")
    argv = launch_argv(Path("/s/st"), Path(OUT), alice, root, podman(POD), container="jpu-x")
    assert argv[1:6] == ["-p", "-c", process.WRAPPER, "jpu-job", "/s/st"]
    assert "setpriv" not in " ".join(argv)  # podman's --user is the drop
    inner = argv[argv.index("localhost/ws:1") + 1 :]
    assert inner == ["/bin/bash", "-c", LOADER, "jpu-env", f"{OUT}/.jpu-env",
                     *SUPERVISOR, "/bin/bash", f"{OUT}/job.sh"]  # fmt: skip


def test_X4a_container_isolation_is_configured_in_the_config_file() -> None:
    c = load_config(env={"JPU_ISOLATION": "container"})
    assert (c.container_runtime, c.container_image) == ("podman", "localhost/jpu-base:bookworm")
    with pytest.raises(ConfigError, match="container_runtime"):
        load_config(env={"JPU_ISOLATION": "container", "JPU_CONTAINER_RUNTIME": "docker"})
    with pytest.raises(ConfigError, match="apptainer_image"):
        load_config(env={"JPU_ISOLATION": "container", "JPU_CONTAINER_RUNTIME": "apptainer"})
    with pytest.raises(ConfigError, match="container_shared_paths"):
        load_config(env={"JPU_CONTAINER_SHARED_PATHS": '["data:/x"]'})


def test_X4a_slurm_wrapper_runs_the_job_through_the_nodes_podman_helper() -> None:
    lines = wrapper(podman(POD)).decode().splitlines()
    assert lines[2:4] == ENTER_WORKDIR.splitlines()  # entered as the user first (U5)
    # the step's environment goes to the job through OUT/.jpu-env (0600), never to root's podman
    assert lines[-2] == (
        'umask 077; env -0 -u _ -u SHLVL -u OLDPWD > "$JOB_OUTPUT_DIR/.jpu-env" || exit 126'
    )
    words = shlex.split(lines[-1])
    assert words == ["exec", "sudo", "-n", "--", SLURM_HELPER, "run", "$SLURM_JOB_ID",
                     "$JOB_OUTPUT_DIR", "$JPU_WORKDIR", "localhost/ws:1"]  # fmt: skip
    assert comment_for(PODMAN, 90.0).startswith("jpu isolation=container:podman ")
    assert parse_comment(comment_for(PODMAN, 90.0)) == (PODMAN, 90.0)


def test_X4a_the_slurm_helper_runs_the_same_podman_argv_as_the_local_backend() -> None:
    config = HelperConfig(POD, 29.5)
    argv = run_argv(config, 1001, 1002, "77", OUT, "/home/alice/proj", "localhost/jpu-ws-a-b:1")
    inner = [
        "/bin/bash",
        "-c",
        LOADER,
        "jpu-env",
        f"{OUT}/.jpu-env",
        *SUPERVISOR,
        "/bin/bash",
        f"{OUT}/job.sh",
    ]
    same = podman_argv(
        dataclasses.replace(POD, image="localhost/jpu-ws-a-b:1"), "jpu-slurm-77", 1001, 1002,
        OUT, "/home/alice/proj", inner, 29.5, {"jpu.slurm-job": "77"},
    )  # fmt: skip
    assert argv == same
    assert allowed_image(config, "localhost/ws:1")  # the configured base image
    assert allowed_image(config, "localhost/jpu-ws-alice-six:latest")  # a workspace's
    assert not allowed_image(config, "docker.io/library/debian")
    assert not allowed_image(config, "localhost/jpu-ws-x/../evil")
    with pytest.raises(ValueError, match="Slurm job id"):
        container_of("1; rm -rf /")


def test_X4a_the_slurm_helper_takes_its_podman_settings_only_from_roots_config() -> None:
    """Through sudo the caller gives `run …` only (the sudoers rule): a `--config` after it,
    or any podman option, is refused before anything runs."""
    for argv in (
        ["run", "1", OUT, OUT, "localhost/ws:1", "--config", "/tmp/mine.json"],
        ["run", "--config=/tmp/mine.json", "1", OUT, OUT, "localhost/ws:1"],
        ["run", "1", OUT, OUT, "localhost/ws:1", "--privileged"],
    ):
        with pytest.raises(SystemExit) as exited:
            podman_job_main(argv)
        assert exited.value.code == 2
