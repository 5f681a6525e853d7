"""Other model families, honestly (CPU, tiny models built from configs, nothing downloaded):
sliding-window attention, attention logit soft-capping and learned attention sinks are not
applied by the packed varlen attention, so such a model is trained with packing off (one
document per row, an attention implementation that applies them) and the reason is said; a
final-logit soft cap, which the chunked cross-entropy does not apply, is refused; a tokenizer
whose template starts every text with BOS (Llama, Gemma) gets BOS at the start of each document."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("peft")
tokenizers = pytest.importorskip("tokenizers")

from fleetdeck.backend.train.models import (  # noqa: E402
    build_model,
    final_softcap_refusal,
    load_tokenizer,
    packing_refusal,
)

pytestmark = pytest.mark.train

SMALL = dict(
    vocab_size=16,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
)


def _model(cls_name: str, cfg_name: str, **keys):
    cfg = getattr(transformers, cfg_name)(**{**SMALL, **keys})
    torch.manual_seed(0)
    return getattr(transformers, cls_name)(cfg)


def test_qwen3_packs():
    model = build_model("random:tiny", torch.float32, torch.device("cpu"), "sdpa", 1)
    assert packing_refusal(model, 4096) is None and final_softcap_refusal(model) is None


def test_sliding_window_below_seq_len_turns_packing_off():
    model = _model("MistralForCausalLM", "MistralConfig", sliding_window=16)
    reason, eager = packing_refusal(model, 64)
    assert "sliding-window attention (window 16 < seq_len 64)" in reason and not eager
    assert "one document per row" in reason
    # a window as long as the rows changes nothing
    assert packing_refusal(model, 16) is None


def test_soft_capping_turns_packing_off_and_a_final_cap_is_refused():
    model = _model(
        "Gemma2ForCausalLM",
        "Gemma2Config",
        sliding_window=8,
        attn_logit_softcapping=50.0,
        final_logit_softcapping=30.0,
    )
    reason, eager = packing_refusal(model, 64)
    assert "attention logit soft-capping (50)" in reason and "sliding-window" in reason and eager
    assert "eager attention" in reason
    assert "final_logit_softcapping (30)" in final_softcap_refusal(model)


def test_attention_sinks_turn_packing_off():
    model = _model(
        "GptOssForCausalLM",
        "GptOssConfig",
        num_local_experts=2,
        num_experts_per_tok=1,
        sliding_window=128,
        layer_types=["sliding_attention", "full_attention"],
    )
    reason, eager = packing_refusal(model, 64)
    assert "learned attention sinks (2 layers)" in reason and eager
    assert "sliding-window" not in reason  # the window is longer than the rows


def _bos_tokenizer(folder, with_bos: bool):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"<s>": 0, "</s>": 1, "<pad>": 2, "<unk>": 3, "a": 4, "b": 5, "c": 6}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    if with_bos:
        tk.post_processor = processors.TemplateProcessing(
            single="<s> $A", special_tokens=[("<s>", 0)]
        )
    PreTrainedTokenizerFast(
        tokenizer_object=tk, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>"
    ).save_pretrained(str(folder))
    return folder


def test_bos_per_document_when_the_template_adds_it(tmp_path):
    from fleetdeck.backend.train.corpus import build_splits

    tok = load_tokenizer("random:tiny", str(_bos_tokenizer(tmp_path / "llama-like", True)))
    assert tok.bos_id == 0
    train, _ = build_splits(["a b", "b a a", "c"], tok, 64, True, 0.0, 1)
    flat = list(train.tokens)
    starts = [i for i, t in enumerate(flat) if t == 0]
    assert len(starts) == 3 and flat[0] == 0, "every document starts with BOS"
    assert flat.count(1) == 3 and all(flat[i - 1] == 1 for i in starts[1:]), (
        "BOS follows the previous EOS"
    )
    plain = load_tokenizer("random:tiny", str(_bos_tokenizer(tmp_path / "qwen-like", False)))
    assert plain.bos_id is None
    train, _ = build_splits(["a b"], plain, 64, True, 0.0, 1)
    assert list(train.tokens) == [4, 5, 1]


def test_a_sliding_window_checkpoint_trains_unpacked(tmp_path):
    """End to end through the engine: a local Mistral checkpoint with a 16-token window and 64-token
    rows is trained one document per row, and run.json's packing block says why."""
    from fleetdeck.backend.train.runconfig import RunConfig
    from fleetdeck.backend.train.session import prepare

    folder = tmp_path / "mistral"
    _model("MistralForCausalLM", "MistralConfig", sliding_window=16).save_pretrained(str(folder))
    _bos_tokenizer(folder, True)
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(
        "".join(
            json.dumps({"text": " ".join("abc"[(i + j) % 3] for j in range(5 + i % 20))}) + "\n"
            for i in range(30)
        )
    )
    cfg = RunConfig(
        name="m",
        base_model=str(folder),
        corpus=str(corpus),
        output=str(tmp_path / "run"),
        seq_len=64,
        batch_size=2,
        grad_accum=1,
        eval_fraction=0.0,
        packing=True,
        compile=False,
    )
    said = []
    engine, train, _, _ = prepare(cfg, 0, 1, said.append)
    assert not engine.packing and engine.padded
    assert "sliding-window attention (window 16 < seq_len 64)" in engine.recipe.packing_off
    assert any(m.startswith("packing off: sliding-window") for m in said)
    assert all(len(r) == 1 for r in train.rows), "one document per row"
    loss, tokens, _ = engine.step(train, [0, 1])
    assert loss == loss and tokens > 0
