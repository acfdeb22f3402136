"""Model, objectives and config: exact properties on tiny shapes."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from trainer.config import MODEL_PRESETS, ConfigError, ModelConfig, config_from_mapping, load_config
from trainer.model.transformer import Transformer, flops_per_token
from trainer.objectives import causal_lm_loss_sum, count_targets, dpo_loss, sequence_logps

CONFIGS = Path(__file__).resolve().parents[2] / "trainer" / "configs"


def model(**overrides) -> Transformer:
    torch.manual_seed(0)
    shape = dict(vocab_size=50, hidden_size=32, n_layers=2, n_heads=4, max_seq_len=64)
    return Transformer(ModelConfig(**{**shape, **overrides})).eval()


@pytest.mark.parametrize("norm,mlp", [("rmsnorm", "swiglu"), ("layernorm", "gelu")])
def test_packed_row_equals_documents_run_alone(norm, mlp):
    net = model(norm=norm, mlp=mlp)
    a, b = torch.randint(50, (1, 7)), torch.randint(50, (1, 5))
    packed = torch.cat([a, b, torch.zeros(1, 4, dtype=torch.long)], dim=1)  # 4 pad tokens
    positions = torch.cat([torch.arange(7), torch.arange(5), torch.zeros(4, dtype=torch.long)])[
        None
    ]
    cu = torch.tensor([0, 7, 12, 16], dtype=torch.int32)  # the loader's layout: pad tail = segment
    with torch.no_grad():
        by_positions = net(packed, positions)
        by_cu = net(packed, positions, cu)
        by_cu_only = net(packed, None, cu)
        alone = torch.cat([net(a), net(b)], dim=1)
    # Without cu_seqlens a row is one sequence: documents would see each other.
    assert not torch.allclose(by_positions[0, 7:12], alone[0, 7:12], atol=1e-4)
    torch.testing.assert_close(by_cu[:, :12], alone, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(by_cu_only[:, :12], by_cu[:, :12], atol=0, rtol=0)


def test_causal_and_sliding_window():
    net, windowed = model(), model(sliding_window=4)
    ids = torch.randint(50, (2, 16))
    later = ids.clone()
    later[:, 10:] = (later[:, 10:] + 1) % 50
    earlier = ids.clone()
    earlier[:, :3] = (earlier[:, :3] + 1) % 50
    with torch.no_grad():
        base, base_w = net(ids), windowed(ids)
        assert torch.equal(net(later)[:, :10], base[:, :10])  # the future is invisible
        # With 2 layers a window of 4 reaches back 2 * 3 = 6 positions: position 9 cannot
        # see positions 0-2, position 5 can.
        changed = windowed(earlier)
        torch.testing.assert_close(changed[:, 9:], base_w[:, 9:], atol=1e-6, rtol=0)
        assert not torch.allclose(changed[:, 5], base_w[:, 5])
        assert not torch.allclose(net(earlier)[:, 9:], base[:, 9:])


def test_init_scales_residual_projections_and_ties_embeddings():
    torch.manual_seed(0)
    config = ModelConfig(
        vocab_size=512, hidden_size=256, n_layers=8, n_heads=4, tie_embeddings=True
    )
    net = Transformer(config)
    expected = 0.02 / math.sqrt(2 * 8)
    for block in net.blocks:
        assert block.attn.proj.weight.std().item() == pytest.approx(expected, rel=0.05)
        assert block.mlp.down.weight.std().item() == pytest.approx(expected, rel=0.05)
        assert block.attn.q.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert net.lm_head.weight.data_ptr() == net.embed.weight.data_ptr()
    untied = Transformer(ModelConfig(**{**config.__dict__, "tie_embeddings": False}))
    assert untied.num_params() - net.num_params() == 512 * 256


def test_flops_per_token_counts_matmuls_and_attention():
    config = ModelConfig(
        vocab_size=1000, hidden_size=64, n_layers=2, n_heads=4, intermediate_size=128
    )
    matmul = 2 * (4 * 64 * 64 + 3 * 64 * 128) + 64 * 1000
    assert flops_per_token(config, 32) == 6 * matmul + 12 * 2 * 64 * 32
    net = Transformer(config)
    assert net.num_params(exclude_embedding=True) == matmul + 2 * 2 * 64 + 64  # + norm weights


def test_causal_loss_and_label_smoothing_match_reference():
    logits = torch.randn(2, 5, 11)
    labels = torch.tensor([[3, 4, -100, 1, -100], [-100, -100, 2, 2, 7]])
    assert count_targets(labels) == 6
    mask = labels != -100
    expected = F.cross_entropy(logits[mask], labels[mask], reduction="sum")
    torch.testing.assert_close(causal_lm_loss_sum(logits, labels), expected)
    smooth = F.cross_entropy(logits[mask], labels[mask], reduction="sum", label_smoothing=0.1)
    torch.testing.assert_close(causal_lm_loss_sum(logits, labels, 0.1), smooth)
    logps = torch.log_softmax(logits, -1).gather(-1, labels.clamp(min=0)[..., None])[..., 0]
    torch.testing.assert_close(sequence_logps(logits, labels), (logps * mask).sum(-1))


def test_dpo_loss_values():
    zero = torch.zeros(3)
    stats = dpo_loss(zero, zero, zero, zero, beta=0.1)
    torch.testing.assert_close(stats.losses, torch.full((3,), math.log(2)))
    assert stats.correct.sum() == 0
    chosen, rejected = torch.tensor([-1.0, -5.0]), torch.tensor([-3.0, -2.0])
    stats = dpo_loss(chosen, rejected, torch.tensor([-2.0, -2.0]), torch.tensor([-2.0, -2.0]), 0.5)
    torch.testing.assert_close(stats.chosen_rewards, torch.tensor([0.5, -1.5]))
    torch.testing.assert_close(stats.reward_margins, torch.tensor([1.0, -1.5]))
    torch.testing.assert_close(stats.losses, -F.logsigmoid(torch.tensor([1.0, -1.5])))
    assert stats.correct.tolist() == [1.0, 0.0]


def test_config_is_strict_and_presets_expand(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['lrate'\]"):
        config_from_mapping({"model": {"vocab_size": 10}, "optim": {"lrate": 1}})
    with pytest.raises(ConfigError, match="valid: tiny, 134m, 374m, 1b, 1.7b, 3b"):
        config_from_mapping({"model": {"preset": "7b", "vocab_size": 10}})
    with pytest.raises(ConfigError, match="precision.*'fp8' is not valid"):
        config_from_mapping({"model": {"vocab_size": 10}, "train": {"precision": "fp8"}})
    with pytest.raises(ConfigError, match="model.vocab_size or tokenizer"):
        config_from_mapping({})
    config = config_from_mapping({"model": {"preset": "1.7b", "vocab_size": 32000, "n_layers": 2}})
    assert config.model.hidden_size == 2048 and config.model.n_heads == 32  # the seed's shape
    assert config.model.intermediate_size == 8192 and config.model.n_layers == 2
    assert MODEL_PRESETS["1.7b"]["n_layers"] == 24 and MODEL_PRESETS["1.7b"]["max_seq_len"] == 2048
    path = tmp_path / "c.yaml"
    path.write_text("model: {vocab_size: 10}\ntrain: {max_steps: 5, warmup: 1}\n")
    with pytest.raises(ConfigError, match=str(path)):
        load_config(path)


@pytest.mark.parametrize("preset", [p for p in MODEL_PRESETS if p != "tiny"])
def test_preset_names_state_their_size(preset):
    """Counted on the meta device (no memory): 32,000 ids, untied embeddings."""
    config = config_from_mapping({"model": {"preset": preset, "vocab_size": 32000}})
    with torch.device("meta"):
        count = Transformer(config.model).num_params()
    named = float(preset[:-1]) * (1e6 if preset.endswith("m") else 1e9)
    assert abs(count - named) / named < 0.05, (preset, count)


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_configs_load(path):
    config = load_config(path)
    assert config.model.hidden_size % config.model.n_heads == 0


def _reference_varlen(q, k, v, cu_q, cu_k, max_q, max_k, window_size=(-1, -1)):
    """What the flash varlen kernel computes, written with SDPA per sequence (CPU)."""
    left, right = window_size
    assert right == 0  # causal
    out = torch.empty_like(q)
    for start, end in zip(cu_q[:-1].tolist(), cu_q[1:].tolist(), strict=True):
        n = end - start
        idx = torch.arange(n)
        allowed = idx[None, :] <= idx[:, None]
        if left >= 0:
            allowed &= idx[:, None] - idx[None, :] <= left
        qs, ks, vs = (z[start:end].transpose(0, 1) for z in (q, k, v))
        gqa = qs.shape[0] != ks.shape[0]  # flash varlen takes fewer k/v heads (GQA)
        attended = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=allowed, enable_gqa=gqa)
        out[start:end] = attended.transpose(0, 1)
    return out


@pytest.mark.parametrize("window,kv_heads", [(None, None), (3, None), (None, 2)])
def test_varlen_path_plumbing_matches_masked_path(monkeypatch, window, kv_heads):
    """The CUDA varlen branch (flattening, cu_seqlens, window convention, GQA heads) checked
    on CPU with a reference kernel standing in for flash varlen."""
    import trainer.model.attention as model_module

    net = model(sliding_window=window, n_kv_heads=kv_heads)
    ids = torch.randint(50, (2, 12))
    positions = torch.tensor(
        [[0, 1, 2, 3, 4, 0, 1, 2, 3, 0, 0, 0], [0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 0]]
    )
    cu = torch.tensor([0, 5, 9, 10, 11, 12, 20, 23, 24], dtype=torch.int32)
    with torch.no_grad():
        masked = net(ids, positions, cu)
        monkeypatch.setattr(model_module, "_use_varlen", lambda device, half: True)
        monkeypatch.setattr(model_module, "_varlen_kernel", lambda: _reference_varlen)
        varlen = net(ids, positions, cu)
    torch.testing.assert_close(varlen, masked, atol=1e-5, rtol=1e-5)
    # Without cu_seqlens the boundaries come from the position ids (a 0 starts a sequence).
    assert torch.equal(model_module._flat_cu_seqlens(positions, None), cu)
