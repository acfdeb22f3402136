# Trainer (issue 8). Benchmark results go to build/bench/ and are no-ops while newer than
# the trainer sources; delete them to re-measure. The GPU MFU run (1b and 3b presets) is
# not a target: on a GPU machine run  .venv/bin/python benchmarks/train_mfu.py

PY ?= .venv/bin/python
VENV_STAMP ?= .venv/.installed
TRAINER_SOURCES := $(wildcard trainer/*.py)
TRAINER_BENCH_DIR := build/bench

.PHONY: bench-trainer test-trainer
bench-trainer: $(TRAINER_BENCH_DIR)/train_step_overhead.txt $(TRAINER_BENCH_DIR)/train_mfu_cpu.txt

$(TRAINER_BENCH_DIR)/train_step_overhead.txt: benchmarks/train_step_overhead.py $(TRAINER_SOURCES) | $(VENV_STAMP)
	mkdir -p $(dir $@)
	$(PY) benchmarks/train_step_overhead.py --quick > $@.tmp && mv $@.tmp $@
	cat $@

$(TRAINER_BENCH_DIR)/train_mfu_cpu.txt: benchmarks/train_mfu.py $(TRAINER_SOURCES) | $(VENV_STAMP)
	mkdir -p $(dir $@)
	$(PY) benchmarks/train_mfu.py --quick > $@.tmp && mv $@.tmp $@
	cat $@

# The trainer's tests including the slow ones (2-process DDP and FSDP2 over gloo).
test-trainer: | $(VENV_STAMP)
	$(PY) -m pytest -q tests/trainer --timeout=900
