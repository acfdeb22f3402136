"""A Prometheus endpoint for a training run (rank 0), ``metrics.prometheus_port``.

Served by ``prometheus_client`` from a background thread, on its own registry, so nothing
else in the process leaks into it. Gauges are set after every step:

=======================================  =====================================================
metric                                   meaning
=======================================  =====================================================
``dataforge_train_step``                 optimizer steps applied
``dataforge_train_loss``                 loss of the last step (DPO: the DPO loss)
``dataforge_train_learning_rate``        learning rate of the last step
``dataforge_train_grad_norm``            gradient norm before clipping
``dataforge_train_tokens_per_second``    real (unpadded) tokens/s of the last step, all ranks
``dataforge_train_mfu``                  model FLOPs utilization (absent when the peak is
                                         unknown, e.g. on CPUs)
``dataforge_train_step_time_seconds``    wall time of the last step
``dataforge_train_data_wait_seconds``    time of the last step spent waiting for batches
``dataforge_train_tokens_total``         tokens seen (counter)
``gpu_utilization``                      GPU busy percent (``torch.cuda.utilization``, needs
                                         NVML); CUDA only
``memory_allocated``                     bytes allocated by tensors (peak of the last step);
                                         CUDA only
``nccl_all_reduce_time``                 seconds of DDP gradient all-reduce in the last step,
                                         summed over buckets, rank 0's (the seed's name, also
                                         for gloo on CPU); DDP only, see
                                         :mod:`trainer.parallel.comm_timing`
=======================================  =====================================================

On a CPU the GPU metrics are absent, not zero; ``gpu_utilization`` is also absent where
NVML is not importable: ``torch.cuda.utilization`` reads it through ``pynvml``, which the
optional ``nvidia-ml-py`` package provides (``pip install nvidia-ml-py`` or the ``gpu``
extra; not a dependency).
``nccl_all_reduce_time`` is absent for a single process and for FSDP2, whose reduce-scatter
is not timed.
"""

from __future__ import annotations

from typing import Any

import torch
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from trainer.config import ConfigError, MetricsConfig
from trainer.parallel.distributed import DistEnv

__all__ = ["PrometheusExporter", "live_exporter"]


def _nvml_available() -> bool:
    """Whether ``torch.cuda.utilization`` works: it needs the optional ``pynvml`` module
    (package ``nvidia-ml-py``, the ``gpu`` extra) and a driver that answers NVML calls."""
    try:
        torch.cuda.utilization()
    except Exception:  # noqa: BLE001 - not installed (ModuleNotFoundError), no driver
        # (RuntimeError) or pynvml's own NVMLError (e.g. no permission in a container)
        return False
    return True


_GAUGES = {
    "step": ("dataforge_train_step", "Optimizer steps applied"),
    "loss": ("dataforge_train_loss", "Loss of the last step"),
    "lr": ("dataforge_train_learning_rate", "Learning rate of the last step"),
    "grad_norm": ("dataforge_train_grad_norm", "Gradient norm before clipping"),
    "tokens_per_s": ("dataforge_train_tokens_per_second", "Tokens per second, all ranks"),
    "mfu": ("dataforge_train_mfu", "Model FLOPs utilization"),
    "step_time_s": ("dataforge_train_step_time_seconds", "Wall time of the last step"),
    "data_wait_s": ("dataforge_train_data_wait_seconds", "Data wait of the last step"),
    "nccl_all_reduce_time": (
        "nccl_all_reduce_time",
        "Seconds of DDP gradient all-reduce in the last step (rank 0; gloo too)",
    ),
}
_GPU_GAUGES = {
    "gpu_utilization": ("gpu_utilization", "GPU utilization percent (NVML)"),
    "memory_allocated": ("memory_allocated", "Bytes allocated by tensors (peak of the step)"),
}


class PrometheusExporter:
    """Serves the metrics of the module docstring on ``host:port`` (port 0: a free one)."""

    def __init__(self, host: str, port: int, cuda: bool) -> None:
        """Start serving.

        Raises:
            ConfigError: ``host:port`` cannot be bound (in use, or not this machine's).
        """
        self.registry = CollectorRegistry(auto_describe=True)
        self.specs = {**_GAUGES, **(_GPU_GAUGES if cuda else {})}
        self.gauges: dict[str, Gauge] = {}
        """Created at their first value, so that a metric with none (MFU without a known
        peak) is absent rather than a misleading 0."""
        self.tokens = Counter("dataforge_train_tokens", "Tokens seen", registry=self.registry)
        if cuda and not _nvml_available():
            del self.specs["gpu_utilization"]
        try:
            self.server, self.thread = start_http_server(port, host, registry=self.registry)
        except OSError as exc:  # the port is taken, or the host is not this machine's
            raise ConfigError(
                f"metrics.prometheus_port: cannot serve metrics on {host}:{port} "
                f"({exc.strerror or exc}); choose a free port, or 0 for any free one"
            ) from None
        self.port = self.server.server_port

    def update(self, record: dict[str, Any], tokens: int) -> None:
        """Set the gauges from a step's record (``trainer.loop`` keys)."""
        values = dict(record)
        values["data_wait_s"] = record["data_wait_frac"] * record["step_time_s"]
        if "mem_allocated_gib" in record:
            values["memory_allocated"] = record["mem_allocated_gib"] * 2**30
        if "gpu_utilization" in self.specs:
            values["gpu_utilization"] = torch.cuda.utilization()
        for key, (name, doc) in self.specs.items():
            value = values.get(key)
            if value is None:
                continue
            if key not in self.gauges:
                self.gauges[key] = Gauge(name, doc, registry=self.registry)
            self.gauges[key].set(float(value))
        if tokens:
            self.tokens.inc(tokens)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


def live_exporter(config: MetricsConfig, env: DistEnv) -> PrometheusExporter | None:
    """The exporter of ``metrics.prometheus_port`` on rank 0, else None."""
    if config.prometheus_port is None or not env.is_main:
        return None
    exporter = PrometheusExporter(
        config.prometheus_host, config.prometheus_port, env.device.type == "cuda"
    )
    print(
        f"[trainer] Prometheus metrics on http://{config.prometheus_host}:{exporter.port}/metrics",
        flush=True,
    )
    return exporter
