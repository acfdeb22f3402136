# dataforge.io._jsonl: JSON lines parsed a block at a time in C++ with the GIL released
# (dataforge/io/jsonl_fast.py); where it is not built, the reader parses line by line.
JSONL_SO := dataforge/io/_jsonl$(shell $(PYTHON) -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
JSONL_SRC := dataforge/io/_jsonl.cpp

.PHONY: jsonl-reader
jsonl-reader: $(JSONL_SO)

$(JSONL_SO): $(JSONL_SRC)
	c++ -O3 -DNDEBUG -std=c++17 -shared -fPIC -fvisibility=hidden -Wall \
	  -I$(shell $(PYTHON) -c "import sysconfig; print(sysconfig.get_path('include'))") \
	  $(JSONL_SRC) -o $@.tmp
	mv $@.tmp $@

TEST_DEPS += jsonl-reader
DEMO_DEPS += jsonl-reader
