"""fastText quality classifiers: training (``dataforge classifier train``) and scoring.

:mod:`.features` turns documents into the one-line inputs fastText reads, the same way at
training and at scoring time; :mod:`.model` loads a trained model with its card and scores
texts; :mod:`.train` and :mod:`.cli` build a model from positive and negative inputs.
"""

__all__ = ["LANGS"]

LANGS = ("zh", "en", "auto")
"""``--lang`` choices: ``zh``/``auto`` segment CJK text with jieba, ``en`` does not."""
