# Dedup benchmarks (issue 5). Results are written under build/bench/ and are no-ops while
# newer than the dedup sources and the demo corpus stamp; delete them to re-measure.
# The 1M-document end-to-end run is not a target (minutes of both cores): run
#   .venv/bin/python benchmarks/dedup_speed.py --scale 1000000 --shards 2
# by hand.

PY ?= .venv/bin/python
VENV_STAMP ?= .venv/.installed
DEDUP_SOURCES := $(wildcard dataforge/ops/dedup/*.py dataforge/ops/barrier/*.py) dataforge/runtime/shards.py
DEDUP_BENCH_DIR := build/bench

.PHONY: bench-dedup
bench-dedup: $(DEDUP_BENCH_DIR)/dedup_quality.txt $(DEDUP_BENCH_DIR)/dedup_speed.txt

$(DEDUP_BENCH_DIR)/dedup_quality.txt: benchmarks/dedup_quality.py $(DEDUP_SOURCES) data/demo/.done | $(VENV_STAMP)
	mkdir -p $(dir $@)
	$(PY) benchmarks/dedup_quality.py > $@.tmp && mv $@.tmp $@
	cat $@

$(DEDUP_BENCH_DIR)/dedup_speed.txt: benchmarks/dedup_speed.py $(DEDUP_SOURCES) data/demo/.done | $(VENV_STAMP)
	mkdir -p $(dir $@)
	$(PY) benchmarks/dedup_speed.py > $@.tmp && mv $@.tmp $@
	cat $@

# dataforge.ops.dedup._verify: the barrier's exact pair verification (Jaccard, own content)
# pair by pair in C++ with the GIL released (dataforge/ops/dedup/verify.py);
# dataforge.ops.dedup._shingles: the shingle hashes (dataforge/ops/dedup/shingles.py) in one
# rolling pass; dataforge.ops.dedup._template: the corpus template's n-grams and residues
# (dataforge/ops/dedup/template.py) one document at a time. The same values as their numpy
# kernels, which run where they are not built.
DEDUP_VERIFY_SO := dataforge/ops/dedup/_verify$(PY_EXT)
DEDUP_SHINGLES_SO := dataforge/ops/dedup/_shingles$(PY_EXT)
DEDUP_TEMPLATE_SO := dataforge/ops/dedup/_template$(PY_EXT)
$(DEDUP_VERIFY_SO) $(DEDUP_SHINGLES_SO) $(DEDUP_TEMPLATE_SO): dataforge/ops/dedup/_buffer.h

.PHONY: dedup-verify
dedup-verify: $(DEDUP_VERIFY_SO) $(DEDUP_SHINGLES_SO) $(DEDUP_TEMPLATE_SO)

TEST_DEPS += dedup-verify
DEMO_DEPS += dedup-verify
