"""The run directory ``OUT`` of ``dataforge run`` as state: its files on local disk or
object storage (``store``), the one-writer hold on it (``lock``: a ``flock``; ``lease``: an
object-store lease behind the same interface) and what makes a folder a run that
dataforge may write and clean (``ownership``: the run marker, the entries it owns).

``rundir`` imports only ``io`` and below of dataforge; the runtime, ``inspect``, the CLI and
``dataforge ablate`` use it, never ``io``, ``ops`` or the pipeline config: see
docs/architecture.md.
"""

__all__: list[str] = []
