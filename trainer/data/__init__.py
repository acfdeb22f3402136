"""What the loop reads: training batches from the loader or synthetic tokens
(:mod:`~trainer.data.sources`) and held-out evaluation over its streams
(:mod:`~trainer.data.evaluate`)."""
