"""Preference data: paired (``dpo``: a prompt, a chosen and a rejected answer) and unpaired
(``kto``: a prompt, one answer and a desirable/undesirable label); registered in
:mod:`thub_builtins.preference_data`.

Canonical rows (what the trl, llamafactory and axolotl backends read, whatever the file held):

* kind ``preference``: ``{"prompt": [messages], "chosen": [assistant messages], "rejected":
  [assistant messages]}``; the prompt ends with a user or tool turn (it may start with a system
  turn and hold earlier turns, tool calls and tool results), each answer is one or more
  assistant turns, and the two answers differ;
* kind ``unpaired_preference``: ``{"prompt": [messages], "completion": [assistant messages],
  "label": bool}``.

Formats:

* ``preference``: TRL's paired forms. Explicit prompt ``{"prompt", "chosen", "rejected"}``, as
  plain strings (the prompt becomes one user turn, after an optional ``system`` string; each
  answer one assistant turn) or message lists; or TRL's implicit prompt, ``{"chosen",
  "rejected"}`` as whole conversations whose shared leading turns are the prompt.
* ``sharegpt_preference``: LLaMA-Factory's ranking form ``{"conversations": [{from, value}...],
  "chosen": {from, value}, "rejected": {from, value}, "system"?}``, with the tags and speaker
  names thub's ``sharegpt`` format reads.
* ``kto``: TRL's unpaired form ``{"prompt", "completion", "label"}`` (strings or message lists;
  ``label`` a JSON boolean).

Message lists are validated by :func:`thub.data.check_messages` (roles, tool calls, parallel tool
calls, content parts), so a turn is held to the same rules as in SFT data. Every problem is
``file:line: field: expected X, found Y``.
"""

from __future__ import annotations

import os.path
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from thub.data import DatasetSource, RowCheck, TokenizeStats, check_messages, describe, sharegpt_tags
from thub.data.formats import MESSAGE_ROLE_ALIASES, SHAREGPT_ROLES
from thub.data.templates import ChatTemplate
from thub.data.tokenize import IGNORE
from thub.errors import UsageError

if TYPE_CHECKING:
    from thub.data.preview import PreviewView
    from thub.data.templates import Span

#: the roles a prompt may end with: the model answers a user, or goes on after a tool's result
PROMPT_ENDS = ("user", "tool")
_BATCH = 500  # rows rendered per encode_batch call (two texts a pair)

# -- recognising a row (run on every row of an `auto` file: keep them cheap) -------------------


def is_sharegpt_preference(row: dict[str, Any]) -> bool:
    # before `sharegpt`: a conversation with chosen/rejected answers is a preference pair
    return "conversations" in row and ("chosen" in row or "rejected" in row)


def is_preference(row: dict[str, Any]) -> bool:
    return ("chosen" in row or "rejected" in row) and "conversations" not in row


def is_kto(row: dict[str, Any]) -> bool:
    return "completion" in row and "label" in row


# -- the parts of a row -----------------------------------------------------------------------


def _text(value: Any, check: RowCheck, field: str) -> str | None:
    if not isinstance(value, str) or not value.strip():
        check.error(field, "non-empty text", describe(value), "empty" if isinstance(value, str) else field)
        return None
    return value


def _prompt_end(prompt: list[dict[str, Any]], check: RowCheck, field: str) -> list[dict[str, Any]] | None:
    """``prompt`` when it ends with a turn the model answers (user or tool)."""
    last = prompt[-1]["role"]
    if last not in PROMPT_ENDS:
        check.error(f"{field}[{len(prompt) - 1}].role", "a prompt ending with a user or tool turn", repr(last),
                    "last_turn")
        return None
    return prompt


