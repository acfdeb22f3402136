"""perplexity_filter inside a whole pipeline run (in-process executor): accounting and output."""

from __future__ import annotations

import json
import random
from pathlib import Path

from lm_testkit import NEWS_ZH, read_fixture

from dataforge.config import load_pipeline
from dataforge.inspect import summarize
from dataforge.io.mds import iter_samples
from dataforge.runtime.executors.local import LocalExecutor
from dataforge.runtime.pipeline import run_pipeline


def test_noisy_source_is_filtered_and_counted(tmp_path: Path, zh_model: Path) -> None:
    news = read_fixture(NEWS_ZH)[:40]
    rng = random.Random(7)
    alphabet = sorted({c for r in news for c in r["text"] if not c.isspace()})
    noise = [
        {"id": f"n{i}", "text": "".join(rng.choice(alphabet) for _ in range(200))}
        for i in range(15)
    ]
    noise += [{"id": "controls", "text": "\x01\x02 \n\x7f"}]  # blank once normalized
    for name, records in (("news", news), ("noise", noise)):
        (tmp_path / f"{name}.jsonl").write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8"
        )
    (tmp_path / "p.yaml").write_text(
        "name: ppl\n"
        "inputs:\n"
        "  - {name: news, path: news.jsonl, lang: zh, id_key: id}\n"
        "  - {name: noise, path: noise.jsonl, lang: zh, id_key: id}\n"
        f"stages:\n  - {{op: perplexity_filter, models: {{zh: {zh_model}}}, max_ppl: {{zh: 1500}}}}\n"
        "output: {path: out, format: mds}\n",
        encoding="utf-8",
    )
    out = tmp_path / "out"
    manifest = run_pipeline(
        load_pipeline(tmp_path / "p.yaml"), out, LocalExecutor(), log=lambda m: None
    )
    by_source = manifest["counts"]["by_source"]
    assert by_source["noise"]["input"] == 16
    assert by_source["noise"]["dropped"] == {"perplexity": 15, "perplexity:empty": 1}
    assert by_source["noise"]["kept"] == 0
    assert by_source["news"]["kept"] + sum(by_source["news"]["dropped"].values()) == 40
    assert by_source["news"]["kept"] >= 38  # real news stays under the cut
    samples = list(iter_samples(out))
    assert len(samples) == by_source["news"]["kept"]
    assert all(0 < s["meta"]["ppl"] <= 1500 for s in samples)
    assert "news" in summarize(out).get("perplexity_histogram", {})
