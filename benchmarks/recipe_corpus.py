"""The corpus and the pipeline of the whole-recipe benchmarks (``scale.py``, ``peers.py``).

Documents come from the demo corpus (``data/demo``, the sources of
``ops_throughput.SOURCES``) and are written as jsonl files per language
(``<corpus>/zh/part-NNNN.jsonl``, ``<corpus>/en/...``); :func:`pipeline_yaml` is the
recipe over them: clean -> quality_filter -> MinHash dedup [-> tokenize] -> output.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path

from ops_throughput import SOURCES, read_texts

__all__ = ["demo_documents", "demo_files", "pipeline_yaml", "write_jsonl"]

_PIPELINE = """\
name: {name}
seed: 1
inputs:
  - {{name: zh, path: "{corpus}/zh/*.jsonl", lang: zh, id_key: id}}
  - {{name: en, path: "{corpus}/en/*.jsonl", lang: en, id_key: id}}
ray: {{num_cpus: {cpus}}}
stages:
  - {{op: clean}}
  - {{op: quality_filter}}
  - {{op: dedup, method: minhash{threshold}}}
{tokenize}output: {{path: {out}, format: {format}{compression}}}
"""


def demo_files(data: Path) -> Iterator[tuple[str, str, Path, list[str]]]:
    """``(source, lang, path, texts)`` of every demo file, in source and file order."""
    for name, (pattern, lang) in SOURCES.items():
        for path in sorted(data.glob(pattern)):
            yield name, lang, path, read_texts(str(path))


def demo_documents(data: Path) -> dict[str, list[tuple[str, str]]]:
    """``(id, text)`` of every demo document per language (zh, en), in source and file
    order; ids are ``<source>/<file name>/<line>``."""
    by_lang: dict[str, list[tuple[str, str]]] = {"zh": [], "en": []}
    for name, lang, path, texts in demo_files(data):
        by_lang[lang] += [(f"{name}/{path.name}/{i}", t) for i, t in enumerate(texts)]
    return by_lang


def write_jsonl(
    folder: Path, docs: Iterable[tuple[str, str]], files: int, start: int = 0
) -> tuple[int, int]:
    """``docs`` as ``{"id", "text"}`` lines in ``files`` files ``folder/part-NNNN.jsonl``
    (replaced), document k (counted from ``start``) in file ``k % files``. Returns the
    documents and bytes written."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    outs = [open(folder / f"part-{k:04d}.jsonl", "w") for k in range(files)]  # noqa: SIM115
    count = written = 0
    try:
        for doc_id, text in docs:
            line = json.dumps({"id": doc_id, "text": text}, ensure_ascii=False) + "\n"
            outs[(start + count) % files].write(line)
            count += 1
            written += len(line.encode())
    finally:
        for out in outs:
            out.close()
    return count, written


def pipeline_yaml(
    name: str,
    corpus: Path,
    out: Path,
    cpus: int,
    *,
    threshold: float | None = None,
    tokenizer: Path | None = None,
    output: str = "jsonl",
) -> str:
    """The recipe over ``corpus``: dedup at ``threshold`` (None: dedup's default), then
    tokenize with ``tokenizer`` when given, into ``out`` as ``output`` (mds: zstd)."""
    tokenize = (
        f"  - {{op: tokenize, tokenizer: {tokenizer}, add_bos: true, add_eos: true}}\n"
        if tokenizer
        else ""
    )
    return _PIPELINE.format(
        name=name,
        corpus=corpus,
        out=out,
        cpus=cpus,
        threshold="" if threshold is None else f", threshold: {threshold}",
        tokenize=tokenize,
        format=output,
        compression=", compression: zstd" if output == "mds" else "",
    )
