"""The laptop world: a tokenizer and tiny models built entirely in code (no downloads).

Tests, the demo and the benchmark use these in place of Qwen3 checkpoints. The tokenizer is byte-level
(every string round-trips) and carries a Qwen3-style chat template, including the empty think block that
Qwen3's template appends in no-thinking mode (../shared/qwen3-facts.md), so prompts are built exactly the
way the real path builds them.
"""
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]

# Qwen3's template reduced to what our prompts use: plain messages, a generation prompt, and the
# no-thinking switch (an empty think block after the assistant header).
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)


def make_tokenizer():
    """A 261-entry byte-level tokenizer: 256 byte symbols, then the five special tokens above."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIAL_TOKENS)
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    hf.chat_template = CHAT_TEMPLATE
    return hf


def tiny_model(arch="qwen3", vocab_size=261, hidden=64, layers=2, heads=4, kv_heads=2, seed=0, **overrides):
    """A randomly initialised Qwen3 (per-head q/k RMSNorm, GQA) or Llama (SmolLM2's family) model, fp32, eval mode."""
    torch.manual_seed(seed)
    common = dict(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=hidden * 3, num_hidden_layers=layers,
                  num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=4096,
                  tie_word_embeddings=True, bos_token_id=None, eos_token_id=2 + 256, pad_token_id=256)
    common.update(overrides)
    if arch == "qwen3":
        model = Qwen3ForCausalLM(Qwen3Config(head_dim=hidden // heads, **common))
    elif arch == "llama":
        model = LlamaForCausalLM(LlamaConfig(**common))
    else:
        raise ValueError(f"tiny_model: unknown arch {arch!r} (expected 'qwen3' or 'llama')")
    return model.float().eval()
