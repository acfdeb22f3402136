"""Shared fixtures: small real-text inputs and pipeline files written into tmp dirs."""

from __future__ import annotations

import json
import signal
import textwrap
from pathlib import Path

import pytest

# A suite started with SIGINT ignored (`nohup make test &` or `make test &` from a script)
# would hand that to every child process it spawns: ignored signals stay ignored across
# exec, so the tests that interrupt a run would see it carry on. A handled signal is reset
# to the default at exec, so installing Python's own handler here gives the children the
# disposition an interactive shell gives them.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Real sentences (People's Daily style news and Python documentation), enough to run the
# pipeline end to end without the demo corpus.
ZH_TEXTS = [
    "中共中央总书记、国家主席江泽民发表新年讲话，向全国各族人民致以新年的祝贺。",
    "国务院总理李鹏今天在人民大会堂会见了来访的外国代表团，双方就共同关心的问题交换了意见。",
    "据新华社报道，今年我国粮食生产再获丰收，农民收入继续增加，农村经济保持稳定发展。",
    "北京市政府决定，今年将重点改善城市交通状况，加快地铁和城市道路建设的步伐。",
    "这家商店的服务态度很好，东西也便宜，我下次还会再来买的。",
]
EN_TEXTS = [
    "Return a new sorted list from the items in iterable. A custom key function can be "
    "supplied to customize the sort order, and the reverse flag can be set to request the "
    "result in descending order.",
    "The json module exposes an API familiar to users of the standard library marshal and "
    "pickle modules. It encodes Python objects as JSON strings and decodes them back.",
    "Open file and return a corresponding file object. If the file cannot be opened, an "
    "OSError is raised. See the reading and writing files section of the tutorial.",
]


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    return path


@pytest.fixture
def small_corpus(tmp_path: Path) -> Path:
    """Two sources, several files each, with a malformed line and a duplicate text."""
    root = tmp_path / "corpus"
    for f in range(3):
        recs = [{"text": f"{t}（第{f}批，第{i}条）"} for i, t in enumerate(ZH_TEXTS)]
        write_jsonl(root / "zh" / f"part-{f}.jsonl", recs)
    with open(root / "zh" / "part-1.jsonl", "a", encoding="utf-8") as fh:
        fh.write('{"text": "broken\n')
    for f in range(2):
        recs = [
            {"doc_id": f"d{f}-{i}", "text": t, "title": f"t{i}"} for i, t in enumerate(EN_TEXTS)
        ]
        write_jsonl(root / "en" / f"docs-{f}.jsonl", recs)
    return root


def _write_pipeline(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return path


@pytest.fixture
def write_pipeline():
    """``write_pipeline(dir, yaml_text) -> path`` of a pipeline file in ``dir``."""
    return _write_pipeline


@pytest.fixture
def pipeline_file(tmp_path: Path, small_corpus: Path) -> Path:
    return _write_pipeline(
        tmp_path,
        """
        name: small
        seed: 7
        max_error_rate: 0.2
        inputs:
          - {name: news_zh, path: "corpus/zh/*.jsonl", lang: zh}
          - {name: docs_en, path: "corpus/en/*.jsonl", lang: en, id_key: doc_id, meta_keys: [title]}
        output: {path: out/small, format: mds, size_limit: 4096}
    """,
    )


DEMO = Path(__file__).resolve().parents[1] / "data" / "demo"


def read_demo_texts(source: str, limit: int) -> list[str]:
    """The first ``limit`` texts of a demo-corpus source (``make demo-data``), read with
    dataforge's own reader; skips the test when the corpus is not built."""
    from dataforge.config import InputConfig, ReadConfig
    from dataforge.io.readers import InputTask, TaskReader

    if not (DEMO / ".done").is_file():
        pytest.skip(f"demo corpus not built ({DEMO}/.done missing): run `make demo-data`")
    fmt = "parquet" if source == "pkgdesc_en" else "jsonl"
    texts: list[str] = []
    for path in sorted((DEMO / source).glob("part-*")):
        task = InputTask("000-000000", source, str(path), path.name, path.stat().st_size)
        reader = TaskReader(
            task, InputConfig(name=source, path=str(path), format=fmt), ReadConfig()
        )
        for batch in reader.batches():
            texts += [
                t
                for t, d in zip(batch["text"].to_pylist(), batch["drop"].to_pylist(), strict=True)
                if d is None
            ]
            if len(texts) >= limit:
                return texts[:limit]
    return texts


@pytest.fixture(scope="session")
def demo_reader():
    """:func:`read_demo_texts` for test modules (``demo_reader(source, limit)``)."""
    return read_demo_texts


@pytest.fixture(scope="session")
def demo_zh_texts() -> list[str]:
    """Real Chinese text: 300 People's Daily articles and 1,500 product reviews."""
    return read_demo_texts("news_zh", 300) + read_demo_texts("reviews_zh", 1500)
