"""A local task's prompt longer than the model's context is cut before lm-eval tokenises it.

lm-eval tokenises a request's whole text and only then keeps its last ``max_length`` tokens: a
12 MB prompt took 3.35 GB of memory to be read as 128 tokens. The model only ever sees the end of
such a prompt, so thub keeps the end before lm-eval gets it: the shortest tail (8, 16, 32, then at
most 64 characters a token of the context) that the model's own tokenizer reads as more tokens than
the context holds. The tokens lm-eval keeps are then the same, and no tokenizer sees more than
64 characters a token of the context.
"""

from __future__ import annotations

from functools import cached_property

#: characters a token in the first tail tried (text runs at about 4); doubled until the tail holds
#: more tokens than the context, up to :data:`MAX_CHARS_PER_TOKEN`
CHARS_PER_TOKEN = 8
#: the longest tail ever tokenised, in characters a token of the context: text whose tokens average
#: more than this (a flood of one character) is cut there and gives fewer tokens than the context
MAX_CHARS_PER_TOKEN = 64
#: tokens beyond the context a tail must hold: the first ones may split differently where it was cut
MARGIN = 8
#: texts no longer than this are never looked at (nothing about the model is loaded for them)
SHORT = 1024
#: lm-eval's HF model's context when neither the run, the config nor the tokenizer gives one
DEFAULT_CONTEXT = 2048


class ContextCut:
    """Cuts texts to what a model with ``max_seq_len`` tokens of context (None: the model's own
    limit, as lm-eval resolves it) can read; the tokenizer and config load on the first long text."""

    def __init__(self, model_path: str, max_seq_len: int | None) -> None:
        self.model_path = model_path
        self.max_seq_len = max_seq_len
        self.cut = 0  # how many texts were cut

    @cached_property
    def _tokenizer(self) -> object:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(self.model_path)

    @cached_property
    def tokens(self) -> int:
        """The context, in tokens: the run's ``max_seq_len``, else the model's (lm-eval's rule)."""
        if self.max_seq_len:
            return int(self.max_seq_len)
        from lm_eval.models.utils import resolve_max_length
        from transformers import AutoConfig

        try:
            config = AutoConfig.from_pretrained(self.model_path)
        except (OSError, ValueError):
            config = None
        return int(resolve_max_length(config, self._tokenizer, default=DEFAULT_CONTEXT))

    def count(self, text: str) -> int:
        """How many tokens the model's tokenizer reads ``text`` as (no special tokens)."""
        return len(self._tokenizer(text, add_special_tokens=False)["input_ids"])  # type: ignore[operator]

    def __call__(self, text: str) -> str:
        """``text``, or its tail when it is longer than the context (see the module's docstring)."""
        if len(text) <= SHORT or len(text) <= CHARS_PER_TOKEN * self.tokens:
            return text
        size = CHARS_PER_TOKEN * self.tokens
        while True:
            tail = text[-size:]
            if size >= MAX_CHARS_PER_TOKEN * self.tokens or self.count(tail) > self.tokens + MARGIN:
                break
            size *= 2
            if size >= len(text):
                return text  # the whole text is within the context's reach after all
        self.cut += 1
        return tail
