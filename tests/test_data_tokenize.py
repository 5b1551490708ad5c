"""Loss masks token by token, templates with and without generation markers, overlong policies."""

from __future__ import annotations

from typing import Any

import pytest

from thub.data import tokenize_chat, tokenize_documents
from thub.data.synthetic import CHATML, CHATML_GENERATION, LLAMA3, conversations, make_tokenizer
from thub.data.templates import ChatTemplate
from thub.errors import UsageError

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tok_markers() -> Any:
    return make_tokenizer(chat_template=CHATML_GENERATION)


@pytest.fixture(scope="module")
def tok_plain() -> Any:
    return make_tokenizer(chat_template=CHATML)


def reference(tok: Any, messages: list[dict[str, Any]]) -> tuple[list[int], list[int]]:
    """transformers' own assistant mask for the marker template: the ground truth."""
    enc = tok.apply_chat_template(messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    ids = list(enc["input_ids"])
    return ids, [i if m else -100 for i, m in zip(ids, enc["assistant_masks"], strict=True)]


ROWS = conversations(40, seed=7) + [
    {"messages": [{"role": "user", "content": "  padded  "}, {"role": "assistant", "content": "\nnew line\n\n"}]},
    {"messages": [{"role": "assistant", "content": "I start."}, {"role": "user", "content": "ok"},
                  {"role": "assistant", "content": "end"}]},
]


def test_markers_match_transformers_token_by_token(tok_markers: Any) -> None:
    out, stats = tokenize_chat(ROWS, tok_markers, None)
    assert stats.samples_out == len(ROWS)
    for row, sample in zip(ROWS, out, strict=True):
        assert (sample["input_ids"], sample["labels"]) == reference(tok_markers, row["messages"])


def test_template_without_markers_gives_the_same_masks(tok_markers: Any, tok_plain: Any) -> None:
    # Same rendered text, no {% generation %}: masks come from incremental prefixes and must
    # equal what the marker template declares (assistant content + <|im_end|>, not the "\n").
    out, _ = tokenize_chat(ROWS, tok_plain, None)
    for row, sample in zip(ROWS, out, strict=True):
        assert (sample["input_ids"], sample["labels"]) == reference(tok_markers, row["messages"])


def test_fast_path_equals_exact_path(tok_plain: Any) -> None:
    template = ChatTemplate(tok_plain)
    for row in ROWS:
        assert template.spans(row["messages"]) == template.exact_spans(row["messages"])
    assert template.exact_rows == 0  # ChatML is compositional: every row took the skeleton path


def test_trained_text_is_assistant_content_plus_end_marker(tok_plain: Any) -> None:
    row = {"messages": [{"role": "system", "content": "Sys."}, {"role": "user", "content": "Question here."},
                        {"role": "assistant", "content": "Answer one."}, {"role": "user", "content": "More?"},
                        {"role": "assistant", "content": "Answer two."}]}
    (sample,), _ = tokenize_chat([row], tok_plain, None)
    runs, current = [], []
    for token, label in zip(sample["input_ids"], sample["labels"], strict=True):
        if label == -100:
            if current:
                runs.append(tok_plain.decode(current))
                current = []
        else:
            assert label == token
            current.append(token)
    if current:
        runs.append(tok_plain.decode(current))
    assert runs == ["Answer one.<|im_end|>", "Answer two.<|im_end|>"]


def test_content_dependent_template_takes_exact_path() -> None:
    # A template that looks at contents: the skeleton cannot express it, rows must still be right.
    template_src = CHATML.replace("message['content']",
                                  "(message['content'] | replace('SECRET', '***') if 'SECRET' in message['content'] "
                                  "else message['content'])")
    tok = make_tokenizer(chat_template=template_src)
    rows = [{"messages": [{"role": "user", "content": "SECRET plan"}, {"role": "assistant", "content": "SECRET ok"}]},
            {"messages": [{"role": "user", "content": "plain"}, {"role": "assistant", "content": "fine"}]}]
    out, stats = tokenize_chat(rows, tok, None)
    assert "SECRET" not in tok.decode(out[0]["input_ids"])
    assert "*** ok" in tok.decode([t for t, lab in zip(out[0]["input_ids"], out[0]["labels"], strict=True)
                                   if lab != -100])
    assert stats.exact_rows >= 1


def test_trimming_template_and_verification_fallback() -> None:
    # Llama-3 style `| trim`: rows with padded contents take the exact path and stay correct.
    tok = make_tokenizer(chat_template=LLAMA3, specials=("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"))
    rows = [{"messages": [{"role": "user", "content": " hi "}, {"role": "assistant", "content": "  yes  "}]},
            {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "no"}]}]
    out, _ = tokenize_chat(rows, tok, None)
    trained = [tok.decode([t for t, lab in zip(s["input_ids"], s["labels"], strict=True) if lab != -100]) for s in out]
    assert trained == ["yes<|eot_id|>", "no<|eot_id|>"]