def _prompt(row: dict[str, Any], check: RowCheck, field: str = "prompt") -> list[dict[str, Any]] | None:
    """The prompt under ``field``: text (one user turn, after ``system``) or a message list."""
    if field not in row:
        check.error(field, f"a {field!r} (text or a message list)", "no such field", "prompt")
        return None
    value = row[field]
    if isinstance(value, str) or value is None:
        text = _text(value, check, field)
        if text is None:
            return None
        prompt: list[dict[str, Any]] = [{"role": "user", "content": text}]
        system = row.get("system")
        if isinstance(system, str) and system.strip():
            prompt.insert(0, {"role": "system", "content": system})
        return prompt
    messages = check_messages(value, check, field, role_map=MESSAGE_ROLE_ALIASES, prompt_only=True)
    return None if messages is None else _prompt_end(messages, check, field)


def _assistant_only(messages: list[dict[str, Any]], check: RowCheck, field: str,
                    offset: int = 0) -> list[dict[str, Any]] | None:
    """``messages`` when every one is an assistant turn (the answer the model is scored on)."""
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            check.error(f"{field}[{offset + i}].role", "an assistant turn (an answer holds only the model's turns)",
                        repr(message["role"]), "answer_role")
            return None
    return messages


def _answer(value: Any, check: RowCheck, field: str) -> list[dict[str, Any]] | None:
    """An answer: text (one assistant turn) or a list of assistant messages."""
    if isinstance(value, str) or value is None:
        text = _text(value, check, field)
        return None if text is None else [{"role": "assistant", "content": text}]
    messages = check_messages(value, check, field, role_map=MESSAGE_ROLE_ALIASES)
    return None if messages is None else _assistant_only(messages, check, field)


def _different(chosen: list[dict[str, Any]], rejected: list[dict[str, Any]], check: RowCheck) -> bool:
    if chosen == rejected:
        check.error("rejected", "an answer different from chosen (nothing to prefer)", "the same answer as chosen",
                    "same_answers")
        return False
    return True


def _pair(prompt: list[dict[str, Any]] | None, chosen: list[dict[str, Any]] | None,
          rejected: list[dict[str, Any]] | None, check: RowCheck) -> dict[str, Any] | None:
    if prompt is None or chosen is None or rejected is None or not _different(chosen, rejected, check):
        return None
    return {"prompt": prompt, "chosen": chosen, "rejected": rejected}


def _implicit(row: dict[str, Any], check: RowCheck) -> dict[str, Any] | None:
    """TRL's implicit prompt: chosen and rejected are whole conversations; their shared leading
    turns are the prompt, the rest of each its answer."""
    chosen = check_messages(row["chosen"], check, "chosen", role_map=MESSAGE_ROLE_ALIASES)
    rejected = check_messages(row["rejected"], check, "rejected", role_map=MESSAGE_ROLE_ALIASES)
    if chosen is None or rejected is None:
        return None
    shared = 0
    while shared < min(len(chosen), len(rejected)) and chosen[shared] == rejected[shared]:
        shared += 1
    if shared == len(chosen) == len(rejected):
        _different(chosen, rejected, check)
        return None
    if shared == 0:
        check.error("prompt", "a 'prompt', or chosen and rejected conversations starting with the same prompt",
                    "no shared first turn (chosen[0] and rejected[0] differ)", "prompt")
        return None
    if shared in (len(chosen), len(rejected)):
        shorter = "chosen" if shared == len(chosen) else "rejected"
        check.error(shorter, "an answer after the shared prompt", f"{shorter} ends where the prompt does "
                    f"({shared} shared turns)", "no_answer")
        return None
    prompt = _prompt_end(chosen[:shared], check, "chosen")
    if prompt is None:
        return None
    answers = (_assistant_only(chosen[shared:], check, "chosen", shared),
               _assistant_only(rejected[shared:], check, "rejected", shared))
    return _pair(prompt, *answers, check)


# -- validating and normalising one row -------------------------------------------------------


def normalise_preference(row: dict[str, Any], check: RowCheck, source: DatasetSource) -> dict[str, Any] | None:
    """TRL's paired preference row (explicit or implicit prompt) -> ``{"prompt", "chosen", "rejected"}``."""
    for key in ("chosen", "rejected"):
        if key not in row:
            check.error(key, "the chosen and the rejected answer", "no such field", key)
            return None
    if "prompt" not in row:
        if isinstance(row["chosen"], list) and isinstance(row["rejected"], list):
            return _implicit(row, check)
        check.error("prompt", "a 'prompt' (or chosen and rejected as whole conversations sharing their prompt)",
                    "no such field", "prompt")
        return None
    prompt = _prompt(row, check)
    return _pair(prompt, _answer(row["chosen"], check, "chosen"), _answer(row["rejected"], check, "rejected"), check)


