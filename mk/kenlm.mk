# KenLM tools (lmplz, build_binary) and the demo reference language models.
#
# The `kenlm` PyPI wheel ships only the query module; its source distribution carries the
# full C++ source, from which we build the two command-line tools we need. Build deps
# (setuptools, cmake) of the sdist are taken as wheels (`--no-binary kenlm`, not `:all:`):
# `:all:` would also compile CMake itself from source while pip prepares the metadata.

PY ?= .venv/bin/python
VENV_STAMP ?= .venv/.installed

KENLM_VERSION := 0.3.0
KENLM_DIR := build/kenlm
KENLM_BIN := $(KENLM_DIR)/bin
# -pic: the libraries are built position-independent, for the dataforge.lm._kenlm_ids extension
KENLM_STAMP := $(KENLM_DIR)/.built-$(KENLM_VERSION)-pic
KENLM_JOBS ?= 2
KENLM_DEBS := libboost-program-options-dev libboost-system-dev libboost-thread-dev \
	zlib1g-dev libbz2-dev liblzma-dev

.PHONY: kenlm kenlm-ids demo-lm

kenlm: $(KENLM_STAMP)

# Upstream's CMakeLists asks Boost for unit_test_framework even with COMPILE_TESTS=OFF; we
# build no tests, so the recipe drops that component instead of requiring libboost-test-dev.
$(KENLM_STAMP): | $(VENV_STAMP)
	@missing=""; \
	for p in $(KENLM_DEBS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	command -v cmake >/dev/null || missing="$$missing cmake"; \
	command -v c++ >/dev/null || missing="$$missing g++"; \
	if [ -n "$$missing" ]; then \
	  echo "kenlm: installing missing Debian packages:$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then sudo=""; else sudo="sudo -n"; fi; \
	  if ! { $$sudo apt-get update && $$sudo apt-get install -y --no-install-recommends $$missing; }; then \
	    echo "kenlm: ERROR: cannot install$$missing (need root or passwordless sudo)." >&2; \
	    echo "kenlm: install them yourself: apt-get install$$missing" >&2; \
	    exit 1; \
	  fi; \
	fi; \
	command -v cmake >/dev/null || { echo "kenlm: ERROR: cmake not found on PATH" >&2; exit 1; }; \
	command -v c++ >/dev/null || { echo "kenlm: ERROR: no C++ compiler (c++) on PATH" >&2; exit 1; }
	rm -rf $(KENLM_DIR)/src $(KENLM_DIR)/cmake-build
	mkdir -p $(KENLM_DIR)/dist $(KENLM_DIR)/src $(KENLM_BIN)
	test -f $(KENLM_DIR)/dist/kenlm-$(KENLM_VERSION).tar.gz || \
	  $(PY) -m pip download --no-binary kenlm --no-deps kenlm==$(KENLM_VERSION) -d $(KENLM_DIR)/dist
	tar -xzf $(KENLM_DIR)/dist/kenlm-$(KENLM_VERSION).tar.gz -C $(KENLM_DIR)/src --strip-components=1
	sed -i '/^  unit_test_framework$$/d' $(KENLM_DIR)/src/CMakeLists.txt
	cmake -S $(KENLM_DIR)/src -B $(KENLM_DIR)/cmake-build -DCMAKE_BUILD_TYPE=Release \
	  -DENABLE_PYTHON=OFF -DCOMPILE_TESTS=OFF -DENABLE_INTERPOLATE=OFF \
	  -DCMAKE_POSITION_INDEPENDENT_CODE=ON >$(KENLM_DIR)/cmake.log 2>&1 \
	  || { tail -n 30 $(KENLM_DIR)/cmake.log >&2; \
	       echo "kenlm: ERROR: cmake configure failed (Boost dev packages: $(KENLM_DEBS))" >&2; exit 1; }
	$(MAKE) -C $(KENLM_DIR)/cmake-build -j$(KENLM_JOBS) lmplz build_binary kenlm kenlm_util
	cp $(KENLM_DIR)/cmake-build/bin/lmplz $(KENLM_DIR)/cmake-build/bin/build_binary $(KENLM_BIN)/
	touch $@

# Reference models: zh on the news half of the demo corpus, en on the stdlib docs. A
# deterministic id-hash split holds out 10% of the documents for evaluation (its perplexity
# quantiles go into the card). Retrained when the corpus or the tokenizer is rebuilt (their
# stamps come from mk/demo_data.mk and mk/tokenizer.mk) or when the training arguments change:
# $(DEMO_LM_ARGS_STAMP) holds them and is rewritten only when they differ, so an unchanged
# setup stays a no-op while e.g. `make demo-lm DEMO_LM_SEGMENTATION=tokenizer` retrains.
DEMO_LM_ZH := models/zh_news.bin
DEMO_LM_EN := models/en_docs.bin
DEMO_LM_SEGMENTATION ?= sentencepiece
DEMO_LM_ARGS := --tokenizer tokenizers/demo --segmentation $(DEMO_LM_SEGMENTATION) --order 5 \
	--prune 0 0 1 --holdout-percent 10 --memory 1G
DEMO_LM_ARGS_STAMP := models/.demo-lm-args
DEMO_LM_DEPS := data/demo/.done tokenizers/demo/.trained $(DEMO_LM_ARGS_STAMP) \
	| $(KENLM_STAMP) $(VENV_STAMP)

demo-lm: $(DEMO_LM_ZH) $(DEMO_LM_EN)

$(DEMO_LM_ARGS_STAMP): FORCE_DEMO_LM_ARGS
	@mkdir -p $(@D)
	@echo '$(DEMO_LM_ARGS)' | cmp -s - $@ || echo '$(DEMO_LM_ARGS)' > $@

.PHONY: FORCE_DEMO_LM_ARGS
FORCE_DEMO_LM_ARGS:

$(DEMO_LM_ZH): $(DEMO_LM_DEPS)
	$(PY) -m dataforge.lm.cli train --input 'data/demo/news_zh/*.jsonl.zst' --lang zh \
	  $(DEMO_LM_ARGS) --out $@

$(DEMO_LM_EN): $(DEMO_LM_DEPS)
	$(PY) -m dataforge.lm.cli train --input 'data/demo/docs_en/*.jsonl' --lang en \
	  $(DEMO_LM_ARGS) --out $@

# dataforge.lm._kenlm_ids: scores token ids with KenLM's library (dataforge/lm/native.py);
# without it the perplexity op scores rendered strings through kenlm.Model.score (same
# values, ~2x the time). Linked against the static libraries built above.
KENLM_IDS_SO := dataforge/lm/_kenlm_ids$(PY_EXT)
KENLM_IDS_SRC := dataforge/lm/_kenlm_ids.cpp

kenlm-ids: $(KENLM_IDS_SO)

$(KENLM_IDS_SO): $(KENLM_IDS_SRC) $(KENLM_STAMP)
	c++ -O3 -DNDEBUG -DKENLM_MAX_ORDER=6 -std=c++17 -shared -fPIC -fvisibility=hidden \
	  -Wno-deprecated-declarations -I$(PY_INCLUDE) -I$(KENLM_DIR)/src $(KENLM_IDS_SRC) \
	  $(KENLM_DIR)/cmake-build/lib/libkenlm.a $(KENLM_DIR)/cmake-build/lib/libkenlm_util.a \
	  -lz -lbz2 -llzma -lpthread -o $@.tmp
	mv $@.tmp $@

# `make test` builds the tools so that the KenLM tests run instead of skipping; `make demo`
# trains the reference models its pipeline filters with.
TEST_DEPS += kenlm kenlm-ids
DEMO_DEPS += demo-lm kenlm-ids
