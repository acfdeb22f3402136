# Trainer (issue 8). Benchmark results go to build/bench/ and are no-ops while newer than
# the trainer sources; delete them to re-measure. The GPU MFU run (1b and 3b presets) is
# not a target: on a GPU machine run  .venv/bin/python benchmarks/train_mfu.py

PY ?= .venv/bin/python
VENV_STAMP ?= .venv/.installed
TRAINER_SOURCES := $(wildcard trainer/*.py trainer/*/*.py)
TRAINER_BENCH_DIR := build/bench

.PHONY: bench-trainer test-trainer demo-pretrain demo-sft demo-dpo demo-train-data

# Every shard the tiny trainer configs read (sft_tiny, dpo_tiny, reward_tiny, rlhf_*_tiny,
# ppo_tiny); their init_from checkpoints come from the stage before (demo-pretrain, ...).
demo-train-data: demo-sft-data demo-dpo-data demo-rlhf-data

# Quick start, CPU (trainer/configs/*_tiny.yaml): pretrain on `make demo`'s output, then SFT
# and DPO from the previous stage's export on the chat demo shards (mk/loader.mk). Each
# stage resumes its checkpoints, so a finished stage only re-exports.
#   make demo-dpo    # = demo (if out/demo is missing), demo-pretrain, demo-sft, demo-dpo
TRAIN := .venv/bin/dataforge train
PRETRAIN_EXPORT := checkpoints/pretrain_tiny/export/config.json
SFT_EXPORT := checkpoints/sft_tiny/export/config.json

demo-pretrain: $(PRETRAIN_EXPORT)

$(PRETRAIN_EXPORT): | $(VENV_STAMP)
	test -f out/demo/mds/index.json || $(MAKE) demo
	$(TRAIN) pretrain trainer/configs/pretrain_tiny.yaml

demo-sft: out/sft_demo/mds/index.json out/sft_demo_heldout/mds/index.json $(PRETRAIN_EXPORT)
	$(TRAIN) sft trainer/configs/sft_tiny.yaml

$(SFT_EXPORT): | out/sft_demo/mds/index.json out/sft_demo_heldout/mds/index.json $(PRETRAIN_EXPORT)
	$(TRAIN) sft trainer/configs/sft_tiny.yaml

demo-dpo: out/dpo_demo/mds/index.json out/dpo_demo_heldout/mds/index.json $(SFT_EXPORT)
	$(TRAIN) dpo trainer/configs/dpo_tiny.yaml
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
