"""What a run reports about itself, from one per-step record: ``metrics.jsonl``,
TensorBoard and the start-up summary (:mod:`~trainer.telemetry.metrics`), the console
(:mod:`~trainer.telemetry.console`) and the Prometheus endpoint
(:mod:`~trainer.telemetry.prometheus`)."""
