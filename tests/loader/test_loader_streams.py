"""The loader end to end over small MDS shards: exactly-once across ranks, exact resume
(with and without workers), budget, packing boundaries, SFT masks, DPO pairs, errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from loader_shards import FIRST, write_mds

from dataforge.loader import IGNORE_INDEX, LoaderConfig, build_dataloader


def _lengths(n: int, seed: int = 0, high: int = 200) -> list[int]:
    return np.random.default_rng(seed).integers(1, high, n).tolist()


@pytest.fixture(scope="module")
def pretrain_dir(tmp_path_factory) -> tuple[Path, list[dict]]:
    out = tmp_path_factory.mktemp("pretrain") / "mds"
    samples = write_mds(out, _lengths(400, high=160), "pretrain", compression="zstd")
    return out, samples


def _config(path: Path, cache_dir: str, **kw) -> LoaderConfig:
    base = dict(
        streams=[{"path": str(path)}], max_tokens=512, max_seq_len=128, shuffle_buffer=64, seed=7
    )
    return LoaderConfig(**{**base, **kw, "cache_dir": cache_dir})


def _doc_starts(input_ids: torch.Tensor) -> list[tuple[int, int, int]]:
    """(row, column, sample index) of every document start (first token FIRST + i)."""
    rows, cols = torch.nonzero(input_ids >= FIRST, as_tuple=True)
    return [(int(r), int(c), int(input_ids[r, c]) - FIRST) for r, c in zip(rows, cols, strict=True)]


def _epoch(loader) -> list[dict]:
    return [batch for batch in loader]


def _same(a: list[dict], b: list[dict]) -> bool:
    return len(a) == len(b) and all(
        x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
        for x, y in zip(a, b, strict=True)
    )


@pytest.mark.parametrize("packing", [False, True])
def test_two_ranks_see_every_sample_exactly_once_with_equal_batch_counts(
    pretrain_dir, cache_dir, packing
):
    path, samples = pretrain_dir
    loaders = [
        build_dataloader(_config(path, cache_dir, rank=r, world_size=2, packing=packing))
        for r in (0, 1)
    ]
    try:
        for _ in range(2):  # two epochs: a fresh shuffle each, still exactly once
            epochs = [_epoch(loader) for loader in loaders]
            assert len(epochs[0]) == len(epochs[1]) > 0
            seen = [
                s
                for epoch in epochs
                for batch in epoch
                for _, _, s in _doc_starts(batch["input_ids"])
            ]
            assert sorted(seen) == list(range(len(samples)))
            for batch in epochs[0] + epochs[1]:
                assert batch["input_ids"].numel() <= 512
    finally:
        for loader in loaders:
            loader.close()


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_after_k_batches_reproduces_the_rest_exactly(pretrain_dir, cache_dir, workers):
    path, _ = pretrain_dir
    with build_dataloader(_config(path, cache_dir)) as reference:
        full = _epoch(reference) + _epoch(reference)[:3]
    n_first = len(full) - 3
    k = n_first // 2 + 1
    with build_dataloader(_config(path, cache_dir, num_workers=workers)) as loader:
        head = []
        for batch in loader:
            head.append(batch)
            if len(head) == k:
                break
        state = loader.state_dict()
    assert _same(head, full[:k])
    assert state["epoch"] == 0 and state["batches_consumed"] == k
    with build_dataloader(_config(path, cache_dir, num_workers=workers)) as resumed:
        resumed.load_state_dict(state)
        resumed.set_epoch(0)  # a trainer's per-epoch set_epoch keeps the restored progress
        rest = _epoch(resumed)
        assert resumed.state_dict()["epoch"] == 1 and resumed.state_dict()["batches_consumed"] == 0
        nxt = []
        for batch in resumed:
            nxt.append(batch)
            if len(nxt) == 3:
                break
    assert _same(rest, full[k:n_first])
    assert _same(nxt, full[n_first:])


def test_persistent_workers_follow_epochs_and_resume(pretrain_dir, cache_dir):
    path, _ = pretrain_dir
    with build_dataloader(_config(path, cache_dir)) as reference:
        epochs = [_epoch(reference), _epoch(reference)]
    cfg = _config(path, cache_dir, num_workers=2, persistent_workers=True, prefetch_factor=3)
    with build_dataloader(cfg) as loader:
        assert _same(_epoch(loader), epochs[0])
        assert _same(_epoch(loader), epochs[1])


def test_state_from_other_plan_is_refused(pretrain_dir, cache_dir):
    path, _ = pretrain_dir
    with (
        build_dataloader(_config(path, cache_dir)) as a,
        build_dataloader(_config(path, cache_dir, seed=8)) as b,
    ):
        with pytest.raises(ValueError, match="different plan"):
            b.load_state_dict(a.state_dict())


def test_packed_rows_restart_positions_and_never_label_across_documents(pretrain_dir, cache_dir):
    path, samples = pretrain_dir
    cfg = _config(path, cache_dir, packing=True, shuffle_buffer=128, long_samples="truncate")
    with build_dataloader(cfg) as loader:
        real = padded = 0
        for batch in loader:
            ids, labels, pos, mask = (
                batch["input_ids"],
                batch["labels"],
                batch["position_ids"],
                batch["attention_mask"],
            )
            assert ids.shape[1] == 128 and ids.numel() <= 512
            starts = _doc_starts(ids)
            segments = []
            for row in range(ids.shape[0]):
                row_starts = [(c, s) for r, c, s in starts if r == row]
                end_of_row = int(mask[row].sum())
                for j, (col, sample) in enumerate(row_starts):
                    end = row_starts[j + 1][0] if j + 1 < len(row_starts) else end_of_row
                    tokens = torch.from_numpy(
                        samples[sample]["tokens"][:128].astype(np.int64)
                    )  # truncated
                    assert torch.equal(ids[row, col:end], tokens)
                    assert torch.equal(pos[row, col:end], torch.arange(end - col))
                    assert torch.equal(labels[row, col : end - 1], tokens[1:])
                    assert (
                        labels[row, end - 1] == IGNORE_INDEX
                    )  # the next document's first token is no target
                    segments.append(end - col)
                if end_of_row < ids.shape[1]:
                    segments.append(ids.shape[1] - end_of_row)
                    assert (labels[row, end_of_row:] == IGNORE_INDEX).all()
            assert (
                batch["cu_seqlens"].tolist() == np.concatenate([[0], np.cumsum(segments)]).tolist()
            )
            real += int(mask.sum())
            padded += ids.numel()
    assert real == sum(min(s["num_tokens"], 128) for s in samples)
    assert real / padded > 0.95  # rows are filled (the benchmark measures efficiency at scale)


@pytest.mark.parametrize("packing", [False, True])
def test_sft_labels_mask_the_prompt(tmp_path, cache_dir, packing):
    samples = write_mds(tmp_path / "sft", _lengths(120, seed=1, high=100), "sft")
    cfg = _config(tmp_path / "sft", cache_dir, mode="sft", packing=packing)
    seen = []
    with build_dataloader(cfg) as loader:
        for batch in loader:
            ids, labels = batch["input_ids"], batch["labels"]
            for row, col, s in _doc_starts(ids):
                seen.append(s)
                tokens = samples[s]["tokens"].astype(np.int64)
                loss = samples[s]["loss_mask"].astype(bool)
                n = len(tokens)
                expected = np.full(n, IGNORE_INDEX)
                expected[:-1] = np.where(loss[1:], tokens[1:], IGNORE_INDEX)
                assert labels[row, col : col + n].tolist() == expected.tolist()
    assert sorted(seen) == list(range(120))


def test_dpo_pairs_stay_aligned_in_one_batch(tmp_path, cache_dir):
    samples = write_mds(tmp_path / "dpo", _lengths(90, seed=2, high=120), "dpo")
    cfg = _config(tmp_path / "dpo", cache_dir, mode="dpo", max_tokens=1024, max_seq_len=100)
    seen = []
    with build_dataloader(cfg) as loader:
        for batch in loader:
            assert {k.split("_", 1)[0] for k in batch} == {"chosen", "rejected"}
            c_ids, r_ids = batch["chosen_input_ids"], batch["rejected_input_ids"]
            assert c_ids.shape == r_ids.shape and 2 * c_ids.numel() <= 1024
            for i in range(c_ids.shape[0]):
                s = int(c_ids[i, 0]) - FIRST
                seen.append(s)
                assert int(r_ids[i, 0]) - FIRST == s
                prompt = samples[s]["prompt_tokens"].astype(np.int64)
                for side, token in (("chosen", 901), ("rejected", 902)):
                    ids, labels = batch[f"{side}_input_ids"][i], batch[f"{side}_labels"][i]
                    mask = batch[f"{side}_attention_mask"][i]
                    n = int(mask.sum())
                    p = int(
                        ((ids[:n] != 901) & (ids[:n] != 902)).sum()
                    )  # prompts here are never cut
                    assert torch.equal(ids[:p], torch.from_numpy(prompt[len(prompt) - p :]))
                    assert (ids[p:n] == token).all()
                    assert (labels[: p - 1] == IGNORE_INDEX).all()  # no target inside the prompt
                    assert (labels[p - 1 : n - 1] == token).all()
                    assert (labels[n - 1 :] == IGNORE_INDEX).all()
    assert sorted(seen) == list(range(90))
    assert loader.stats.truncated == sum(s["num_tokens"] > 100 for s in samples)


@pytest.mark.parametrize(
    ("mode", "column"), [("sft", "loss_mask"), ("dpo", "rejected_tokens"), ("pretrain", "tokens")]
)
def test_missing_column_names_the_column_and_mode(tmp_path, cache_dir, mode, column):
    write_mds(tmp_path / "bad", [5, 6, 7], mode, drop_columns=(column,))
    with pytest.raises(ValueError, match=rf"lack column '{column}' required by mode '{mode}'"):
        build_dataloader(_config(tmp_path / "bad", cache_dir, mode=mode))


def test_long_samples_are_truncated_or_dropped_and_counted(tmp_path, cache_dir):
    samples = write_mds(tmp_path / "long", [10, 300, 40, 129, 128], "pretrain")
    truncate = _config(tmp_path / "long", cache_dir, long_samples="truncate")
    with build_dataloader(truncate) as loader:
        rows = [r for b in loader for r in b["attention_mask"].sum(1).tolist()]
        assert sorted(rows) == [10, 40, 128, 128, 128]
        assert loader.stats.truncated == 2 and loader.stats.dropped_long == 0
        assert (loader.stats.tokens, loader.stats.tokens_used) == (607, 434)
    with build_dataloader(_config(tmp_path / "long", cache_dir, long_samples="drop")) as loader:
        starts = [s for b in loader for _, _, s in _doc_starts(b["input_ids"])]
        assert sorted(starts) == [0, 2, 4]
        assert loader.stats.dropped_long == 2
        assert (loader.stats.tokens, loader.stats.tokens_used) == (607, 178)
    assert len(samples) == 5


def test_weighted_streams_deliver_chosen_counts(tmp_path, cache_dir):
    write_mds(tmp_path / "a", [20] * 30, "pretrain")
    write_mds(tmp_path / "b", [30] * 10, "pretrain", seed=1)
    streams = [
        {"path": str(tmp_path / "a"), "proportion": 1.0},
        {"path": str(tmp_path / "b"), "proportion": 3.0},
    ]
    cfg = LoaderConfig(
        streams=streams, epoch_size=40, max_tokens=256, max_seq_len=64, cache_dir=cache_dir
    )
    with build_dataloader(cfg) as loader:
        rows = [n for b in loader for n in b["attention_mask"].sum(1).tolist()]
    # 1/4 of 40 from a (10 of its 30 samples), 3/4 from b (each of its 10 samples 3 times)
    assert sorted(rows) == [20] * 10 + [30] * 30


def test_num_tokens_that_disagree_with_tokens_are_an_error(tmp_path, cache_dir):
    from streaming import MDSWriter

    with MDSWriter(
        out=str(tmp_path / "bad"), columns={"tokens": "ndarray:uint16", "num_tokens": "int"}
    ) as w:
        w.write({"tokens": np.arange(1, 11, dtype=np.uint16), "num_tokens": 4})
    with build_dataloader(_config(tmp_path / "bad", cache_dir)) as loader:
        with pytest.raises(ValueError, match="num_tokens=4 but its tokens give a row of 10"):
            next(iter(loader))
