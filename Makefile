# dataforge: `make demo` and `make test` work from a fresh clone (Python 3.11, pip, apt).
PYTHON ?= python3
PY := .venv/bin/python
VENV_STAMP := .venv/.installed
export PYTHONHASHSEED := 0

.PHONY: setup demo test test-fast lint
.DEFAULT_GOAL := help

help:
	@echo "make demo   set up, then run pipelines/demo.yaml end to end on embedded Ray and inspect it"
	@echo "make test   set up, then run the test suite"

setup: $(VENV_STAMP)

$(VENV_STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv .venv
	$(PY) -m pip install -q --upgrade "pip>=24" setuptools wheel
	$(PY) -m pip install -q -e ".[dev]"
	touch $@

# Python extensions in C++ (mk/*.mk name them): the venv is made by $(PYTHON), so its
# extension suffix and headers are the venv's. One source file each builds by this rule.
PY_EXT := $(shell $(PYTHON) -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
PY_INCLUDE := $(shell $(PYTHON) -c "import sysconfig; print(sysconfig.get_path('include'))")

dataforge/%$(PY_EXT): dataforge/%.cpp
	c++ -O3 -DNDEBUG -std=c++17 -shared -fPIC -fvisibility=hidden -Wall -I$(PY_INCLUDE) \
	  $< -o $@.tmp
	mv $@.tmp $@

# Other targets (demo-data, kenlm, demo-tokenizer, demo-lm, ...) live in mk/*.mk.
-include mk/*.mk

# demo-data first: the tokenizer, the reference LMs and some tests are built from it.
DEMO_DEPS := demo-data $(DEMO_DEPS)
TEST_DEPS := demo-data $(TEST_DEPS)

demo: setup $(DEMO_DEPS)
	.venv/bin/dataforge validate pipelines/demo.yaml
	.venv/bin/dataforge run pipelines/demo.yaml --overwrite
	.venv/bin/dataforge inspect out/demo --head 2 --verify
	@echo "next: make demo-train-data (the chat shards trainer/configs/*_tiny.yaml read), then make demo-dpo or make demo-rlhf"

# The whole CPU suite, slow tests included (about 15 minutes on 2 cores).
test: setup $(TEST_DEPS)
	.venv/bin/pytest -q -m "not gpu" --timeout=900

test-fast: setup $(TEST_DEPS)
	.venv/bin/pytest -q -m "not slow and not gpu" --timeout=900

lint: setup
	.venv/bin/ruff check dataforge trainer tests benchmarks scripts
	.venv/bin/ruff format --check dataforge trainer tests benchmarks scripts
	.venv/bin/lint-imports --no-logo  # import rules: docs/architecture.md, pyproject.toml
	$(PY) scripts/check_docs.py  # README and docs/: links, anchors, paths, module names