def normalise_sharegpt_preference(row: dict[str, Any], check: RowCheck,
                                  source: DatasetSource) -> dict[str, Any] | None:
    """LLaMA-Factory's ranking row -> ``{"prompt", "chosen", "rejected"}``."""
    key, role_tag, content_tag = sharegpt_tags(row, source)
    if key not in row:
        check.error(key, f"a {key!r} list (set messages_key for this dataset)", describe(row), "messages")
        return None
    roles = {**SHAREGPT_ROLES, **source.role_map}
    prompt = check_messages(row[key], check, key, role_tag=role_tag, content_tag=content_tag, role_map=roles,
                            prompt_only=True)
    if prompt is not None:
        prompt = _prompt_end(prompt, check, key)
    if prompt is not None and isinstance(row.get("system"), str) and row["system"].strip() \
            and prompt[0]["role"] != "system":
        prompt.insert(0, {"role": "system", "content": row["system"]})
    found: list[list[dict[str, Any]] | None] = []
    for name in ("chosen", "rejected"):
        value = row.get(name)
        if not isinstance(value, dict):
            check.error(name, f"one {role_tag}/{content_tag} turn of the model (an object)",
                        describe(value) if name in row else "no such field", name)
            return None
        speaker = value.get(role_tag)
        if not isinstance(speaker, str) or roles.get(speaker) != "assistant":
            model = "|".join(sorted(tag for tag, role in roles.items() if role == "assistant"))
            check.error(f"{name}.{role_tag}", f"the model's turn ({model})", describe(speaker), "answer_role")
            return None
        message = check_messages([value], check, name, role_tag=role_tag, content_tag=content_tag, role_map=roles)
        found.append(None if message is None else _assistant_only(message, check, name))
    return _pair(prompt, found[0], found[1], check)


def normalise_kto(row: dict[str, Any], check: RowCheck, source: DatasetSource) -> dict[str, Any] | None:
    """TRL's unpaired row -> ``{"prompt", "completion", "label"}``."""
    prompt = _prompt(row, check)
    completion = _answer(row.get("completion"), check, "completion")
    label = row.get("label")
    if not isinstance(label, bool):
        check.error("label", "true (desirable) or false (undesirable)", describe(label), "label")
        return None
    if prompt is None or completion is None:
        return None
    return {"prompt": prompt, "completion": completion, "label": label}


# -- with the model's tokenizer: what is trained, and whether each answer fits -----------------


