"""Input and output: files and ids (``files``), readers (``readers``, ``documents``), the
reader's own config (``input_config``), sinks (``sinks``), the MDS codec (``mds``) and
the one wrapper of streaming's private shared-memory helpers (``streaming_shm``).

``io`` imports only ``text``, ``records`` and ``typed_config`` of dataforge (never ops,
the runtime or the pipeline config): see docs/architecture.md.
"""

__all__: list[str] = []
