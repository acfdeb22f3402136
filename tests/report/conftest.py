"""A demo-like pipeline run (every stage of pipelines/demo.yaml on small real text) made
once per session by ``dataforge run`` under a pseudo-terminal, and a tiny training run."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
KENLM_BIN = ROOT / "build" / "kenlm" / "bin"
sys.path.insert(0, str(Path(__file__).parent))  # the test modules import chromium_kit


def _split(src: Path, dest: Path, parts: int, extra: list[dict] | None = None) -> None:
    records = [json.loads(line) for line in src.read_text(encoding="utf-8").splitlines()]
    records += extra or []
    dest.mkdir(parents=True)
    for k in range(parts):
        with open(dest / f"part-{k}.jsonl", "w", encoding="utf-8") as f:
            for r in records[k::parts]:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")


def _corpus(root: Path) -> None:
    reviews = [
        json.loads(line)
        for line in (FIXTURES / "tokenization" / "zh_reviews.jsonl").read_text("utf-8").splitlines()
    ]
    # near-duplicates (dedup clusters) and too-short lines (quality drops)
    extra = [
        {"id": f"dup-{i}-{k}", "text": r["text"] + "！" * k}
        for i, r in enumerate(reviews[:12])
        for k in range(1, 1 + i % 4)
    ]
    extra += [{"id": f"short-{i}", "text": "好"} for i in range(6)]
    _split(FIXTURES / "lm_news_zh.jsonl", root / "news_zh", 3)
    _split(FIXTURES / "tokenization" / "zh_reviews.jsonl", root / "reviews_zh", 2, extra)
    _split(FIXTURES / "lm_docs_en.jsonl", root / "docs_en", 2)


def _models(root: Path) -> dict[str, Path]:
    from dataforge.lm.train import train_lm

    if not (KENLM_BIN / "lmplz").is_file():
        pytest.fail(f"{KENLM_BIN}/lmplz is not built: run `make kenlm` (make test does)")
    models = {}
    for lang, fixture in (("zh", "lm_news_zh.jsonl"), ("en", "lm_docs_en.jsonl")):
        models[lang] = root / f"{lang}.bin"
        train_lm(
            str(FIXTURES / fixture),
            models[lang],
            lang=lang,
            tokenizer=None,
            segmentation="chars",
            order=3,
            memory="64M",
            discount_fallback=True,
            kenlm_bin=KENLM_BIN,
        )
    return models


PIPELINE = """\
name: demo_like
seed: 7
inputs:
  - {{name: news_zh, path: "{data}/news_zh/*.jsonl", lang: zh, id_key: id}}
  - {{name: reviews_zh, path: "{data}/reviews_zh/*.jsonl", lang: zh, id_key: id}}
  - {{name: docs_en, path: "{data}/docs_en/*.jsonl", lang: en, id_key: id}}
ray: {{num_cpus: 2}}
stages:
  - {{op: clean}}
  - {{op: quality_filter}}
  - {{op: perplexity_filter, models: {{zh: {zh}, en: {en}}}, max_ppl: {{zh: 60, en: 30}}}}
  - {{op: dedup, method: minhash}}
  - {{op: sample, alpha: 0.7, unit: chars, keep_total: true, max_epochs: 3}}
  - {{op: tokenize, tokenizer: {tok}, add_bos: true, add_eos: true}}
output: {{path: {out}, format: mds, compression: zstd, rejects: true}}
"""


def run_under_pty(
    args: list[str], env: dict[str, str], timeout: float = 600
) -> tuple[int, str, str]:
    """Run with stdin and stderr on a pseudo-terminal, stdout on a pipe. Returns the exit
    code, stdout and everything written to the terminal."""
    master, slave = pty.openpty()
    os.set_blocking(master, True)
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    proc = subprocess.Popen(
        args, stdin=slave, stdout=subprocess.PIPE, stderr=slave, env=env, cwd=ROOT
    )
    os.close(slave)
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the terminal's last writer closed it
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        stdout, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(timeout=10)
    os.close(master)
    return proc.returncode, stdout.decode(), b"".join(chunks).decode(errors="replace")


@pytest.fixture(scope="session")
def demo_like_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """``dataforge run`` of a demo-like pipeline under a pseudo-terminal."""
    from dataforge.tokenization import TokenizerSpec, train_tokenizer

    root = tmp_path_factory.mktemp("demo_like")
    _corpus(root / "data")
    models = _models(root)
    spec = TokenizerSpec(name="tiny", inputs=(str(FIXTURES / "tokenization" / "*.jsonl"),),
                         vocab_size=2000, character_coverage=0.995, num_threads=1)  # fmt: skip
    train_tokenizer(spec, root / "tok")
    out = root / "out"
    pipeline = root / "pipeline.yaml"
    pipeline.write_text(
        PIPELINE.format(
            data=root / "data", zh=models["zh"], en=models["en"], tok=root / "tok", out=out
        ),
        encoding="utf-8",
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "COLUMNS": "160",
        "LINES": "40",
        "TERM": "xterm-256color",
    }
    env.pop("RAY_ADDRESS", None)
    code, stdout, terminal = run_under_pty(
        [sys.executable, "-m", "dataforge.cli", "run", str(pipeline)], env
    )
    (root / "terminal.txt").write_text(terminal, encoding="utf-8")
    return {"code": code, "stdout": stdout, "terminal": terminal, "out": out, "pipeline": pipeline}
