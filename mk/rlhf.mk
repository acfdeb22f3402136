# RLHF quick start, CPU: `make demo-rlhf` builds the review sets
# (scripts/make_rlhf_demo.py -> data/demo/rlhf), tokenizes them (pipelines/rlhf_*_demo.yaml),
# then trains SFT -> reward model (prefers reviews holding 不错) -> PPO and prints the reward
# at the start and end of PPO, the KL and the reward model's held-out accuracy. Each
# training stage resumes its checkpoints, so a finished stage only re-exports.

PY ?= .venv/bin/python
VENV_STAMP ?= .venv/.installed
RLHF_DATA ?= data/demo/rlhf
RLHF_TRAIN := .venv/bin/dataforge train

.PHONY: demo-rlhf demo-rlhf-data

demo-rlhf-data: out/rlhf_sft_demo/mds/index.json out/rlhf_pref_demo/mds/index.json \
  out/rlhf_pref_demo_heldout/mds/index.json

$(RLHF_DATA)/.done: scripts/make_rlhf_demo.py | data/demo/.done $(VENV_STAMP)
	$(PY) scripts/make_rlhf_demo.py --demo data/demo --out $(RLHF_DATA)

out/rlhf_sft_demo/mds/index.json: pipelines/rlhf_sft_demo.yaml $(RLHF_DATA)/.done tokenizers/demo/.trained | $(VENV_STAMP)
	.venv/bin/dataforge run pipelines/rlhf_sft_demo.yaml --overwrite \
	  --set inputs.0.path=$(abspath $(RLHF_DATA))/sft.jsonl

out/rlhf_pref_demo/mds/index.json: pipelines/rlhf_pref_demo.yaml $(RLHF_DATA)/.done tokenizers/demo/.trained | $(VENV_STAMP)
	.venv/bin/dataforge run pipelines/rlhf_pref_demo.yaml --overwrite \
	  --set inputs.0.path=$(abspath $(RLHF_DATA))/pref.jsonl

out/rlhf_pref_demo_heldout/mds/index.json: pipelines/rlhf_pref_demo.yaml $(RLHF_DATA)/.done tokenizers/demo/.trained | $(VENV_STAMP)
	.venv/bin/dataforge run pipelines/rlhf_pref_demo.yaml -o out/rlhf_pref_demo_heldout --overwrite \
	  --set inputs.0.path=$(abspath $(RLHF_DATA))/pref_heldout.jsonl

demo-rlhf: demo-rlhf-data
	$(RLHF_TRAIN) sft trainer/configs/rlhf_sft_tiny.yaml
	$(RLHF_TRAIN) reward trainer/configs/rlhf_reward_tiny.yaml
	$(RLHF_TRAIN) ppo trainer/configs/ppo_tiny.yaml
	$(PY) scripts/rlhf_demo_summary.py --reward-run runs/rlhf_reward_tiny --ppo-run runs/ppo_tiny
