"""Preference data (issue 26): the kinds ``preference`` (dpo) and ``unpaired_preference`` (kto),
their formats, the gate before any model load, and ``thub data preview`` of them.

The rows are in tests/fixtures/preference/ (README.md there says what each holds); every refusal
is checked through the real CLI: exit 2, ``file:line: field: expected X, found Y``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from thub.cli.main import cli
from thub.errors import UsageError

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "preference"


def run(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


def rows(name: str, fmt: str = "auto") -> list[dict[str, Any]]:
    from thub.data import load_dataset_rows

    return load_dataset_rows(str(FIXTURES / name), fmt)


U = lambda text: {"role": "user", "content": text}  # noqa: E731
A = lambda text: {"role": "assistant", "content": text}  # noqa: E731


# -- thub data check: the formats are recognised, every row valid ------------------------------

@pytest.mark.parametrize(("name", "fmt", "count"), [
    ("pairs.jsonl", "preference", 7), ("implicit.jsonl", "preference", 2),
    ("sharegpt_pairs.jsonl", "sharegpt_preference", 2), ("kto.jsonl", "kto", 4),
])
def test_check_accepts_each_format(name: str, fmt: str, count: int) -> None:
    result = run("data", "check", "--json", str(FIXTURES / name))
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"] and report["sources"][0]["format"] == fmt
    assert report["sources"][0]["valid_rows"] == count


# -- each refusal, through the CLI, at its file:line -------------------------------------------

REFUSALS = [
    ("bad_same_answers.jsonl", "rejected: expected an answer different from chosen (nothing to prefer), "
                               "found the same answer as chosen"),
    ("bad_missing_prompt.jsonl", "prompt: expected a 'prompt' (or chosen and rejected as whole conversations "
                                 "sharing their prompt), found no such field"),
    ("bad_prompt_ends_with_assistant.jsonl", "prompt[-1].role: expected a prompt ending with a user or tool turn, "
                                             "found 'assistant'"),
    ("bad_answer_role.jsonl", "chosen[0].role: expected an assistant turn (an answer holds only the model's turns), "
                              "found 'user'"),
    ("bad_empty_answer.jsonl", "rejected: expected non-empty text, found empty string"),
    ("bad_no_shared_prompt.jsonl", "prompt: expected a 'prompt', or chosen and rejected conversations starting with "
                                   "the same prompt, found no shared first turn"),
    ("bad_tool_call.jsonl", "chosen[0].tool_calls[0].function.arguments: expected a JSON object"),
    ("bad_label.jsonl", "label: expected true (desirable) or false (undesirable), found 'false'"),
    ("bad_sharegpt_chosen_role.jsonl", "chosen.from: expected the model's turn (assistant|function_call|gpt|model), "
                                       "found 'human'"),
]


@pytest.mark.parametrize(("name", "message"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_check_refuses_at_file_line(name: str, message: str) -> None:
    path = FIXTURES / name
    result = run("data", "check", str(path))
    assert result.exit_code == 2, result.output
    assert f"{path}:2: {message}" in result.output
    assert "Traceback" not in result.output


def test_a_string_prompt_ending_with_a_system_turn_is_refused() -> None:
    from thub.data import DatasetSource, Problems, RowCheck
    from thub_builtins.preference_formats import normalise_preference

    problems = Problems()
    row = {"prompt": [U("Hi"), {"role": "system", "content": "Be short."}], "chosen": "a", "rejected": "b"}
    assert normalise_preference(row, RowCheck("f.jsonl:3", problems), DatasetSource("f.jsonl")) is None
    assert [(p.location, p.field, p.message) for p in problems.errors] == [
        ("f.jsonl:3", "prompt[1].role", "expected a prompt ending with a user or tool turn, found 'system'")]


# -- canonical rows (what the trl/llamafactory/axolotl backends read) -----------------------------

def test_explicit_rows_are_wrapped_into_turns() -> None:
    first, tool, parallel, answer_call, late_system, _long, unicode = rows("pairs.jsonl")
    assert first == {"prompt": [U("What is the capital of France?")], "chosen": [A("Paris.")],
                     "rejected": [A("Lyon.")]}
    assert tool["prompt"][-1]["role"] == "tool" and tool["prompt"][2]["tool_calls"][0]["function"] == {
        "name": "wx", "arguments": {"c": "Oslo"}}
    calls = parallel["prompt"][1]["tool_calls"]
    assert [c["function"]["arguments"] for c in calls] == [{"c": "O"}, {"c": "L"}]  # JSON strings parsed
    assert [m["role"] for m in parallel["prompt"]] == ["user", "assistant", "tool", "tool"]
    assert len(answer_call["chosen"][0]["tool_calls"]) == 2  # an answer may be a parallel tool call
    assert [m["role"] for m in late_system["prompt"]] == ["user", "assistant", "system", "user"]
    assert unicode["prompt"][0] == {"role": "system", "content": "Answer with emoji 👨‍👩‍👧."}
    assert unicode["chosen"] == [A("你好 👋 — café, naïve")]


def test_implicit_prompt_is_the_shared_leading_turns() -> None:
    short, multi = rows("implicit.jsonl")
    assert short == {"prompt": [U("What is 2+3?")], "chosen": [A("5")], "rejected": [A("6")]}
    assert [m["role"] for m in multi["prompt"]] == ["system", "user", "assistant", "user"]
    assert multi["chosen"] == [A("Madrid.")] and multi["rejected"] == [A("Barcelona, I think.")]


def test_sharegpt_ranking_rows() -> None:
    plain, tool = rows("sharegpt_pairs.jsonl")
    assert plain == {"prompt": [U("What is 2+3?")], "chosen": [A("5")], "rejected": [A("6")]}
    assert [m["role"] for m in tool["prompt"]] == ["system", "user", "assistant", "tool"]
    assert tool["prompt"][2]["tool_calls"][0]["function"]["name"] == "wx"
    assert tool["chosen"] == [A("-3 °C, snow.")]


def test_kto_rows() -> None:
    found = rows("kto.jsonl")
    assert found[0] == {"prompt": [U("What is the capital of France?")], "completion": [A("Paris.")], "label": True}
    assert [r["label"] for r in found] == [True, False, True, False]
    assert found[2]["prompt"][-1]["role"] == "tool"


def test_kto_needs_both_labels() -> None:
    from thub_builtins.preference_formats import label_balance

    found = rows("kto.jsonl")
    assert label_balance(found, [f"kto.jsonl:{i}" for i in range(1, 5)]) is None
    one_sided = rows("kto_desirable_only.jsonl")
    problem = label_balance(one_sided, ["kto_desirable_only.jsonl:1", "kto_desirable_only.jsonl:2"])
    assert problem is not None
    assert problem.startswith("kto_desirable_only.jsonl:1: label: expected both desirable (true) and undesirable "
                              "(false) answers") and "found only true in all 2 rows" in problem


# -- with the tiny model's tokenizer: masks and lengths -------------------------------------------

@pytest.fixture(scope="module")
def tokenizer(tiny_model: Path) -> Any:
    from thub.data.prepare import load_tokenizer

    return load_tokenizer(str(tiny_model))


def _trained(panel: dict[str, Any]) -> list[str]:
    return [s["text"] for s in panel["segments"] if s["trained"]]


def test_preview_panels_mask_the_prompt_and_train_each_answer(tokenizer: Any) -> None:
    from thub.data.preview import PreviewView
    from thub_builtins.preference_formats import preview

    view = PreviewView(tokenizer)
    first, tool, *_ = rows("pairs.jsonl")
    chosen, rejected = preview(first, view)
    assert (chosen["title"], rejected["title"]) == ("chosen", "rejected")
    assert _trained(chosen) == ["Paris.<|im_end|>"] and _trained(rejected) == ["Lyon.<|im_end|>"]
    assert [(s["text"], s["trained"]) for s in chosen["segments"]] == [
        ("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n", False),
        ("Paris.<|im_end|>", True), ("\n", False)]
    # a prompt holding an assistant tool call: that turn is the prompt's, never trained
    assert [_trained(p) for p in preview(tool, view)] == [["-3 °C, snow.<|im_end|>"], ["It is sunny.<|im_end|>"]]
    kto = preview(rows("kto.jsonl")[1], view)
    assert [p["title"] for p in kto] == ["completion, label false (undesirable)"]
    assert _trained(kto[0]) == ["Lyon.<|im_end|>"]


def test_preview_through_the_cli(tiny_model: Path) -> None:
    result = run("data", "preview", "--model", str(tiny_model), str(FIXTURES / "pairs.jsonl"), "--json")
    assert result.exit_code == 0, result.output
    example = json.loads(result.stdout)["examples"][0]
    assert [p["title"] for p in example["panels"]] == ["chosen", "rejected"]
    assert [_trained(p) for p in example["panels"]] == [["Paris.<|im_end|>"], ["Lyon.<|im_end|>"]]
    text = run("data", "preview", "--model", str(tiny_model), str(FIXTURES / "kto.jsonl"), "-n", "2")
    assert text.exit_code == 0, text.output
    assert "label true (desirable)" in text.output and "label false (undesirable)" in text.output
    assert "[[Paris.<|im_end|>]]" in text.output


def _lengths(tokenizer: Any, name: str, max_seq_len: int, overlong: str) -> Any:
    from thub_builtins.preference_formats import check_lengths

    found = rows(name)
    return check_lengths(found, [f"{name}:{i + 1}" for i in range(len(found))], tokenizer, max_seq_len, overlong)


def test_overlong_pair_is_refused_dropped_or_cut_and_always_counted(tokenizer: Any) -> None:
    with pytest.raises(UsageError) as refused:
        _lengths(tokenizer, "pairs.jsonl", 256, "error")
    assert "1 answer(s) longer with their prompt than max_seq_len=256 tokens: pairs.jsonl:6 (chosen: " \
        in str(refused.value)
    dropped = _lengths(tokenizer, "pairs.jsonl", 256, "drop")
    assert (dropped.samples_in, dropped.samples_out, dropped.dropped_overlong) == (7, 6, 1)
    assert "1 of 7 samples dropped: longer than max_seq_len (first: pairs.jsonl:6)" in dropped.warnings()
    cut = _lengths(tokenizer, "pairs.jsonl", 256, "truncate")
    assert (cut.samples_out, cut.truncated) == (7, 1) and max(cut.lengths) == 256
    assert _lengths(tokenizer, "pairs.jsonl", 4096, "error").samples_out == 7


def test_a_prompt_longer_than_max_seq_len_leaves_nothing_to_train(tokenizer: Any) -> None:
    cut = _lengths(tokenizer, "kto.jsonl", 8, "truncate")
    assert cut.samples_out == 0 and cut.dropped_untrainable == 4 and cut.truncated == 0


def test_a_50_mb_answer_is_measured_by_a_prefix(tokenizer: Any) -> None:
    from thub_builtins.preference_formats import check_lengths

    row = {"prompt": [U("Say a lot.")], "chosen": [A("word " * 10_000_000)], "rejected": [A("No.")]}
    with pytest.raises(UsageError, match=r"huge.jsonl:1 \(chosen: over \d+ tokens\)"):
        check_lengths([row], ["huge.jsonl:1"], tokenizer, 64, "error")
    assert check_lengths([row], ["huge.jsonl:1"], tokenizer, 64, "truncate").truncated == 1


# -- the gate of a run: before any model is loaded ------------------------------------------------

def test_gate_refuses_one_sided_kto_data(tiny_model: Path) -> None:
    from thub_builtins.preference_formats import gate

    one_sided = rows("kto_desirable_only.jsonl")
    with pytest.raises(UsageError, match="expected both desirable"):
        gate(one_sided, ["k.jsonl:1", "k.jsonl:2"], {"model_path": str(tiny_model), "max_seq_len": 64})
    assert gate(rows("kto.jsonl"), [f"kto.jsonl:{i}" for i in range(1, 5)],
                {"model_path": str(tiny_model), "max_seq_len": 512}) == []


def test_gate_without_a_loadable_tokenizer_says_lengths_were_not_checked(tmp_path: Path) -> None:
    from thub_builtins.preference_formats import gate

    warned = gate(rows("pairs.jsonl"), [f"p:{i}" for i in range(1, 8)],
                  {"model_path": str(tmp_path / "no-model"), "max_seq_len": 16, "overlong": "error"})
    assert len(warned) == 1 and "lengths not checked before the run" in warned[0]


def test_gate_refuses_when_no_row_is_left(tiny_model: Path) -> None:
    from thub_builtins.preference_formats import gate

    with pytest.raises(UsageError, match="no row left to train on: all 4 rows dropped under overlong=drop"):
        gate(rows("kto.jsonl"), [f"kto.jsonl:{i}" for i in range(1, 5)],
             {"model_path": str(tiny_model), "max_seq_len": 8, "overlong": "drop"})


def _dry_run(tiny_model: Path, tmp_path: Path, algorithm: str, data: str, *extra: str) -> Any:
    return run("train", algorithm, "--backend", "trl", "--model-path", str(tiny_model), "--data-path",
               str(FIXTURES / data), "--ckpt-output-dir", str(tmp_path / "out"), "--dry-run", *extra)


@pytest.mark.parametrize(("name", "message"), [r for r in REFUSALS if r[0] != "bad_label.jsonl"
                                               and "sharegpt" not in r[0]][:4], ids=lambda v: str(v)[:24])
def test_train_dpo_dry_run_refuses_bad_pairs(tiny_model: Path, tmp_path: Path, name: str, message: str) -> None:
    result = _dry_run(tiny_model, tmp_path, "dpo", name)
    assert result.exit_code == 2, result.output
    assert f"{FIXTURES / name}:2: {message}" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()  # nothing written


def test_train_dry_run_holds_each_answer_to_max_seq_len(tiny_model: Path, tmp_path: Path) -> None:
    refused = _dry_run(tiny_model, tmp_path, "dpo", "pairs.jsonl", "--max-seq-len", "256", "--overlong", "error")
    assert refused.exit_code == 2, refused.output
    assert f"{FIXTURES / 'pairs.jsonl'}:6 (chosen: " in refused.output
    dropped = _dry_run(tiny_model, tmp_path, "dpo", "pairs.jsonl", "--max-seq-len", "256", "--overlong", "drop")
    assert dropped.exit_code == 0, dropped.output
    assert "1 of 7 samples dropped: longer than max_seq_len" in dropped.output
    cut = _dry_run(tiny_model, tmp_path, "dpo", "pairs.jsonl", "--max-seq-len", "256")
    assert cut.exit_code == 0 and "1 of 7 samples truncated to max_seq_len" in cut.output


def test_train_kto_dry_run_refuses_one_label(tiny_model: Path, tmp_path: Path) -> None:
    result = _dry_run(tiny_model, tmp_path, "kto", "kto_desirable_only.jsonl")
    assert result.exit_code == 2 and "expected both desirable (true) and undesirable (false)" in result.output
    bad = _dry_run(tiny_model, tmp_path, "kto", "bad_label.jsonl")
    assert bad.exit_code == 2 and f"{FIXTURES / 'bad_label.jsonl'}:2: label: expected true" in bad.output
    assert _dry_run(tiny_model, tmp_path, "kto", "kto.jsonl").exit_code == 0


# -- what the run expects the library to build ---------------------------------------------------

def test_expected_examples_are_the_rows_the_overlong_policy_keeps(tiny_model: Path) -> None:
    from thub_builtins.preference_formats import expected

    found = rows("pairs.jsonl")
    where = [f"pairs.jsonl:{i + 1}" for i in range(len(found))]
    params = {"model_path": str(tiny_model), "max_seq_len": 256, "overlong": "drop"}
    from thub.data.prepare import load_tokenizer

    tokenizer = load_tokenizer(str(tiny_model))
    assert expected(params, found, where, tokenizer) == 6
    assert expected({**params, "overlong": "truncate"}, found, where, tokenizer) == 7
    assert expected({**params, "max_seq_len": None}, found, where, tokenizer) == 7


@pytest.mark.slow
@pytest.mark.needs_module("trl")
def test_trl_dpo_with_a_dropped_pair_trains(tiny_model: Path, tmp_path: Path) -> None:
    # was: "backend trl builds 6 examples; thub validated 7" (the dropped pair was expected)
    result = run("train", "dpo", "--backend", "trl", "--model-path", str(tiny_model), "--data-path",
                 str(FIXTURES / "pairs.jsonl"), "--ckpt-output-dir", str(tmp_path / "out"), "--max-seq-len", "256",
                 "--overlong", "drop", "--max-steps", "1", "--effective-batch-size", "2", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["status"] == "succeeded"


def test_a_pair_the_chat_template_refuses_is_counted_and_left_out(tiny_model: Path) -> None:
    from thub.data.prepare import load_tokenizer
    from thub.data.templates import ChatTemplate
    from thub_builtins.preference_formats import check_lengths

    tokenizer = load_tokenizer(str(tiny_model))
    strict = ChatTemplate(tokenizer, "{% for m in messages %}{% if m.role == 'system' and not loop.first %}"
                                     "{{ raise_exception('system only first') }}{% endif %}<|im_start|>{{ m.role }}\n"
                                     "{% if m.role == 'assistant' %}{% generation %}{{ m.content }}<|im_end|>"
                                     "{% endgeneration %}{% else %}{{ m.content }}<|im_end|>{% endif %}\n{% endfor %}"
                                     "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    found = rows("pairs.jsonl")
    stats = check_lengths(found, [f"pairs.jsonl:{i + 1}" for i in range(7)], tokenizer, None, template=strict)
    assert (stats.samples_out, stats.rejected_by_template) == (6, 1)
    assert stats.examples["rejected_by_template"] == ["pairs.jsonl:5: system only first"]


@pytest.mark.parametrize("surface", ["api", "slurm"])
def test_every_dry_run_holds_pairs_to_max_seq_len(tiny_model: Path, tmp_path: Path, surface: str) -> None:
    data, out = FIXTURES / "pairs.jsonl", tmp_path / "out"
    if surface == "api":
        import thub

        with pytest.raises(UsageError, match=r"pairs.jsonl:6 \(chosen: "):
            thub.dry_run("dpo", backend="trl", model_path=str(tiny_model), data_path=str(data),
                         ckpt_output_dir=str(out), max_seq_len=256, overlong="error")
        return
    result = _dry_run(tiny_model, tmp_path, "dpo", "pairs.jsonl", "--max-seq-len", "256", "--overlong", "error",
                      "--launcher", "slurm")
    assert result.exit_code == 2 and f"{data}:6 (chosen: " in result.output, result.output
