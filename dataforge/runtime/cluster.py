"""Starting or joining Ray, and checking that every node sees the run's paths.

Joining a cluster: the address comes from ``--address``, ``ray.address`` or
``RAY_ADDRESS``. Ray 2.60 turns token authentication on for a ``ray start`` cluster
whenever a token exists on that machine (``~/.ray/auth_token``, made by any earlier
``ray.init``), but ``ray.init(address=...)`` only uses a token when ``RAY_AUTH_MODE=token``
is set, so a plain client retries with ``InvalidAuthToken`` and gives up. The client must
be in the cluster's mode either way: the raylets of a cluster without authentication
cannot call back into a token-mode driver (its actors die before they start). So, unless
``RAY_AUTH_MODE`` is set, we ask the cluster's GCS (one unauthenticated ``GetClusterId``
call: refused means token mode) and take the token where Ray's CLI does
(``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH``, ``~/.ray/auth_token``); without an answer
(``auto``), Ray's own rule for local clusters applies: token mode if a token exists.

Path check: nodes that share no filesystem with the driver would read nothing or write
their parts where the driver never looks. Before any work, one zero-CPU task per alive
node stats every input file (same size as the driver saw), reads a probe file the driver
wrote under ``OUT/_work`` and writes its own beside it, and runs each stage's
``validate()`` (models, tokenizers, ``against:``). Any problem fails the run at once with
the node and the path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

from dataforge.config import PipelineConfig
from dataforge.io import fs
from dataforge.io.readers import InputTask
from dataforge.runtime.failures import RunFailed
from dataforge.runtime.segments import make_op

__all__ = [
    "ClusterError",
    "auth_token_available",
    "check_nodes_see_paths",
    "cluster_wants_token",
    "connect",
    "embedded_cpus",
    "node_path_problems",
    "resolve_address",
    "resolve_run_paths",
    "stop_embedded_ray",
]

_CHECK_TIMEOUT_S = 120
_PROBE_TIMEOUT_S = 10
_PROBE = ".node-probe"
# Where Ray unpacks a job's --working-dir (the job's driver runs there).
_RAY_WORKING_DIR = "/runtime_resources/working_dir_files/"


class ClusterError(RunFailed):
    """The cluster cannot be joined, or a node cannot see a path of the run."""


def resolve_address(config: PipelineConfig, address: str | None) -> str | None:
    """The cluster to join: ``--address``, else ``ray.address``, else ``RAY_ADDRESS``."""
    return address or config.ray.address or os.environ.get("RAY_ADDRESS") or None


def resolve_run_paths(config: PipelineConfig, out: str | Path) -> tuple[PipelineConfig, str | Path]:
    """Make the run's paths absolute on the driver, before any task ships.

    Every path of a pipeline (inputs, models, tokenizers, ``against:``) resolves against
    ``config.base_dir``, so making that and ``out`` absolute is enough: workers have
    other working directories. (Paths are not rewritten in the config itself, whose hash
    decides resume.)

    Raises:
        ClusterError: ``out`` lies inside the working directory that ``ray job submit
            --working-dir`` uploaded, which Ray deletes with the job's environment.
    """
    base = os.path.abspath(Path(config.base_dir).expanduser())
    if fs.is_uri(out):  # s3://...: already absolute (Path() would fold its "//")
        return dataclasses.replace(config, base_dir=base), str(out)
    out = Path(os.path.abspath(Path(out).expanduser()))
    uploaded = Path.cwd()
    if _RAY_WORKING_DIR in str(uploaded) and out.is_relative_to(uploaded):
        raise ClusterError(
            f"output {out} is inside the copy of --working-dir that Ray made for this job and "
            "deletes later; give an absolute -o on storage every node shares"
        )
    return dataclasses.replace(config, base_dir=base), out


def auth_token_available() -> bool:
    """Whether this machine holds a Ray auth token, in Ray's own lookup order."""
    if os.environ.get("RAY_AUTH_TOKEN", "").strip():
        return True
    token_path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if token_path:
        return Path(token_path).expanduser().is_file()
    return (Path.home() / ".ray" / "auth_token").is_file()


