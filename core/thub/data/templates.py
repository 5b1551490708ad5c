"""Chat templates: rendering with trained-span tracking, fast skeleton rendering, sanity checks.

Which characters are *trained* (get a loss) in a rendered conversation:

* templates with ``{% generation %}`` markers: exactly the marked text (the model author's intent);
* templates without markers: for every assistant turn ``i``, the text between
  ``render(messages[:i], add_generation_prompt=True)`` and ``render(messages[:i+1])``, minus
  trailing whitespace. That is the assistant's content plus its end-of-turn marker (``<|im_end|>``,
  ``<|eot_id|>``, ...), which the model must learn to emit, and nothing of the prompt.

Why the skeleton cache: rendering Jinja once per conversation (and once per prefix without
markers) dominates the cost of data preparation. Most templates only concatenate fixed text
around each message, so a conversation's rendering depends on its sequence of roles, not on the
contents. We render each distinct role sequence once with sentinel contents, keep the literal
pieces and span boundaries, and assemble every conversation by string concatenation. Templates
that look at contents (``'</think>' in content``, ``content | trim``) are detected and those rows
take the exact path; the first rows of every role sequence are also cross-checked against a real
render, and a mismatch switches that sequence to the exact path.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from thub.errors import UsageError

# Characters from Supplementary Private Use Area-B: never in real text or tokenizers.
_GEN_START, _GEN_END = "\U0010fff0", "\U0010fff1"
_SENT_L, _SENT_R = "\U0010fff2", "\U0010fff3"
_MARKERS_RE = re.compile(r"\{%-?\s*generation\s*-?%\}")
# Literal strings a template tests contents against: `'</think>' in message.content`.
_CONTENT_TEST_RE = re.compile(r"""(['"])((?:(?!\1).){1,40})\1\s+(?:not\s+)?in\s+[\w.\[\]'"]*content""")
_SPECIAL_RE = re.compile(r"<\|[A-Za-z0-9_.:\- ]{1,40}\|>|<start_of_turn>|<end_of_turn>")
_FAMILIES = {"<|im_start|>": "ChatML (Qwen, ...)", "<|start_header_id|>": "Llama 3", "<|eot_id|>": "Llama 3",
             "<start_of_turn>": "Gemma", "<|user|>": "Phi/Zephyr", "<|assistant|>": "Phi/Zephyr"}

Span = tuple[int, int]


def compile_template(source: str) -> Any:
    """A chat template's source compiled like transformers does (sandboxed, trim/lstrip blocks, same globals), plus
    a ``generation`` block that brackets its output with private markers we strip later."""
    import jinja2
    from jinja2.ext import Extension
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_mark"), [], [], body).set_lineno(lineno)

        def _mark(self, caller: Any) -> str:
            return _GEN_START + caller() + _GEN_END

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
               sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return env.from_string(source)
    except jinja2.exceptions.TemplateSyntaxError as exc:
        raise UsageError(f"chat template: expected valid Jinja, found a syntax error at line {exc.lineno}: "
                         f"{exc.message}") from None


def _strip_markers(text: str) -> tuple[str, list[Span]]:
    """Remove generation markers, returning clean text and the marked spans."""
    if _GEN_START not in text:
        return text, []
    out: list[str] = []
    spans: list[Span] = []
    pos = 0
    start = None
    for piece in re.split(f"([{_GEN_START}{_GEN_END}])", text):
        if piece == _GEN_START:
            start = pos
        elif piece == _GEN_END:
            if start is not None and pos > start:
                spans.append((start, pos))
            start = None
        else:
            out.append(piece)
            pos += len(piece)
    return "".join(out), spans


@dataclass
class _Skeleton:
    """A role sequence's rendering: literal pieces around contents and span boundaries."""

    literals: list[str]  # len = messages + 1
    boundaries: list[tuple[int, int, int, int]]  # (piece_start, off_start, piece_end, off_end)
    rewrites: int = 0  # assistant turns the template renders differently in history (untrainable)
    verified: int = 0  # rows cross-checked against a real render so far
    broken: bool = False  # a cross-check failed: use the exact path


class ChatTemplate:
    """A tokenizer's chat template, rendered with trained spans; the fast path is transparent."""

    VERIFY_ROWS = 8  # real renders per role sequence before the skeleton is trusted

    def __init__(self, tokenizer: Any, chat_template: str | None = None) -> None:
        source = chat_template or getattr(tokenizer, "chat_template", None)
        if isinstance(source, dict):  # named templates: "default", as transformers' apply_chat_template
            if "default" not in source:
                raise UsageError(f"chat template: the tokenizer has named templates ({', '.join(sorted(source))}) "
                                 "and no 'default' one, which transformers refuses too; expected a template "
                                 "named 'default' (name one in tokenizer_config.json's chat_template list)")
            source = source["default"]
        if not source:
            raise UsageError("chat template: expected the model's tokenizer to have a chat_template, found none "
                             "(set one in tokenizer_config.json or use a model with a template)")
        self.source: str = source
        self.template = compile_template(source)
        self.has_markers = bool(_MARKERS_RE.search(source))
        special = getattr(tokenizer, "special_tokens_map", {}) or {}
        self.kwargs = {k: v for k, v in special.items() if isinstance(v, str)}
        self.content_tests = [m.group(2) for m in _CONTENT_TEST_RE.finditer(source)]
        self._skeletons: dict[tuple[str, ...], _Skeleton | None] = {}
        self._strips: bool | None = None
        self.exact_rows = 0  # rows that took the exact (Jinja) path
        self.history_rewrites = 0  # assistant turns not trainable because the template rewrites history

    # -- exact rendering -------------------------------------------------------------------
    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = False) -> tuple[str, list[Span]]:
        """Render like ``apply_chat_template(tokenize=False)``; returns (text, generation spans)."""
        import jinja2

        try:
            raw = self.template.render(messages=messages, tools=None, documents=None,
                                       add_generation_prompt=add_generation_prompt, **self.kwargs)
        except jinja2.exceptions.TemplateError as exc:
            raise TemplateRejected(str(exc)) from None
        return _strip_markers(raw)

    def exact_spans(self, messages: list[dict[str, Any]]) -> tuple[str, list[Span]]:
        """Text and trained spans by real rendering (markers, or incremental prefixes)."""
        text, spans, rewrites = self._exact(messages)
        self.history_rewrites += rewrites
        return text, spans

    def _exact(self, messages: list[dict[str, Any]]) -> tuple[str, list[Span], int]:
        text, spans = self.render(messages)
        if self.has_markers:
            return text, spans, 0
        spans = []
        rewrites = 0
        for i, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            prompt, _ = self.render(messages[:i], add_generation_prompt=True)
            upto, _ = self.render(messages[: i + 1])
            if not text.startswith(upto):
                # The template renders earlier turns differently once later ones exist (e.g. it
                # drops reasoning from history): this turn's tokens cannot be located reliably.
                rewrites += 1
                continue
            start = len(_common_prefix(prompt, upto))
            end = len(upto.rstrip())
            if end > start:
                spans.append((start, end))
        return text, spans, rewrites

    # -- fast rendering ----------------------------------------------------------------------
    def spans(self, messages: list[dict[str, Any]]) -> tuple[str, list[Span]]:
        """Text and trained spans; the skeleton path when safe, else :meth:`exact_spans`."""
        key = self._key(messages)
        skeleton = None
        if key is not None:
            if key not in self._skeletons:
                self._skeletons[key] = self._build_skeleton(key)
            skeleton = self._skeletons[key]
        if skeleton is None or skeleton.broken:
            self.exact_rows += 1
            return self.exact_spans(messages)
        pieces: list[str] = []
        starts: list[int] = []
        pos = 0
        literals = skeleton.literals
        for i, message in enumerate(messages):
            literal = literals[i]
            starts.append(pos)
            pieces.append(literal)
            content = message["content"]
            pieces.append(content)
            pos += len(literal) + len(content)
        starts.append(pos)
        pieces.append(literals[-1])
        text = "".join(pieces)
        spans = [(starts[a] + oa, starts[b] + ob) for a, oa, b, ob in skeleton.boundaries]
        if skeleton.verified < self.VERIFY_ROWS:
            skeleton.verified += 1
            exact = self.exact_spans(messages)
            if exact != (text, spans):
                skeleton.broken = True
                self.exact_rows += 1
                return exact
            return text, spans
        self.history_rewrites += skeleton.rewrites
        return text, spans

    def _key(self, messages: list[dict[str, Any]]) -> tuple[str, ...] | None:
        """The role sequence, or None when a row needs the exact path (tools, content tests)."""
        key = []
        for message in messages:
            if len(message) != 2:  # tool_calls, name, reasoning: the template may branch on them
                return None
            content = message["content"]
            if self.content_tests and any(t in content for t in self.content_tests):
                return None
            if content[:1].isspace() or content[-1:].isspace():
                if self._strips is None:
                    self._strips = self._probe_strips()
                if self._strips:
                    return None
            key.append(message["role"])
        return tuple(key)

    def _probe_strips(self) -> bool:
        """Whether the template changes whitespace around contents (``| trim``)."""
        padded = [" \n s \n ", " \n x \n ", " \n y \n "]
        for probe in ([{"role": "system", "content": padded[0]}, {"role": "user", "content": padded[1]},
                       {"role": "assistant", "content": padded[2]}],  # some templates trim only the system turn
                      [{"role": "user", "content": padded[1]}, {"role": "assistant", "content": padded[2]}]):
            try:
                text, _ = self.render(probe)
            except TemplateRejected:
                return True  # cannot tell: be safe, padded rows take the exact path
            if any(m["content"] not in text for m in probe):
                return True
        return False

    def _build_skeleton(self, roles: tuple[str, ...]) -> _Skeleton | None:
        sentinels = [f"{_SENT_L}{i}{_SENT_R}" for i in range(len(roles))]
        messages = [{"role": r, "content": s} for r, s in zip(roles, sentinels, strict=True)]
        try:
            text, spans, rewrites = self._exact(messages)
        except TemplateRejected:
            return None
        literals: list[str] = []
        offsets: list[int] = []  # start of every literal piece in `text`
        pos = 0
        for sentinel in sentinels:
            at = text.find(sentinel, pos)
            if at < 0 or text.count(sentinel) != 1:
                return None  # the template drops, repeats or reorders contents
            offsets.append(pos)
            literals.append(text[pos:at])
            pos = at + len(sentinel)
        offsets.append(pos)
        literals.append(text[pos:])
        if _SENT_L in "".join(literals):
            return None

        def locate(char: int) -> tuple[int, int] | None:
            for piece in range(len(literals) - 1, -1, -1):
                if offsets[piece] <= char <= offsets[piece] + len(literals[piece]):
                    return piece, char - offsets[piece]
            return None  # inside a content: the skeleton cannot express it

        boundaries = []
        for start, end in spans:
            a, b = locate(start), locate(end)
            if a is None or b is None:
                return None
            boundaries.append((*a, *b))
        return _Skeleton(literals, boundaries, rewrites=rewrites)


class TemplateRejected(Exception):
    """The template raised (``raise_exception``) for a conversation, e.g. roles not alternating."""


def _common_prefix(a: str, b: str) -> str:
    import os.path

    return os.path.commonprefix([a, b])


def check_template(tokenizer: Any, template: ChatTemplate) -> list[str]:
    """Problems that make a template unusable with this tokenizer (empty list when fine).

    Markers like ``<|im_start|>`` must be single tokens: when the tokenizer splits them, the
    template belongs to another model family and every example would be shredded silently.
    """
    problems = []
    backend = getattr(tokenizer, "backend_tokenizer", None)
    for marker in sorted(set(_SPECIAL_RE.findall(template.source))):
        ids = backend.encode(marker, add_special_tokens=False).ids if backend is not None else \
            tokenizer.encode(marker, add_special_tokens=False)
        if len(ids) != 1:
            family = _FAMILIES.get(marker)
            why = f"; the template is {family} but the tokenizer is not" if family else ""
            problems.append(f"chat template: expected {marker!r} to be a single token of this tokenizer, found "
                            f"{len(ids)} tokens{why} (a template from another model family shreds every example)")
    return problems
