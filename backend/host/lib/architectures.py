"""The trainer's built-in architectures, `random:<arch>`: the one model table.

Each entry is the keyword set of its transformers config (`Qwen3Config` for `ARCHS`, a Qwen3.5
text config for `HYBRID_ARCHS`). The trainer builds models from it (`backend/train/models.py`);
the launch helper sizes a run's memory from it on the host, where torch may be missing
(`backend/host/launch/estimate.py`). Standard library only, Python 3.8.
"""

_QWEN3 = dict(
    vocab_size=151936,
    max_position_embeddings=40960,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
    hidden_act="silu",
    attention_bias=False,
    head_dim=128,
)
ARCHS = {
    "tiny": dict(
        _QWEN3,
        vocab_size=258,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=8192,
    ),
    "qwen3-0.6b": dict(
        _QWEN3,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
    ),
    "qwen3-1.7b": dict(
        _QWEN3,
        hidden_size=2048,
        intermediate_size=6144,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
    ),
    "qwen3-4b": dict(
        _QWEN3,
        hidden_size=2560,
        intermediate_size=9728,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
    ),
}
#: small hybrids (linear-attention layers beside attention layers) with random weights, for tests
HYBRID_ARCHS = {
    "tiny-hybrid": dict(
        vocab_size=258,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_conv_kernel_dim=4,
        tie_word_embeddings=True,
        max_position_embeddings=8192,
        rms_norm_eps=1e-6,
        layer_types=["linear_attention", "linear_attention", "full_attention", "linear_attention"],
    ),
}


def shape(arch: str) -> dict:
    """The figures a memory estimate needs, in short names: vocab, hidden, inter, layers, heads,
    kv, head_dim."""
    a = ARCHS[arch]
    return dict(
        vocab=a["vocab_size"],
        hidden=a["hidden_size"],
        inter=a["intermediate_size"],
        layers=a["num_hidden_layers"],
        heads=a["num_attention_heads"],
        kv=a["num_key_value_heads"],
        head_dim=a["head_dim"],
    )