def answers(row: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """The answers of a canonical row, each trained after the row's prompt: chosen and rejected,
    or the one completion."""
    if "completion" in row:
        return [("completion", row["completion"])]
    return [("chosen", row["chosen"]), ("rejected", row["rejected"])]


def answer_spans(template: ChatTemplate, prompt: list[dict[str, Any]], answer: list[dict[str, Any]],
                 prompt_text: str | None = None) -> tuple[str, list[Span]]:
    """``prompt`` + ``answer`` rendered with the chat template, and its trained spans: the
    answer's assistant turns with their end-of-turn marker (as thub masks SFT), none of the
    prompt (its earlier assistant turns included): the loss scores the answer only.
    ``prompt_text``: the prompt rendered with the generation prompt, when already rendered."""
    if prompt_text is None:
        prompt_text, _ = template.render(prompt, add_generation_prompt=True)
    text, spans = template.spans([*prompt, *answer])
    start = len(prompt_text) if text.startswith(prompt_text) else len(os.path.commonprefix([prompt_text, text]))
    return text, [(max(a, start), b) for a, b in spans if b > start]


def _title(name: str, row: dict[str, Any]) -> str:
    if name == "completion":
        return f"completion, label {str(row['label']).lower()} ({'desirable' if row['label'] else 'undesirable'})"
    return name


def preview(row: dict[str, Any], view: PreviewView) -> list[dict[str, Any]]:
    """``thub data preview`` of a preference row: one panel per answer (chosen and rejected, side by
    side; or the completion with its label), prompt tokens masked, answer tokens trained.
    ``--unmask`` changes nothing here: a preference loss never scores the prompt."""
    from thub.data.preview import explain_text

    template = view.chat_template()
    return [{"title": _title(name, row), **explain_text(*answer_spans(template, row["prompt"], answer), view)}
            for name, answer in answers(row)]


def check_lengths(rows: Sequence[dict[str, Any]], locations: Sequence[str], tokenizer: Any,
                  max_seq_len: int | None, overlong: str = "truncate",
                  template: ChatTemplate | None = None) -> TokenizeStats:
    """Every answer with its prompt against ``max_seq_len`` under the ``overlong`` policy, counted
    per row (a pair is kept, cut or dropped as a whole): ``error`` refuses naming each row and
    answer, ``drop`` leaves the row out, ``truncate`` cuts it (a row with an answer left without
    a trained token is dropped). Nothing is silent: the counts and first rows are in the stats."""
    from thub.data.tokenize import chat_tokenizer, span_labels, text_bound

    backend, template = chat_tokenizer(tokenizer, template, overlong)
    stats = TokenizeStats(samples_in=len(rows))
    too_long: list[str] = []
    bound = text_bound(backend, max_seq_len)
    for start in range(0, len(rows), _BATCH):
        batch = _render(rows, range(start, min(len(rows), start + _BATCH)), template, backend, max_seq_len, bound,
                        stats, locations)
        encoded = backend.encode_batch([text for _i, _name, text, _spans, _cut in batch], add_special_tokens=False)
        verdicts: dict[int, list[tuple[str, int, int]]] = {}  # row -> (verdict, tokens kept, trained kept)
        for (i, name, _text, trained, cut), enc in zip(batch, encoded, strict=True):
            labels = span_labels(enc, enc.ids, trained)
            kept = labels if max_seq_len is None else labels[:max_seq_len]
            verdict = "fits"
            if max_seq_len is not None and len(labels) > max_seq_len:
                verdict = "long"
                if overlong == "error":
                    too_long.append(f"{locations[i]} ({name}: {'over ' if cut else ''}{len(labels)} tokens)")
            verdicts.setdefault(i, []).append((verdict, len(kept), len(kept) - kept.count(IGNORE)))
        for i, found in verdicts.items():
            if overlong == "drop" and any(v == "long" for v, _n, _t in found):
                stats.dropped_overlong += 1
                stats.note("dropped_overlong", locations[i])
                continue
            if any(count == 0 for _v, _n, count in found):  # e.g. the prompt alone fills max_seq_len
                stats.dropped_untrainable += 1
                stats.note("dropped_untrainable", locations[i])
                continue
            if any(v == "long" for v, _n, _t in found):
                stats.truncated += 1
                stats.note("truncated", locations[i])
            stats.samples_out += 1
            for _v, tokens, count in found:
                stats.tokens += tokens
                stats.trained_tokens += count
                stats.lengths.append(tokens)
    if too_long:
        raise UsageError(f"{len(too_long)} answer(s) longer with their prompt than max_seq_len={max_seq_len} "
                         f"tokens: {', '.join(too_long[:5])}{' ...' if len(too_long) > 5 else ''} "
                         "(use overlong=truncate or drop, or raise max_seq_len)")
    return stats


def expected(params: Mapping[str, Any], rows: Sequence[dict[str, Any]], locations: Sequence[str],
             tokenizer: Any) -> int:
    """How many examples a backend builds from the rows: the pairs (or answers) the ``overlong``
    policy keeps (:func:`check_lengths`), so a dropped pair is not a difference. A pair is two
    sequences and libraries collate them differently, so only their number is compared."""
    max_seq_len = params.get("max_seq_len")
    if max_seq_len is None:
        return len(rows)
    return check_lengths(rows, locations, tokenizer, int(max_seq_len), str(params.get("overlong") or "truncate"),
                         ).samples_out


def _render(rows: Sequence[dict[str, Any]], batch: range, template: ChatTemplate, backend: Any,
            max_seq_len: int | None, bound: int | None, stats: TokenizeStats,
            locations: Sequence[str]) -> list[tuple[int, str, str, list[Span], bool]]:
    """(row, answer name, text, trained spans, encoded by a prefix) for each answer of ``batch``'s
    rows; a row the chat template refuses is counted and left out (as SFT rows are)."""
    from thub.data.templates import TemplateRejected
    from thub.data.tokenize import long_prefix

    out = []
    for i in batch:
        try:
            prompt_text, _ = template.render(rows[i]["prompt"], add_generation_prompt=True)  # once for both answers
            rendered = [(name, *answer_spans(template, rows[i]["prompt"], answer, prompt_text))
                        for name, answer in answers(rows[i])]
        except TemplateRejected as exc:
            stats.rejected_by_template += 1
            stats.note("rejected_by_template", f"{locations[i]}: {exc}")
            continue
        for name, text, trained in rendered:
            cut = False
            if bound is not None and max_seq_len is not None and len(text) > bound:
                at = long_prefix(backend, text, max_seq_len, bound)
                if at is not None:  # only what any policy keeps is encoded (a 50 MB answer)
                    text, trained, cut = text[:at], [(a, min(b, at)) for a, b in trained if a < at], True
            out.append((i, name, text, trained, cut))
    return out


def label_balance(rows: Sequence[dict[str, Any]], locations: Sequence[str]) -> str | None:
    """What is wrong with unpaired rows whose labels are all the same (KTO weighs desirable
    against undesirable answers: with one side missing it has nothing to contrast), or None."""
    labels = {row["label"] for row in rows}
    if len(labels) != 1:
        return None
    label = labels.pop()
    first = locations[0] if locations else "the data"
    return (f"{first}: label: expected both desirable (true) and undesirable (false) answers (KTO contrasts them), "
            f"found only {str(label).lower()} in all {len(rows)} rows; add {str(not label).lower()} rows "
            "(or mix in a dataset of them with datasets:)")


def _run_tokenizer(params: Mapping[str, Any]) -> Any:
    """The run's tokenizer when it can be loaded here (a local model; a hub id in the cache), else None."""
    from thub.data.prepare import load_tokenizer

    try:
        return load_tokenizer(str(params["model_path"]), trust_remote_code=bool(params.get("trust_remote_code")))
    except Exception:  # noqa: BLE001 - e.g. a hub id without network: the backend counts lengths at the run
        return None


def gate(rows: Sequence[dict[str, Any]], locations: Sequence[str], params: Mapping[str, Any]) -> list[str]:
    """The preference-data gate of a run, before any model is loaded: unpaired rows need both
    labels; with the run's tokenizer (when it loads here) and ``max_seq_len``, every answer with
    its prompt is held to ``max_seq_len`` under the ``overlong`` policy (:func:`check_lengths`).
    Raises :class:`thub.errors.UsageError` (exit 2); returns what to warn about (cut, dropped rows)."""
    if rows and "label" in rows[0]:
        problem = label_balance(rows, locations)
        if problem:
            raise UsageError(problem)
    max_seq_len = params.get("max_seq_len")
    if not rows or max_seq_len is None:
        return []
    tokenizer = _run_tokenizer(params)
    if tokenizer is None:
        return [f"lengths not checked before the run: the tokenizer of {params['model_path']} cannot be loaded "
                "here (the backend counts them when it tokenizes)"]
    overlong = str(params.get("overlong") or "truncate")
    stats = check_lengths(rows, locations, tokenizer, int(max_seq_len), overlong)
    if stats.samples_out == 0:
        first = stats.examples.get("dropped_overlong") or stats.examples.get("dropped_untrainable") or []
        raise UsageError(f"no row left to train on: all {stats.samples_in} rows dropped under overlong={overlong} "
                         f"with max_seq_len={max_seq_len} (first: {', '.join(first)}); raise max_seq_len or use "
                         "overlong=truncate")
    return stats.warnings()
