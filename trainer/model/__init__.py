"""The model: the transformer (:mod:`~trainer.model.transformer`, attention in
:mod:`~trainer.model.attention`), its LoRA adapters (:mod:`~trainer.model.lora`), the one
mapping to Hugging Face names (:mod:`~trainer.model.hf_model`) and what a run starts from
(:mod:`~trainer.model.pretrained`)."""
