"""Stopping on a signal: pre-emption, a time limit, Ctrl-C.

While the loop runs, SIGTERM (pre-emption, ``scancel``, torchrun passing a stop on),
SIGINT (Ctrl-C) and SIGUSR1 (what SLURM's ``--signal`` sends before a time limit) only
set a flag. The loop finishes the optimizer step in flight, every rank agrees to stop
at the same step (a one-number all-reduce per step, on more than one rank), a
checkpoint of that step is written and :class:`Interrupted` ends the run (a second
Ctrl-C stops at once, keeping the earlier checkpoints); the CLI prints
one line and exits with :data:`EXIT_REQUEUE`, which ``trainer/launch/slurm.sbatch``
turns into ``scontrol requeue``. The same command then resumes from that step.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from types import FrameType

import torch

from trainer.parallel.distributed import DistEnv, all_reduce_sum

__all__ = ["EXIT_REQUEUE", "SIGNALS", "Interrupted", "StopRequest"]

EXIT_REQUEUE = 75
"""Exit status of a run stopped by a signal after writing its checkpoint (EX_TEMPFAIL:
try again later; the SLURM template requeues the job on it)."""

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)


class Interrupted(Exception):
    """The run stopped on a signal after writing ``checkpoint`` (at ``step``)."""

    def __init__(self, signame: str, step: int, checkpoint: Path) -> None:
        super().__init__(
            f"{signame}: stopped after step {step}, checkpoint {checkpoint}; "
            f"the same command resumes from it (exit {EXIT_REQUEUE})"
        )
        self.signame, self.step, self.checkpoint = signame, step, checkpoint


class StopRequest:
    """Records the first of :data:`SIGNALS` between :meth:`install` and :meth:`restore`
    (or inside ``with``); handlers go on the main thread only, the previous ones back."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, object] = {}

    def install(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                self._previous[signum] = signal.signal(signum, self._record)
        return self

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def __enter__(self) -> StopRequest:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.restore()

    def _record(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signum
        elif signum == signal.SIGINT:  # a second Ctrl-C: stop now, without the checkpoint
            raise KeyboardInterrupt

    def requested(self, env: DistEnv) -> str | None:
        """The signal's name if this rank or any other got one (collective on >1 rank)."""
        stop = self.signum is not None
        if env.world_size > 1:
            flag = torch.tensor([float(stop)], device=env.device)
            stop = float(all_reduce_sum(flag, env)) > 0
        if not stop:
            return None
        return signal.Signals(self.signum).name if self.signum else "a signal to another rank"
