# `make demo-ablate`: the demo recipe against the raw demo corpus at equal tokens, tiny
# models on the CPU (pipelines/ablate_demo.yaml); results in out/ablate/ablation.json and
# out/ablate/report.html. A rerun resumes what is done.
.PHONY: demo-ablate

# The demo's set-up targets are named in the recipe: DEMO_DEPS is complete only once every
# mk/*.mk is read, after this file.
demo-ablate: setup
	$(MAKE) --no-print-directory $(DEMO_DEPS)
	.venv/bin/dataforge ablate pipelines/ablate_demo.yaml -o out/ablate