def connect(config: PipelineConfig, address: str | None, verbose: bool = False) -> str:
    """Join the cluster (see :func:`resolve_address`) or start embedded local Ray.
    Returns a description for the log. Ray's own info lines show with ``verbose`` only
    (they stay in Ray's session logs).

    Raises:
        ClusterError: the cluster at the address cannot be joined (the message says why,
            with the authentication settings in force).
    """
    import ray  # deferred: a run that never starts Ray never imports it (~0.2 s)

    if ray.is_initialized():
        return "already initialized Ray"
    address = resolve_address(config, address)
    level = logging.INFO if verbose else logging.WARNING
    if address:
        env = {"env_vars": {"PYTHONHASHSEED": "0"}}
        if "RAY_AUTH_MODE" not in os.environ:
            _match_auth_mode(address)
        try:
            ray.init(address=address, runtime_env=env, log_to_driver=True, logging_level=level)
        except (ConnectionError, RuntimeError, ray.exceptions.RayError) as exc:
            mode = os.environ.get("RAY_AUTH_MODE", "disabled")
            raise ClusterError(
                f"cannot join the Ray cluster at {address}: {exc} (RAY_AUTH_MODE={mode}; a "
                "cluster with token authentication needs its token here: RAY_AUTH_TOKEN, "
                "RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token, as `ray get-auth-token` prints it)"
            ) from exc
        nodes = [n for n in ray.nodes() if n["Alive"]]
        return f"Ray cluster at {address} ({len(nodes)} nodes, {_cpus()} CPUs)"
    # The workers of an embedded node inherit the raylet's environment, which is this
    # process's at ray.init: a job-level runtime_env would instead make Ray start new
    # workers for the job rather than use the ones it prestarts (~0.6 s and ~1 CPU-second
    # more per run on 2 cores).
    previous = os.environ.get("PYTHONHASHSEED")
    os.environ["PYTHONHASHSEED"] = "0"
    try:
        with _lean_node():
            ray.init(
                # "local": without it ray.init() joins any cluster already running here.
                address="local",
                logging_level=level,
                num_cpus=embedded_cpus(config),
                object_store_memory=config.ray.object_store_memory,
                include_dashboard=False,
                log_to_driver=False,  # no log monitor to relay worker output (see _lean_node)
            )
    finally:
        if previous is None:
            os.environ.pop("PYTHONHASHSEED", None)
        else:
            os.environ["PYTHONHASHSEED"] = previous
    return f"embedded local Ray ({_cpus()} CPUs)"


