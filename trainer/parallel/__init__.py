"""How ranks share the work: the process group and device mesh
(:mod:`~trainer.parallel.distributed`), tensor parallelism
(:mod:`~trainer.parallel.tensor_parallel`), pipeline stages
(:mod:`~trainer.parallel.pipeline`), the mesh a launcher reads
(:mod:`~trainer.parallel.mesh_shape`) and the DDP all-reduce timer
(:mod:`~trainer.parallel.comm_timing`)."""
