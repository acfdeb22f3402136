"""``dataforge ablate``: train small models on recipe variants at equal tokens and compare
their held-out loss (see :mod:`trainer.ablate.run`)."""

__all__: list[str] = []
