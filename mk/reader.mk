# dataforge.io._jsonl: JSON lines parsed a block at a time in C++ with the GIL released
# (dataforge/io/jsonl_fast.py); where it is not built, the reader parses line by line.
JSONL_SO := dataforge/io/_jsonl$(PY_EXT)

.PHONY: jsonl-reader
jsonl-reader: $(JSONL_SO)

TEST_DEPS += jsonl-reader
DEMO_DEPS += jsonl-reader
