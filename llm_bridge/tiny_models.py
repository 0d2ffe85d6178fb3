"""Tiny random-weight chat models for offline smoke runs of the LLM training paths.

``tiny_tool_caller`` builds, with no download and no training data, a tokenizer with Qwen3's
chat template and a 1-layer Qwen3 whose weights make it emit one fixed tool call
(``submit_answer`` with ``{"env": "CART"}``) and then end its turn, each with ~99.5% of the
probability at temperature 1, so a rollout almost always plays exactly that call. Used by
``llm_bridge/adapters_test.py`` and ``examples/trl_dapo.py --tiny``; needs torch, tokenizers,
transformers and trl (for the chat template)."""

from __future__ import annotations

import math
from typing import Any

CALL = (
    '<tool_call>\n{"name": "submit_answer", "arguments": {"answer": {"env": "CART"}}}\n</tool_call>'
)


def tiny_tool_caller(p_no_call: float = 0.0) -> tuple[Any, Any]:
    """A tokenizer with Qwen3's chat template and a 1-layer Qwen3 whose weights make it emit one
    fixed tool call, then end: attention and MLP outputs are zero, so the next token depends
    only on the current one (a bigram table in ``lm_head``). No download, no training data.

    ``p_no_call`` > 0 makes it end its turn at once instead (no call, so the episode stays
    unfinished) with about that probability at temperature 1: rollouts of one problem then
    differ, so GRPO's advantages and gradients are not all zero."""
    if not 0.0 <= p_no_call < 1.0:
        raise ValueError("p_no_call must be in [0, 1)")
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM
    from trl.chat_template_utils import qwen3_chat_template

    tok = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    tok.add_tokens([CALL])
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    hf.chat_template = qwen3_chat_template
    v = len(hf)
    call_id, end_id = hf.convert_tokens_to_ids(CALL), hf.convert_tokens_to_ids("<|im_end|>")
    cfg = Qwen3Config(
        vocab_size=v, hidden_size=v, intermediate_size=8, num_hidden_layers=1,
        num_attention_heads=1, num_key_value_heads=1, head_dim=8,
        max_position_embeddings=1 << 15, tie_word_embeddings=False,
        pad_token_id=hf.pad_token_id, eos_token_id=end_id,
    )  # fmt: skip
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(cfg)
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(torch.eye(v))
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        table = torch.zeros(v, v)
        table[call_id, :] = 3.0  # any token -> the call
        table[call_id, call_id] = 0.0
        table[end_id, call_id] = 3.0  # the call -> end of turn
        if p_no_call > 0:  # any other token -> end of turn, with odds p : 1 - p against the call
            scale = math.sqrt(v)  # the final RMSNorm scales the one-hot hidden state by sqrt(v)
            odds = math.log(p_no_call / (1.0 - p_no_call)) / scale
            table[end_id, :] = 3.0 + odds
            table[end_id, call_id] = 3.0
        model.lm_head.weight.copy_(table)
    return model, hf
