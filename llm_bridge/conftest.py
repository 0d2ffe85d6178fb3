"""Fixtures of the host-bridge tests: catalog id tables, a codec with a small order
history (the one ``fuzz.VALID_CALLS`` refers to), and a tiny random chat model."""

from __future__ import annotations

import pytest

from ecomjax.catalog.synthetic import synthetic_tables
from ecomjax.llm_bridge.fuzz import fuzz_codec
from ecomjax.llm_bridge.ids import CatalogIds, IdCodec


@pytest.fixture(scope="session")
def cat_ids(catalog) -> CatalogIds:
    return CatalogIds.from_catalog(catalog, synthetic_tables())


@pytest.fixture
def codec(cat_ids) -> IdCodec:
    return fuzz_codec(cat_ids)


_TEXT = "system user assistant tool you are a shopping agent find me usb charger cart"
WORDS = tuple(_TEXT.split(" "))
TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}> {{ m['content'] }} {% endfor %}"
    "{% if tools %}<tools> {{ tools | length }} {% endif %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


@pytest.fixture(scope="session")
def tiny():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers

    specials = ["[PAD]", "[UNK]", "[EOS]"]
    roles = ["<system>", "<user>", "<assistant>", "<tool>", "<tools>"]
    vocab = {w: i for i, w in enumerate(specials + roles + list(WORDS) + list("0123456789"))}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tk, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]"
    )
    tok.chat_template = TEMPLATE
    cfg = transformers.LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        pad_token_id=vocab["[PAD]"],
        eos_token_id=vocab["[EOS]"],
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    return model, tok