@contextlib.contextmanager
def _lean_node():
    """``ray.init`` starts an embedded node without the three head processes a one-machine
    run never uses: the autoscaler monitor (nothing to scale), the log monitor (which
    relays workers' stdout to the driver; a task's errors reach the driver through its
    result, and workers' output stays in Ray's session logs) and the dashboard's API
    server, which ``include_dashboard=False`` still starts for job submission and the
    state API (neither used by a run in its own node; the per-node agent that serves Ray's
    metrics is the raylet's, and stays). Measured on 2 cores (``benchmarks/ray_start_cost.py
    --rounds 3``, against a plain ``ray.init`` without the dashboard): without the monitors,
    0.82x the CPU seconds of the node and its first actor (2.74 vs 3.36) on one machine and
    0.77x on a slower one, up no sooner; without the API server too (its process alone used
    1.3-1.8 CPU-seconds), 0.67x the CPU (6.30 vs 9.45) and the node up 0.67x as soon (4.07 vs
    6.05 s) on the slower one. ``ray.init`` has no switch for them; its ``RayParams`` and
    ``Node.start_api_server`` (private, guarded: left alone if they change) are replaced
    while it runs."""
    import ray  # deferred, as in connect

    private = getattr(ray, "_private", None)
    params = getattr(private, "parameter", None)
    original = getattr(params, "RayParams", None)
    fields = getattr(getattr(original, "__init__", None), "__code__", None)
    if fields is None or not {"no_monitor", "include_log_monitor"} <= set(fields.co_varnames):
        yield
        return

    class LeanParams(original):  # type: ignore[misc, valid-type]
        def __init__(self, **kwargs: Any) -> None:
            kwargs.update(no_monitor=True, include_log_monitor=False)
            super().__init__(**kwargs)

    node_class = getattr(getattr(private, "node", None), "Node", None)
    api_server = getattr(node_class, "start_api_server", None)
    api_fields = getattr(api_server, "__code__", None)

    def no_api_server(node: Any, *, include_dashboard: bool | None, raise_on_failure: bool):
        node._webui_url = None  # what Ray leaves when the API server could not start

    params.RayParams = LeanParams
    if api_fields is not None and {"include_dashboard", "raise_on_failure"} <= set(
        api_fields.co_varnames
    ):
        node_class.start_api_server = no_api_server
    try:
        yield
    finally:
        params.RayParams = original
        if api_server is not None:
            node_class.start_api_server = api_server


def embedded_cpus(config: PipelineConfig) -> int:
    """The CPUs embedded Ray is started with: ``ray.num_cpus``, else this machine's."""
    return config.ray.num_cpus or os.cpu_count() or 1


def stop_embedded_ray() -> None:
    """``ray.shutdown()`` of the node this process started, a second faster: Ray stops
    its processes one after the other with SIGTERM and a one-second grace each, and the
    autoscaler monitor of a local node (which has nothing to scale) ignores SIGTERM, so it
    always costs the full second. It is killed first (when :func:`_lean_node` could not
    leave it out); everything else is Ray's own shutdown."""
    import ray  # deferred, as in connect

    node = getattr(ray._private.worker, "_global_node", None)  # private: guarded
    for info in getattr(node, "all_processes", {}).get("monitor", []):
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            info.process.kill()
            info.process.wait(timeout=1)
    ray.shutdown()


def cluster_wants_token(address: str) -> bool | None:
    """Ask the cluster's GCS, without a token, whether it wants one: True (token
    authentication on), False (off), None (not a ``host:port`` address, or an answer
    that says neither).

    Raises:
        ClusterError: nothing answers at ``address`` within ten seconds.
    """
    import grpc
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return None
    with grpc.insecure_channel(address) as channel:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
        try:
            stub.GetClusterId(gcs_service_pb2.GetClusterIdRequest(), timeout=_PROBE_TIMEOUT_S)
        except grpc.RpcError as exc:
            if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise ClusterError(
                    f"no Ray cluster answers at {address} ({exc.code().name}); start one with "
                    "`ray start --head` or check the address and port"
                ) from None
            return True if exc.code() == grpc.StatusCode.UNAUTHENTICATED else None
    return False


def _match_auth_mode(address: str) -> None:
    """Put this process in the cluster's authentication mode. Both ways matter: a client
    without a token is refused by a token cluster, and the raylets of a cluster without
    authentication cannot call back into a driver that expects one (its actors die)."""
    wanted = cluster_wants_token(address)
    if wanted is None:  # no answer: Ray's own rule for a local cluster
        wanted = auth_token_available()
    if wanted and not auth_token_available():
        raise ClusterError(
            f"the Ray cluster at {address} requires token authentication and no token was "
            "found here: set RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH, or copy the token that "
            "`ray get-auth-token` prints on the head node to ~/.ray/auth_token"
        )
    os.environ["RAY_AUTH_MODE"] = "token" if wanted else "disabled"
    # Ray copies RAY_AUTH_MODE into its C++ config when it is imported; refresh that copy,
    # as ray.init(address="auto") does (ray._private.authentication's _enable_token_auth).
    from ray._raylet import Config

    Config.initialize("")


