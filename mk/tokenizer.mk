# Demo tokenizer (issue 3): Jieba + BPE trained on the demo corpus into tokenizers/demo/.
# A no-op once tokenizers/demo/.trained is newer than the spec and the corpus stamp;
# delete the stamp (or the directory) to retrain. data/demo/.done comes from `make demo-data`
# (mk/demo_data.mk).

PY ?= .venv/bin/python
VENV_STAMP ?= .venv/.installed
DEMO_TOKENIZER_DIR := tokenizers/demo
DEMO_TOKENIZER_STAMP := $(DEMO_TOKENIZER_DIR)/.trained

.PHONY: demo-tokenizer
demo-tokenizer: $(DEMO_TOKENIZER_STAMP)

$(DEMO_TOKENIZER_STAMP): tokenizers/demo.yaml data/demo/.done | $(VENV_STAMP)
	$(PY) -m dataforge.cli tokenizer train tokenizers/demo.yaml --out $(DEMO_TOKENIZER_DIR) --overwrite
	touch $@

# `make demo` trains (or reuses) the demo tokenizer before its pipeline tokenizes; the tests
# of the executors and of the web recipe tokenize with it (a few seconds to train).
DEMO_DEPS += demo-tokenizer
TEST_DEPS += demo-tokenizer

# dataforge.tokenization._spm_bpe: sentencepiece's BPE algorithm over a whole batch in C++
# (dataforge/tokenization/native_bpe.py), the same ids; without it sentencepiece encodes.
SPM_BPE_SO := dataforge/tokenization/_spm_bpe$(PY_EXT)

.PHONY: spm-bpe
spm-bpe: $(SPM_BPE_SO)

TEST_DEPS += spm-bpe
DEMO_DEPS += spm-bpe
