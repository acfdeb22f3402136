# Loader (issue 7): chat demo sets and the SFT / DPO demo shards for the loader.
# `make demo-chat-data` derives data/demo/chat/{sft,dpo}.jsonl from the demo corpus;
# `make demo-sft-data demo-dpo-data` run pipelines/{sft,dpo}_demo.yaml into
# out/{sft,dpo}_demo (`make demo-sft demo-dpo` in mk/trainer.mk also train on them).
# Each is a no-op once its output exists (delete it to rebuild).

PY ?= .venv/bin/python
VENV_STAMP ?= .venv/.installed

CHAT_DEMO_DIR := data/demo/chat

.PHONY: demo-chat-data demo-sft-data demo-dpo-data bench-loader

demo-chat-data: $(CHAT_DEMO_DIR)/.done

$(CHAT_DEMO_DIR)/.done: scripts/make_chat_demo.py | data/demo/.done $(VENV_STAMP)
	$(PY) scripts/make_chat_demo.py --demo data/demo --out $(CHAT_DEMO_DIR)

demo-sft-data: out/sft_demo/mds/index.json out/sft_demo_heldout/mds/index.json

out/sft_demo/mds/index.json: pipelines/sft_demo.yaml $(CHAT_DEMO_DIR)/.done tokenizers/demo/.trained | $(VENV_STAMP)
	.venv/bin/dataforge run pipelines/sft_demo.yaml --overwrite

demo-dpo-data: out/dpo_demo/mds/index.json out/dpo_demo_heldout/mds/index.json

out/dpo_demo/mds/index.json: pipelines/dpo_demo.yaml $(CHAT_DEMO_DIR)/.done tokenizers/demo/.trained | $(VENV_STAMP)
	.venv/bin/dataforge run pipelines/dpo_demo.yaml --overwrite

# The held-out tenth of the chat sets, through the same pipelines (the trainer's eval:).
out/%_demo_heldout/mds/index.json: pipelines/%_demo.yaml $(CHAT_DEMO_DIR)/.done tokenizers/demo/.trained | $(VENV_STAMP)
	.venv/bin/dataforge run pipelines/$*_demo.yaml -o out/$*_demo_heldout --overwrite \
	  --set inputs.0.path=$(CURDIR)/$(CHAT_DEMO_DIR)/$*_heldout.jsonl

# Quick loader benchmark (tokenizes 2000 demo records per source into build/loader_bench).
bench-loader: data/demo/.done tokenizers/demo/.trained | $(VENV_STAMP)
	$(PY) benchmarks/loader_efficiency.py --quick