def _cpus() -> int:
    import ray  # deferred, as in connect

    return int(ray.cluster_resources().get("CPU", 0))


def node_path_problems(spec: dict[str, Any]) -> list[str]:
    """What this machine cannot see of a run: runs on each node (Ray-free, testable).

    ``spec``: ``inputs`` [(path, bytes)], ``work`` (dir), ``probe`` (the text the driver
    wrote to ``work/.node-probe``), ``node`` (a name for the probe this node writes),
    ``config`` (the pipeline, whose stages are validated here).
    """
    problems = []
    for path, size in spec["inputs"]:
        if "://" in path:
            continue  # object storage: read through its own client, not the local filesystem
        try:
            seen = os.stat(path).st_size
        except OSError as exc:
            problems.append(f"cannot see input {path} ({exc.strerror})")
            continue
        if seen != size:
            problems.append(f"sees input {path} with {seen} bytes, the driver saw {size}")
    if spec["work"] is not None:  # None: the run directory is on object storage
        problems += _output_dir_problems(Path(spec["work"]), spec["probe"], spec["node"])
    config: PipelineConfig = spec["config"]
    for i, stage in enumerate(config.stages):
        problems += [f"stages[{i}] ({stage.op}): {p}" for p in make_op(stage, config).validate()]
    return problems


def _output_dir_problems(work: Path, probe: str, node: str) -> list[str]:
    """This node reads the driver's probe under ``work`` and writes (then removes) its own."""
    try:
        if (work / _PROBE).read_text() != probe:
            raise OSError("it holds another run's probe")
        mine = work / f"{_PROBE}-{node}"
        mine.write_text(probe)
        mine.unlink()  # ours: written on the line above
    except OSError as exc:
        return [
            f"cannot see or write the output directory {work.parent} as the driver does ({exc})"
        ]
    return []


def check_nodes_see_paths(
    config: PipelineConfig, work: Path | None, tasks: list[InputTask]
) -> None:
    """Run :func:`node_path_problems` once on every alive node with CPUs.

    Raises:
        ClusterError: a node cannot see a path (all problems of all nodes, one per line),
            or did not answer within two minutes.
    """
    import ray  # deferred, as in connect
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    probe = uuid.uuid4().hex
    if work is not None:  # None: the run directory is on object storage
        (work / _PROBE).write_text(probe)
    remote_problems = ray.remote(num_cpus=0, max_retries=0)(node_path_problems)
    inputs = sorted({(t.path, t.bytes) for t in tasks})
    nodes = [n for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU", 0) > 0]
    refs = {}
    for node in nodes:
        name = f"{node['NodeManagerAddress']} ({node['NodeID'][:8]})"
        spec = {
            "inputs": inputs,
            "work": work and str(work),
            "probe": probe,
            "node": node["NodeID"],
        }
        strategy = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
        refs[name] = remote_problems.options(scheduling_strategy=strategy).remote(
            {**spec, "config": config}
        )
    problems = []
    try:
        for name, ref in refs.items():
            try:
                found = ray.get(ref, timeout=_CHECK_TIMEOUT_S)
            except ray.exceptions.TaskUnschedulableError:
                # The node died after ray.nodes() listed it (Ray notices within seconds to a
                # minute): it will run no task of this run either.
                found = []
            except (ray.exceptions.GetTimeoutError, ray.exceptions.RayError) as exc:
                found = [f"did not answer the path check ({type(exc).__name__})"]
            problems += [f"node {name}: {p}" for p in found]
    finally:
        if work is not None:
            (work / _PROBE).unlink(missing_ok=True)  # ours: the probe written above
    if problems:
        raise ClusterError(
            "some nodes cannot see the run's paths (inputs, output, models and tokenizers "
            "must be on a filesystem every node shares):\n  " + "\n  ".join(problems)
        )
