"""Synthetic conversations and a locally trained tokenizer, for tests and benchmarks.

No network: the tokenizer is a byte-level BPE trained in-process on generated text, wrapped in
``PreTrainedTokenizerFast`` with a ChatML template (with or without ``{% generation %}``).
"""

from __future__ import annotations

import random
from typing import Any

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

CHATML_GENERATION = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "{{ '<|im_start|>assistant\n' }}{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}"
    "{{ '\n' }}"
    "{% else %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

LLAMA3 = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

_WORDS = ("the model learns from data and every token counts while training runs on small machines "
          "tools call functions with arguments users ask questions assistants answer clearly quickly "
          "numbers like 42 and 3.14 appear in code such as def f(x): return x * 2 or print('hi')").split()


def sentence(rng: random.Random, low: int = 4, high: int = 30) -> str:
    """A random sentence of words from a small vocabulary."""
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(low, high))).capitalize() + "."


def conversations(n: int, seed: int = 0, *, exchanges: tuple[int, int] = (1, 3),
                  words: tuple[int, int] = (4, 30), system: float = 0.5) -> list[dict[str, Any]]:
    """``n`` rows ``{"messages": [...]}``: optional system, then 1-3 user/assistant exchanges."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        messages = []
        if rng.random() < system:
            messages.append({"role": "system", "content": sentence(rng, *words)})
        for _ in range(rng.randint(*exchanges)):
            messages.append({"role": "user", "content": " ".join(sentence(rng, *words) for _ in range(2))})
            messages.append({"role": "assistant", "content": " ".join(sentence(rng, *words) for _ in range(3))})
        rows.append({"messages": messages})
    return rows


def make_tokenizer(vocab_size: int = 1000, *, chat_template: str = CHATML, corpus_size: int = 2000,
                   specials: tuple[str, ...] = ("<|im_start|>", "<|im_end|>"), seed: int = 0) -> Any:
    """A byte-level BPE ``PreTrainedTokenizerFast`` trained on generated text (seconds, offline)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(seed)
    corpus = [sentence(rng, 5, 40) for _ in range(corpus_size)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<|endoftext|>", *specials]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    eos = specials[1] if len(specials) > 1 else "<|endoftext|>"
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=eos, pad_token="<|endoftext|>",
                                   bos_token="<|endoftext|>", chat_template=chat_template)
