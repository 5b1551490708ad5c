#!/usr/bin/env python3
"""Build a tiny random Llama model and a ChatML tokenizer for the demo, with no downloads.

    python examples/make_tiny_model.py                 # writes examples/tiny/
    python examples/make_tiny_model.py --out DIR --seed 0

The tokenizer is a byte-level BPE trained with `tokenizers` on the demo data
(examples/make_demo_data.py) plus a few built-in sentences. Its chat template
is ChatML (system, user, assistant, tool) and wraps every assistant reply and
its <|im_end|> in {% generation %} markers, so
`apply_chat_template(..., return_assistant_tokens_mask=True)` and TRL's
`assistant_only_loss=True` work. The model is a 2-layer LlamaForCausalLM with
hidden size 64, initialised from --seed. The same seed gives the same files.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "tiny"

IM_START, IM_END, EOT, PAD = "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<pad>"
SPECIAL_TOKENS = [EOT, IM_START, IM_END, PAD]
VOCAB_SIZE = 512

# ChatML. Assistant content, tool calls and the closing <|im_end|> sit inside
# {% generation %}; the role header and the newline after <|im_end|> do not.
CHAT_TEMPLATE = """\
{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages and messages[0].role == 'system' %}
        {{- messages[0].content + '\\n\\n' }}
    {%- endif %}
    {{- 'You can call these tools:\\n' }}
    {%- for tool in tools %}
        {{- (tool | tojson) + '\\n' }}
    {%- endfor %}
    {{- '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if message.role not in ['system', 'user', 'assistant', 'tool'] %}
        {{- raise_exception('Unknown role: ' + message.role) }}
    {%- endif %}
    {%- if message.role == 'assistant' %}
        {{- '<|im_start|>assistant\\n' }}
        {%- generation %}
            {{- message.content or '' }}
            {%- for call in message.tool_calls or [] %}
                {%- set fn = call.function if call.function is defined else call %}
                {{- '<tool_call>\\n{"name": ' + (fn.name | tojson) + ', "arguments": ' }}
                {%- if fn.arguments is string %}
                    {{- fn.arguments }}
                {%- else %}
                    {{- fn.arguments | tojson }}
                {%- endif %}
                {{- '}\\n</tool_call>' }}
            {%- endfor %}
            {{- '<|im_end|>' }}
        {%- endgeneration %}
        {{- '\\n' }}
    {%- elif not (message.role == 'system' and loop.first and tools) %}
        {{- '<|im_start|>' + message.role + '\\n' + (message.content or '') + '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}"""

# Extra text for the tokenizer so it also covers words outside the demo rows.
BUILTIN_TEXTS = [
    "system", "user", "assistant", "tool", "<tool_call>", "</tool_call>",
    "The quick brown fox jumps over the lazy dog.",
    "Pack my box with five dozen liquor jugs.",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20",
    "1+1=2. 2+2=4. 3+3=6. 4+4=8. 5+5=10. 9-4=5. 6*2=12.",
    "Hello! How are you today? I am fine, thank you.",
    "Answer the question. Think step by step, then give the answer.",
    "The answer is 7. The answer is 12. The result is 3.",
    '{"name": "add", "arguments": {"a": 2, "b": 3}}',
    "Train a small model on a small dataset and watch the loss fall.",
]


def build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    sys.path.insert(0, str(HERE))
    from make_demo_data import all_texts

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(all_texts() + BUILTIN_TEXTS, trainer=trainer)

    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token=IM_END,
        pad_token=PAD,
        unk_token=None,
        model_max_length=512,
        padding_side="right",
        chat_template=CHAT_TEMPLATE,
    )


def check_tokenizer(tokenizer) -> None:
    """Fail loudly if the assistant mask does not cover exactly the assistant reply + <|im_end|>."""
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2+3?"},
        {"role": "assistant", "content": "5"},
    ]
    out = tokenizer.apply_chat_template(
        messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    ids, mask = list(out["input_ids"]), list(out["assistant_masks"])
    masked = [i for i, m in zip(ids, mask) if m]
    expected = tokenizer.encode("5", add_special_tokens=False) + [tokenizer.convert_tokens_to_ids(IM_END)]
    if masked != expected:
        raise SystemExit(f"assistant mask check failed: masked {masked}, expected {expected}")


def build_model(tokenizer, seed: int, head_dim: int = 16):
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    eos_id = tokenizer.convert_tokens_to_ids(IM_END)
    pad_id = tokenizer.convert_tokens_to_ids(PAD)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=4 * head_dim,
        intermediate_size=8 * head_dim,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        # Wider than Llama's 0.02: with 0.02 the random lm_head keeps every logit
        # within about +-1, so LoRA (which leaves lm_head frozen) barely moves the
        # loss. At 0.1 the start loss is ~6.8 (ln 512 = 6.2) and 30 steps of full SFT
        # at lr 5e-3 bring it to ~2, LoRA r=8 to ~4.
        initializer_range=0.1,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=None, eos_token_id=eos_id, pad_token_id=pad_id, max_new_tokens=32
    )
    return model


def _portable_tokenizer_class(out: Path) -> None:
    """transformers 5 saves tokenizer_class "TokenizersBackend", a name 4.x does not know;
    "PreTrainedTokenizerFast" loads the same tokenizer.json under both."""
    path = out / "tokenizer_config.json"
    cfg = json.loads(path.read_text(encoding="utf-8"))
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help=f"output directory (default: {DEFAULT_OUT})")
    parser.add_argument("--seed", type=int, default=0, help="seed for the model weights (default: 0)")
    parser.add_argument("--head-dim", type=int, default=16,
                        help="attention head size (default: 16, hidden size 64; vLLM's attention kernels "
                             "need a size such as 64 or 128)")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    tokenizer = build_tokenizer()
    check_tokenizer(tokenizer)
    model = build_model(tokenizer, args.seed, args.head_dim)

    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    _portable_tokenizer_class(args.out)

    n_params = sum(p.numel() for p in model.parameters())
    print(f"wrote {args.out}")
    print(f"parameters: {n_params:,}  vocab: {len(tokenizer)}  seed: {args.seed}  "
          f"({time.perf_counter() - start:.1f}s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
