"""``dataforge ablate`` end to end: real pipelines (``dataforge run`` processes), the real
trainer, scores on held-out text, the verdict, and a rerun that resumes to the same result.

The corpus is the demo's Python documentation: half of the training documents are
corrupted (words shuffled within lines, spam lines inserted), the held-out set is clean
documents that no variant trains on. ``quality_filter`` removes nearly all corrupted
documents, so at equal tokens its model must be better on clean text, beyond the interval.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from dataforge.typed_config import ConfigError
from trainer.ablate.config import load_ablation
from trainer.ablate.run import prepare_output, run_ablation
from trainer.ablate.scoring import BatchLosses, bootstrap_difference, bootstrap_interval
from trainer.ablate.steps import eval_points, timing_ledger

DOCS = Path(__file__).resolve().parents[2] / "data" / "demo" / "docs_en"
SPAM = (
    "click here to win a free prize now",
    "buy cheap pills online best price today",
    "subscribe subscribe subscribe now",
)
TOKENS = 96 * 1024
MAX_TOKENS = 2048


def _corrupt(text: str, rng: random.Random) -> str:
    lines = []
    for line in text.split("\n"):
        words = line.split()
        rng.shuffle(words)
        lines.append(" ".join(words))
        if rng.random() < 0.8:
            lines.append(rng.choice(SPAM))
    return "\n".join(lines)


def _write_jsonl(path: Path, docs: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for doc in docs:
            f.write(json.dumps(doc, ensure_ascii=False) + "\n")


def _pipeline(path: Path, stages: str) -> None:
    path.write_text(
        "name: v\nseed: 3\nexecutor: local\n"
        "inputs: [{name: docs, path: corpus/train.jsonl, lang: en, id_key: id}]\n"
        f"stages: [{stages}{{op: tokenize, tokenizer: tokenizer, add_eos: true}}]\n"
        "output: {path: unused, format: mds}\n",
        encoding="utf-8",
    )


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not DOCS.is_dir():
        pytest.skip("the demo corpus (make demo-data) is missing")
    from dataforge.tokenization import TokenizerSpec, train_tokenizer

    root = tmp_path_factory.mktemp("ablate")
    docs = [json.loads(line) for p in sorted(DOCS.glob("*.jsonl")) for line in p.open()]
    rng = random.Random(0)
    train = [
        {"id": d["id"], "text": _corrupt(d["text"], rng) if i % 2 else d["text"]}
        for i, d in enumerate(docs[:160])
    ]
    _write_jsonl(root / "corpus" / "train.jsonl", train)
    _write_jsonl(root / "heldout" / "clean.jsonl", docs[300:])
    spec = TokenizerSpec(
        name="ablate",
        inputs=(str(root / "corpus" / "train.jsonl"),),
        vocab_size=2000,
        character_coverage=0.9995,
        num_threads=1,
    )
    train_tokenizer(spec, root / "tokenizer")
    _pipeline(root / "raw.yaml", "")
    _pipeline(root / "filtered.yaml", "{op: clean}, {op: quality_filter}, ")
    recipe = {
        "model": {"preset": "tiny", "max_seq_len": 256},
        "train": {"precision": "fp32", "device": "cpu", "tensorboard": False, "log_interval": 1000},
        "optim": {"lr": 3.0e-3, "min_lr": 3.0e-4, "warmup_steps": 4},
        "data": {"loader": {"max_tokens": MAX_TOKENS, "max_seq_len": 256, "packing": True}},
    }
    ablation = {
        "name": "corrupted",
        "tokenizer": "tokenizer",
        "variants": [
            {"name": "raw", "pipeline": "raw.yaml"},
            {"name": "filtered", "pipeline": "filtered.yaml"},
        ],
        "train": {"tokens": TOKENS, "eval_points": 3, "recipe": recipe, "bootstrap": 500},
        "seeds": [1],
        "eval": [{"name": "clean_en", "inputs": [{"path": "heldout/clean.jsonl", "lang": "en"}]}],
    }
    (root / "ablation.yaml").write_text(json.dumps(ablation), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def result(workspace: Path) -> dict:
    config = load_ablation(workspace / "ablation.yaml")
    return run_ablation(config, workspace / "out", log=lambda message: None)


@pytest.mark.slow
def test_filtered_variant_beats_raw_beyond_interval(result: dict) -> None:
    by_name = {v["name"]: v for v in result["variants"]}
    raw, filtered = by_name["raw"], by_name["filtered"]
    assert raw["records_kept"] == 160
    assert filtered["records_kept"] < 100  # the corrupted half is (nearly all) gone
    verdict = result["verdict"]["clean_en"]
    assert verdict["best"] == "filtered" and verdict["runner_up"] == "raw"
    assert verdict["beyond_interval"] and verdict["difference_ci"][1] < 0
    # Both models are scored on the same batches: the paired interval is the one that counts.
    assert filtered["eval"]["clean_en"]["loss"] < raw["eval"]["clean_en"]["loss"]
    # The smaller variant is repeated rather than trained on fewer tokens.
    assert filtered["epochs"] > raw["epochs"]


@pytest.mark.slow
def test_tokens_trained_equal_within_one_batch(result: dict) -> None:
    trained = [v["tokens_trained"] for v in result["variants"]]
    assert max(trained) - min(trained) <= MAX_TOKENS
    assert all(TOKENS <= t < TOKENS + MAX_TOKENS for t in trained)
    for variant in result["variants"]:
        tokens = [p["tokens"] for p in variant["curves"]["clean_en"]]
        assert tokens == sorted(tokens) and len(tokens) >= 3


@pytest.mark.slow
def test_rerun_resumes_to_identical_results(workspace: Path, result: dict) -> None:
    written = json.loads((workspace / "out" / "ablation.json").read_text(encoding="utf-8"))
    assert written["verdict"] == result["verdict"]
    again = run_ablation(
        load_ablation(workspace / "ablation.yaml"), workspace / "out", log=lambda m: None
    )
    for a, b in zip(again["variants"], result["variants"], strict=True):
        assert a["eval"] == b["eval"] and a["tokens_trained"] == b["tokens_trained"]
        # The rerun trained nothing; the time reported is still the training's.
        assert a["train_wall_s"] >= b["train_wall_s"] > 1.0
        assert a["pipeline_wall_s"] >= b["pipeline_wall_s"] > 0.5
    html = (workspace / "out" / "report.html").read_text(encoding="utf-8")
    assert html.count('data-plot="curve-0"') == 1 and "filtered" in html and "<table>" in html


@pytest.mark.slow
def test_same_seed_in_a_new_folder_gives_the_same_losses(workspace: Path, result: dict) -> None:
    overrides = ["variants=[{name: filtered, pipeline: filtered.yaml}]"]
    again = run_ablation(
        load_ablation(workspace / "ablation.yaml", overrides), workspace / "out2", lambda m: None
    )
    first = {v["name"]: v for v in result["variants"]}["filtered"]
    assert again["variants"][0]["eval"]["clean_en"]["loss"] == first["eval"]["clean_en"]["loss"]


def test_cli_refuses_a_variant_with_another_tokenizer(workspace: Path, tmp_path: Path) -> None:
    other = workspace / "other.yaml"
    other.write_text(
        (workspace / "raw.yaml")
        .read_text()
        .replace("tokenizer: tokenizer", "tokenizer: elsewhere"),
        encoding="utf-8",
    )
    done = subprocess.run(
        [sys.executable, "-m", "dataforge.cli", "ablate", str(workspace / "ablation.yaml"),
         "-o", str(tmp_path / "o"), "--set", "variants.0.pipeline=other.yaml"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "variants.raw" in lines[0] and "elsewhere" in lines[0]
    assert not (tmp_path / "o").exists()


def test_output_folder_not_written_by_an_ablation_is_refused(tmp_path: Path) -> None:
    mine = tmp_path / "project"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me", encoding="utf-8")
    with pytest.raises(ConfigError, match="no ablation wrote"):
        prepare_output(mine, "x")
    assert (mine / "notes.txt").read_text(encoding="utf-8") == "keep me"
    with prepare_output(tmp_path / "fresh", "x"):
        with pytest.raises(ConfigError, match="holds ablation 'x'"):
            prepare_output(tmp_path / "fresh", "y")
        # A second run of the same ablation into the same folder, while the first runs.
        with pytest.raises(ConfigError, match=r"fresh is being written by another .* pid"):
            prepare_output(tmp_path / "fresh", "x")
    prepare_output(tmp_path / "fresh", "x").release()  # free again once the first ended
    (tmp_path / "file").write_text("", encoding="utf-8")
    with pytest.raises(ConfigError, match="not a directory"):
        prepare_output(tmp_path / "file", "x")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("train.tokens=0", "train.tokens=0"),
        ("train.eval_points=0", "eval_points"),
        ("seeds=[1, 1]", "distinct"),
        ("variants.1.name=raw", "repeated: raw"),
        ("variants.0.name=../x", "not a valid name"),
        ("eval.0.mds=somewhere", "exactly one of"),
    ],
)
def test_bad_values_are_one_line_errors(workspace: Path, override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        load_ablation(workspace / "ablation.yaml", [override])


def test_eval_points_end_at_the_last_step() -> None:
    assert eval_points(48, 3) == [16, 32, 48]
    assert eval_points(50, 3) == [16, 32, 48, 50]
    assert eval_points(2, 5) == [1, 2]


def test_bootstrap_intervals_contain_the_loss_and_pair_the_batches() -> None:
    a = BatchLosses([10.0, 20.0, 30.0, 40.0], [10, 10, 10, 10])
    b = BatchLosses([11.0, 21.0, 31.0, 41.0], [10, 10, 10, 10])
    lo, hi = bootstrap_interval([a], 1000)
    assert lo <= a.loss <= hi and lo < hi
    # b is a shifted by exactly 0.1 nats per token on every batch: the paired interval of
    # the difference is that one value, though each loss alone varies widely.
    assert bootstrap_difference([a], [b], 1000) == pytest.approx([-0.1, -0.1])


def _validate(workspace: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dataforge.cli", "validate", str(workspace / "ablation.yaml"),
         *args],
        capture_output=True, text=True, check=False,
    )  # fmt: skip


def test_validate_checks_an_ablation_file_without_running_it(
    workspace: Path, tmp_path: Path
) -> None:
    done = _validate(workspace, "-o", str(tmp_path / "o"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok: ablation corrupted: variants raw (")
    assert "eval sets ['clean_en']" in done.stdout and f"{TOKENS} tokens" in done.stdout
    assert not (tmp_path / "o").exists()  # nothing ran, nothing written


@pytest.mark.parametrize(
    ("override", "where", "what"),
    [
        ("eval.0.inputs.0.path=heldout/none.jsonl", "eval.clean_en:", "none.jsonl"),
        ("variants.1.pipeline=missing.yaml", "variants.filtered (", "missing.yaml"),
        ("train.recipe.model.preset=huge", "train.recipe:", "valid: tiny"),
        ("train.recipe.data.loader.packing=false", "packing must be true", "packing"),
        ("train.tokens=0", "train.tokens=0", "valid range"),
    ],
)
def test_validate_names_each_problem_of_an_ablation_file(
    workspace: Path, override: str, where: str, what: str
) -> None:
    done = _validate(workspace, "--set", override)
    assert done.returncode == 2, done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and where in lines[0] and what in lines[0], lines


def test_timing_ledger_sums_every_attempt(tmp_path: Path) -> None:
    ledger = tmp_path / "seed_1" / "timing.json"
    with timing_ledger(ledger, "train") as first:
        sum(range(200_000))
    with pytest.raises(KeyboardInterrupt), timing_ledger(ledger, "train"):
        raise KeyboardInterrupt  # an interrupted attempt still counts
    with timing_ledger(ledger, "train") as total:
        pass
    assert total["train_wall_s"] >= first["train_wall_s"] > 0
    assert json.loads(ledger.read_text(encoding="utf-8")) == total
