"""Starting or joining Ray, and checking that every node sees the run's paths.

Joining a cluster: the address comes from ``--address``, ``ray.address`` or
``RAY_ADDRESS`` (:func:`cluster_address`, the one rule). Ray turns token authentication on
for a ``ray start`` cluster whenever a token exists on that machine, but
``ray.init(address=...)`` uses a token only when ``RAY_AUTH_MODE=token`` is set, and Ray
reads that variable once, when it is imported. So, unless ``RAY_AUTH_MODE`` is set (or Ray
already imported), the driver sets it before importing Ray by Ray's own rule for local
clusters: token mode when a token is found where Ray's CLI looks (``RAY_AUTH_TOKEN``,
``RAY_AUTH_TOKEN_PATH``, ``~/.ray/auth_token``); for embedded Ray, token mode, the secure
default Ray 2.60 picks (and warns about when the mode is left unset).

Path check: nodes that share no filesystem with the driver would read nothing or write
their parts where the driver never looks. Before any work, one zero-CPU task per alive
node stats every input file (same size as the driver saw), reads a probe file the driver
wrote under ``OUT/_work`` and writes its own beside it, and runs each stage's
``validate()`` (models, tokenizers, ``against:``). Any problem fails the run at once with
the node and the path.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
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
    "cluster_address",
    "connect",
    "embedded_cpus",
    "node_name",
    "node_path_problems",
    "resolve_run_paths",
]

_CHECK_TIMEOUT_S = 120
_PROBE = ".node-probe"
# Where Ray unpacks a job's --working-dir (the job's driver runs there).
_RAY_WORKING_DIR = "/runtime_resources/working_dir_files/"


class ClusterError(RunFailed):
    """The cluster cannot be joined, or a node cannot see a path of the run."""


def cluster_address(config: PipelineConfig, address: str | None) -> tuple[str, str] | None:
    """The Ray cluster to join and what named it: ``--address`` (``address``), else
    ``ray.address``, else ``RAY_ADDRESS``; None: none named (embedded local Ray)."""
    if address:
        return address, "--address"
    if config.ray.address:
        return config.ray.address, "ray.address"
    if os.environ.get("RAY_ADDRESS"):
        return os.environ["RAY_ADDRESS"], "RAY_ADDRESS"
    return None


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
    """Join the cluster at ``address`` (:func:`cluster_address`) or, with None, start
    embedded local Ray, with public ``ray.init`` arguments only. Returns a description for
    the log. Ray's own info lines show with ``verbose`` only (they stay in Ray's session
    logs).

    Raises:
        ClusterError: the cluster at the address cannot be joined (the message says why,
            with the authentication settings in force).
    """
    if "RAY_AUTH_MODE" not in os.environ and "ray" not in sys.modules:
        # Not once Ray is imported (a program calling the CLI's main()): Ray's driver would
        # keep the mode it read then while the node it starts reads ours, and the start
        # stalls on InvalidAuthToken retries.
        if address:
            os.environ["RAY_AUTH_MODE"] = "token" if auth_token_available() else "disabled"
        else:
            os.environ["RAY_AUTH_MODE"] = "token"
    import ray  # deferred: the local executor never imports Ray (~0.2 s)

    if ray.is_initialized():
        return "already initialized Ray"
    level = logging.INFO if verbose else logging.WARNING
    if address:
        env = {"env_vars": {"PYTHONHASHSEED": "0"}}
        try:
            ray.init(address=address, runtime_env=env, log_to_driver=True, logging_level=level)
        except (ConnectionError, RuntimeError, ray.exceptions.RayError) as exc:
            mode = os.environ.get("RAY_AUTH_MODE", "disabled")
            raise ClusterError(
                f"cannot join the Ray cluster at {address}: {exc} (RAY_AUTH_MODE={mode}; a "
                "cluster that requires token authentication needs its token here: "
                "RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token, as `ray "
                "get-auth-token` prints it; one without needs RAY_AUTH_MODE=disabled)"
            ) from exc
        nodes = [n for n in ray.nodes() if n["Alive"]]
        return f"Ray cluster at {address} ({len(nodes)} nodes, {_cpus()} CPUs)"
    # The workers of an embedded node inherit the raylet's environment, which is this
    # process's at ray.init: a job-level runtime_env would make Ray start new workers for
    # the job rather than use the ones it prestarts.
    previous = os.environ.get("PYTHONHASHSEED")
    os.environ["PYTHONHASHSEED"] = "0"
    try:
        ray.init(
            address="local",  # without it ray.init() joins any cluster already running here
            logging_level=level,
            num_cpus=embedded_cpus(config),
            object_store_memory=config.ray.object_store_memory,
            include_dashboard=False,
            log_to_driver=False,  # a task's errors reach the driver through its result
        )
    finally:
        if previous is None:
            os.environ.pop("PYTHONHASHSEED", None)
        else:
            os.environ["PYTHONHASHSEED"] = previous
    return f"embedded local Ray ({_cpus()} CPUs)"


def embedded_cpus(config: PipelineConfig) -> int:
    """The CPUs embedded Ray is started with: ``ray.num_cpus``, else this machine's."""
    return config.ray.num_cpus or os.cpu_count() or 1


def node_name() -> str:
    """This Ray node, as the manifest and the path check name it: ``address (id[:8])``."""
    import ray  # deferred, as in connect

    context = ray.get_runtime_context()
    node_id = context.get_node_id()
    address = next((n["NodeManagerAddress"] for n in ray.nodes() if n["NodeID"] == node_id), "?")
    return f"{address} ({node_id[:8]})"


def _auth_hint() -> str:
    """What to try when a joined cluster's workers cannot answer this driver."""
    if os.environ.get("RAY_AUTH_MODE") != "token":
        return ""
    return (
        "; this driver uses token authentication: a cluster without it needs "
        "RAY_AUTH_MODE=disabled here"
    )


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
                found = [f"did not answer the path check ({type(exc).__name__}{_auth_hint()})"]
            problems += [f"node {name}: {p}" for p in found]
    finally:
        if work is not None:
            (work / _PROBE).unlink(missing_ok=True)  # ours: the probe written above
    if problems:
        raise ClusterError(
            "some nodes cannot see the run's paths (inputs, output, models and tokenizers "
            "must be on a filesystem every node shares):\n  " + "\n  ".join(problems)
        )
