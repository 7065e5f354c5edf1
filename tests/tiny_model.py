"""A tiny random causal LM with the embedded model's tokenizer and chat template, for real
TRL steps in tests (the plumbing, not learning): 2 layers, hidden size 32, a few MB."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def make_tiny_model(out: Path) -> Path:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from rollout.embedded import hub_offline, prepare_embedded_model

    with hub_offline():
        tok = AutoTokenizer.from_pretrained(prepare_embedded_model(), local_files_only=True)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=8192, tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id))
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def tiny_qwen_with_qwen_template(seed: int = 0) -> tuple[Any, Any]:
    """A random 2-layer Qwen2-architecture model built from a config (in memory) and the
    embedded SmolLM2 tokenizer carrying TRL's original Qwen2.5 chat template (which TRL
    recognises: it adds the tool-call response schema, and swaps in its training version
    for assistant-only loss). Nothing is downloaded."""
    from pathlib import Path as _Path

    import torch
    import trl
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from rollout.embedded import hub_offline, prepare_embedded_model

    with hub_offline():
        tok = AutoTokenizer.from_pretrained(prepare_embedded_model(), local_files_only=True)
    tok.chat_template = (_Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja").read_text()
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(Qwen2Config(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=8192, tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        attn_implementation="eager"))  # CPU SDPA's backward is ~100x slower at this size
    return model, tok