def test_history_rewriting_template_is_counted() -> None:
    # Renders earlier assistant turns differently once a later one exists (like reasoning
    # templates that drop old thoughts): those turns cannot be located and are counted.
    src = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' }}"
           "{% if m['role'] == 'assistant' and not loop.last %}old{% else %}{{ m['content'] }}{% endif %}"
           "{{ '<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
    tok = make_tokenizer(chat_template=src)
    rows = [{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                          {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}]}]
    out, stats = tokenize_chat(rows, tok, None)
    assert stats.history_rewrites == 1
    assert tok.decode([t for t, lab in zip(out[0]["input_ids"], out[0]["labels"], strict=True) if lab != -100]) \
        == "d<|im_end|>"


def test_unmask_trains_everything(tok_plain: Any) -> None:
    rows = [ROWS[0], {**ROWS[1], "unmask": True}]
    out, _ = tokenize_chat(rows, tok_plain, None)
    assert out[0]["labels"].count(-100) > 0
    assert out[1]["labels"] == out[1]["input_ids"]
    out, _ = tokenize_chat(rows[:1], tok_plain, None, unmask=True)
    assert out[0]["labels"] == out[0]["input_ids"]


def test_overlong_truncate_drop_error(tok_plain: Any) -> None:
    full, _ = tokenize_chat(ROWS, tok_plain, None)
    lengths = [len(s["input_ids"]) for s in full]
    limit = sorted(lengths)[len(lengths) // 2]
    longer = sum(1 for n in lengths if n > limit)
    out, stats = tokenize_chat(ROWS, tok_plain, limit, overlong="truncate")
    assert max(len(s["input_ids"]) for s in out) == limit
    assert stats.truncated + stats.dropped_untrainable == longer and stats.truncated > 0
    assert stats.samples_out == len(ROWS) - stats.dropped_untrainable
    assert stats.warnings() and "truncated to max_seq_len" in stats.warnings()[0]
    out, stats = tokenize_chat(ROWS, tok_plain, limit, overlong="drop", locations=[f"f:{i}" for i in range(len(ROWS))])
    assert stats.dropped_overlong == longer and len(out) == len(ROWS) - longer
    assert stats.examples["dropped_overlong"][0].startswith("f:")
    with pytest.raises(UsageError, match=rf"{longer} sample\(s\) longer than max_seq_len={limit}"):
        tokenize_chat(ROWS, tok_plain, limit, overlong="error")
    with pytest.raises(UsageError, match="overlong: expected one of"):
        tokenize_chat(ROWS, tok_plain, limit, overlong="cut")


def test_truncation_that_removes_every_trained_token_drops_the_sample(tok_plain: Any) -> None:
    row = {"messages": [{"role": "user", "content": "word " * 200}, {"role": "assistant", "content": "short"}]}
    out, stats = tokenize_chat([row], tok_plain, 50)
    assert out == [] and stats.dropped_untrainable == 1 and stats.truncated == 0


def test_template_from_another_family_is_an_error(tok_plain: Any) -> None:
    wrong = make_tokenizer(chat_template=LLAMA3)  # ChatML tokenizer, Llama-3 template
    with pytest.raises(UsageError, match=r"'<\|start_header_id\|>' to be a single token .* Llama 3"):
        tokenize_chat(ROWS[:1], wrong, None)


def test_no_chat_template_is_an_error() -> None:
    tok = make_tokenizer(chat_template=CHATML)
    tok.chat_template = None
    with pytest.raises(UsageError, match="expected the model's tokenizer to have a chat_template"):
        tokenize_chat(ROWS[:1], tok, None)


def test_template_rejection_is_counted(tok_plain: Any) -> None:
    src = ("{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('no system') }}{% endif %}"
           "{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endfor %}"
           "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
    tok = make_tokenizer(chat_template=src)
    rows = [{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                          {"role": "assistant", "content": "a"}]}, ROWS[-1]]
    out, stats = tokenize_chat(rows, tok, None)
    assert len(out) == 1 and stats.rejected_by_template == 1
    assert "no system" in stats.examples["rejected_by_template"][0]


def test_many_rows_across_batches(tok_plain: Any, tok_markers: Any) -> None:
    rows = conversations(2300, seed=11)  # more than two encode batches: the pipeline keeps order
    out, stats = tokenize_chat(rows, tok_plain, None)
    assert stats.samples_out == 2300
    for i in (0, 999, 1000, 2299):
        assert (out[i]["input_ids"], out[i]["labels"]) == reference(tok_markers, rows[i]["messages"])


def test_documents(tok_plain: Any) -> None:
    out, stats = tokenize_documents([{"document": "hello world " * 10}], tok_plain, 8)
    assert out[0]["input_ids"] == out[0]["labels"] and len(out[0]["input_ids"]) == 8
    assert stats.truncated == 1
    out, _ = tokenize_documents([{"document": "hi"}], tok_plain, None)
    assert out[0]["input_ids"][-1] == tok_plain.eos_token_id


def test_template_trimming_only_the_system_turn() -> None:
    src = CHATML.replace("message['content']", "(message['content'] | trim if message['role'] == 'system' "
                                               "else message['content'])")
    tok = make_tokenizer(chat_template=src)
    template = ChatTemplate(tok)
    rows = [{"messages": [{"role": "system", "content": f"{pad}sys{pad}"}, {"role": "user", "content": "u"},
                          {"role": "assistant", "content": "a"}]} for pad in ("", " ", "\n", "", "  ")] * 4
    for row in rows:
        assert template.spans(row["messages"]) == template.exact_spans(row["messages"])
    assert template.exact_rows > 0


def test_light_loader_gives_what_transformers_gives(tok_markers: Any, tmp_path: Any) -> None:
    # thub data prepare loads generic fast tokenizers without importing transformers (issue 18):
    # same vocabulary, template, special tokens, cache key and prepared bytes as AutoTokenizer.
    import json

    from transformers import AutoTokenizer

    from thub.data import DatasetSource, prepare
    from thub.data.light_tokenizer import load_light
    from thub.data.prepare import cache_key, load_tokenizer

    tok_markers.save_pretrained(tmp_path / "tok")
    auto = AutoTokenizer.from_pretrained(tmp_path / "tok")
    light = load_tokenizer(str(tmp_path / "tok"))
    assert type(light).__name__ == "LightTokenizer"
    assert light.backend_tokenizer.to_str() == auto.backend_tokenizer.to_str()
    assert light.chat_template == auto.chat_template and light.special_tokens_map == auto.special_tokens_map
    assert light.eos_token_id == auto.eos_token_id
    assert cache_key([], light, {}) == cache_key([], auto, {})
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    prepare([DatasetSource(str(data))], auto, tmp_path / "auto.jsonl", use_cache=False)
    prepare([DatasetSource(str(data))], light, tmp_path / "light.jsonl", use_cache=False)
    assert (tmp_path / "auto.jsonl").read_bytes() == (tmp_path / "light.jsonl").read_bytes()
    # a model-specific tokenizer class may rewrite things on load: transformers loads it
    config = json.loads((tmp_path / "tok" / "tokenizer_config.json").read_text())
    (tmp_path / "tok" / "tokenizer_config.json").write_text(json.dumps({**config, "tokenizer_class": "LlamaTokenizer"}))
    assert load_light(tmp_path / "tok") is None


def test_named_templates_follow_transformers_choice() -> None:
    """A dict of named templates: "default" when there is one; without one transformers refuses
    (apply_chat_template raises), so thub refuses too rather than training on whichever came first."""
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    tok = make_tokenizer(chat_template=CHATML)
    tok.chat_template = {"other": LLAMA3, "default": CHATML}
    assert ChatTemplate(tok).source == CHATML
    tok.chat_template = {"other": LLAMA3, "second": CHATML}
    with pytest.raises(ValueError, match="no default"):
        tok.apply_chat_template(messages, tokenize=False)
    with pytest.raises(UsageError, match=r"named templates \(other, second\) and no 'default'"):
        ChatTemplate(tok)
