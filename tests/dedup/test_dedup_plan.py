"""The dedup barrier end to end without Ray: prepare -> plan -> apply (in-process shards)."""

from __future__ import annotations

import random

import pyarrow.parquet as pq
import pytest
from dedup_testkit import kept_ids, make_table

from dataforge.ops.dedup import KeepConfig


def _edit(text: str, rate: float, seed: int) -> str:
    rng = random.Random(seed)
    chars = list(text)
    for _ in range(max(1, int(rate * len(chars)))):
        chars[rng.randrange(len(chars))] = rng.choice(chars)
    return "".join(chars)


@pytest.fixture
def labeled(reviews_zh, docs_en):
    """Real texts plus variants: ids 'u*' are unique, 'v*' variants of the 'b*' bases."""
    texts, langs, ids = [], [], []
    for i, (zh, en) in enumerate(zip(reviews_zh[:30], docs_en[:30], strict=True)):
        texts += [zh, en]
        langs += ["zh", "en"]
        ids += [
            f"b{i:02d}zh" if i < 15 else f"u{i:02d}zh",
            f"b{i:02d}en" if i < 15 else f"u{i:02d}en",
        ]
    for i in range(15):
        zh, en = reviews_zh[i], docs_en[i]
        variants = [
            (zh, "zh"),
            (zh.replace("，", ", ").replace("。", "。\n"), "zh"),
            (_edit(zh, 0.03, i), "zh"),
            (en.upper().replace("\n", "  "), "en"),
            (en.replace(", ", " ").replace(". ", ".  "), "en"),
        ]
        for j, (text, lang) in enumerate(variants):
            texts.append(text)
            langs.append(lang)
            ids.append(f"v{i:02d}{lang}{j}")
    return make_table(texts, langs, ids=ids)


def test_minhash_drops_variants_keeps_bases_and_uniques(labeled, dedup_runner):
    summary, out, root = dedup_runner(labeled, batch=16)
    kept = kept_ids(out)
    assert kept == {i for i in labeled.column("id").to_pylist() if i[0] in "bu"}
    drops = {r["drop"] for r in out.to_pylist() if r["drop"]}
    assert drops == {"dedup:minhash"}
    assert summary["docs"] == labeled.num_rows == summary["kept"] + summary["dropped"]
    assert summary["dropped"] == 75 and summary["clusters"] == 30
    assert summary["index_bytes_per_doc"] <= 200
    audit = pq.read_table(root / "dedup" / "clusters.parquet").to_pylist()
    assert len(audit) == 105 and sum(r["kept"] for r in audit) == 30
    assert all(r["cluster"] == "b" + r["id"][1:5] for r in audit if r["id"][0] == "v")
    published = pq.read_table(root / "dedup" / "signatures.parquet")
    assert set(published.column("id").to_pylist()) == kept


def test_exact_and_simhash(labeled, dedup_runner):
    _, out, _ = dedup_runner(labeled, method="exact")
    dropped = set(labeled.column("id").to_pylist()) - kept_ids(out)
    # exact: copies and whitespace/punctuation/case variants only
    assert dropped == {f"v{i:02d}{s}" for i in range(15) for s in ("zh0", "zh1", "en3", "en4")}
    _, out, _ = dedup_runner(labeled, method="simhash")
    dropped = set(labeled.column("id").to_pylist()) - kept_ids(out)
    assert {i for i in dropped if i[0] != "v"} == set()
    assert {f"v{i:02d}zh0" for i in range(15)} <= dropped


def test_deterministic_across_shards_and_batches(labeled, dedup_runner):
    shuffled = labeled.take(list(reversed(range(labeled.num_rows))))
    runs = [
        dedup_runner(labeled, batch=1000, index_shards=1),
        dedup_runner(labeled, batch=7, index_shards=4),
        dedup_runner(shuffled, batch=11, index_shards=3),
    ]
    kept = [kept_ids(out) for _, out, _ in runs]
    assert kept[0] == kept[1] == kept[2]
    audits = [
        sorted(
            tuple(r.values())
            for r in pq.read_table(root / "dedup" / "clusters.parquet").to_pylist()
        )
        for _, _, root in runs
    ]
    assert audits[0] == audits[1] == audits[2]


def test_prefer_source_then_lowest_id(reviews_zh, dedup_runner):
    text = reviews_zh[0]
    table = make_table(
        [text] * 4, ["zh"] * 4, sources=["web", "books", "web", "books"], ids=["c", "d", "a", "b"]
    )
    _, out, _ = dedup_runner(table, method="exact")
    assert kept_ids(out) == {"a"}
    _, out, _ = dedup_runner(table, method="exact", keep=KeepConfig(prefer_source=("books",)))
    assert kept_ids(out) == {"b"}


def test_empty_texts_are_never_clustered(reviews_zh, dedup_runner):
    texts = ["", "", "。。。", "  \n ", reviews_zh[0], reviews_zh[0]]
    table = make_table(texts, ["zh"] * 6)
    for method in ("exact", "minhash", "simhash"):
        summary, out, _ = dedup_runner(table, method=method)
        assert summary["empty"] == 4 and summary["dropped"] == 1
        assert kept_ids(out) == {f"doc{i:05d}" for i in range(5)}


def test_short_and_huge_documents(reviews_zh, dedup_runner):
    huge = "".join(reviews_zh) * 700  # ~ 4 M characters, 12 MB of UTF-8
    table = make_table(["短", "短", huge, huge + "附言", "ab"], ["zh", "zh", "zh", "zh", "en"])
    summary, out, _ = dedup_runner(table)
    assert kept_ids(out) == {"doc00000", "doc00002", "doc00004"}


def test_against_previous_run(labeled, reviews_zh, docs_en, dedup_runner, tmp_path):
    first = labeled.filter([i[0] == "b" for i in labeled.column("id").to_pylist()])
    _, _, prev_root = dedup_runner(first)
    new_ids = ["n-copy", "n-edit", "n-new"]
    table = make_table(
        [reviews_zh[3], _edit(docs_en[4], 0.02, 1), reviews_zh[35]], ["zh", "en", "zh"], ids=new_ids
    )
    summary, out, _ = dedup_runner(table, against=(str(prev_root),))
    assert kept_ids(out) == {"n-new"}
    assert summary["dropped_against"] == 2 and summary["against_docs"] == 30
    with pytest.raises(ValueError, match="incompatible signatures.*num_perm"):
        dedup_runner(table, against=(str(prev_root),), minhash={"num_perm": 64})
    with pytest.raises(FileNotFoundError):
        dedup_runner(table, against=(str(tmp_path / "nope"),))
