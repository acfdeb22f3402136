"""What drives a run, shared by the batch loop and PPO: the optimizer and its learning-rate
schedule (:mod:`~trainer.control.optim`) and stop requests from signals, agreed by all ranks
(:mod:`~trainer.control.stopping`)."""
