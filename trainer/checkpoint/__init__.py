"""What a run writes and reads back: resumable checkpoints
(:mod:`~trainer.checkpoint.checkpointer`), the model's own state across meshes
(:mod:`~trainer.checkpoint.model_state`), the allow-listed loader of those files
(:mod:`~trainer.checkpoint.safe_load`) and the transformers-loadable export
(:mod:`~trainer.checkpoint.export`)."""
