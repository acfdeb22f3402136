"""A quality_classifier model at an s3:// URI: fetched once into the node cache, scored the
same as the local directory (against the storage tests' S3-compatible server)."""

from __future__ import annotations

import json

import pyarrow as pa

from dataforge.ops.base import OpContext
from dataforge.ops.quality_classifier import QualityClassifier
from dataforge.records import DROP
from tests.storage.conftest import bucket, s3, s3_server  # noqa: F401 - the fixtures


def score(model: str, texts: list[str]) -> list[float]:
    op = QualityClassifier(QualityClassifier.Config(model=model, min_score=0.5), OpContext())
    assert op.validate() == []
    n = len(texts)
    table = pa.table(
        {"id": [str(i) for i in range(n)], "text": texts, "lang": ["en"] * n,
         "meta": ["{}"] * n, DROP: pa.nulls(n, pa.string())}
    )  # fmt: skip
    metas = op.prepare(table).column("meta").to_pylist()
    return [json.loads(m)["quality_score"] for m in metas]


def test_a_model_at_an_s3_uri_scores_as_the_local_one(
    trained,
    s3,  # noqa: F811 - the fixture imported above
    bucket,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    corpus, model = trained("en")
    monkeypatch.setenv("DATAFORGE_CACHE_DIR", str(tmp_path / "cache"))
    s3.upload_tree(model, bucket, "models/quality_en")
    texts = [json.loads(line)["text"] for line in (corpus / "neg.jsonl").open()][:20]
    uri = f"s3://{bucket}/models/quality_en"
    assert score(uri, texts) == score(str(model), texts)
    cached = [p for p in (tmp_path / "cache").rglob("model.bin")]
    assert len(cached) == 1  # fetched once, for validate and both setups
    missing = QualityClassifier(
        QualityClassifier.Config(model=f"s3://{bucket}/models/none", min_score=0.5), OpContext()
    )
    assert missing.validate() == [
        f"model s3://{bucket}/models/none: s3://{bucket}/models/none: not found"
    ]
