"""One meaning on LLaMA-Factory (issue 25): it trains exactly the rows and tokens thub validated.

Real runs of the tiny model through ``thub train`` in the managed environment, on the edge-case
set (tests/fixtures/edge_cases: tool calls single and parallel, a system turn mid-conversation,
consecutive same-role turns, an overlong row, Unicode, per-row unmask). What LLaMA-Factory
trains is read from LLaMA-Factory itself: the ``Num examples`` its Trainer logs, and the dataset
its own ``get_dataset`` builds from the run's ``train.yaml``; thub's side is thub's own
tokenization (``tokenize_chat``, ``pretraining_blocks``) of the same rows.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from thub.data import load_tokenizer, tokenize_chat
from thub.data.blocks import pretraining_blocks
from thub.data.loading import load_sources
from thub.data.training import training_sources
from thub.runner.metrics import read_metrics

pytestmark = [pytest.mark.slow, pytest.mark.install]

# Runs in the managed environment: the dataset LLaMA-Factory's own pipeline builds from a run's
# train.yaml (get_train_args, load_tokenizer, get_template_and_fix_tokenizer, get_dataset), the
# output_dir moved aside so its checkpoint detection sees an empty folder.
BUILT = textwrap.dedent("""
    import json, sys, yaml
    from llamafactory.data import get_dataset, get_template_and_fix_tokenizer
    from llamafactory.hparams import get_train_args
    from llamafactory.model import load_tokenizer
    args = yaml.safe_load(open(sys.argv[1]))
    args.update({"output_dir": sys.argv[2], "report_to": "none"})
    model_args, data_args, training_args, finetuning_args, _ = get_train_args(args)
    tokenizer_module = load_tokenizer(model_args)
    template = get_template_and_fix_tokenizer(tokenizer_module["tokenizer"], data_args)
    module = get_dataset(template, model_args, data_args, training_args, stage=finetuning_args.stage,
                         **tokenizer_module)
    rows = [{"input_ids": list(r["input_ids"]), "labels": list(r["labels"]) if "labels" in r else None}
            for r in module["train_dataset"]]
    print("BUILT " + json.dumps(rows))
""")


def thub(lf_env: dict, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True,
                          env=lf_env["environ"], timeout=900)


def train(lf_env: dict, model: Path, data: Path, out: Path, *extra: str, steps: int = 1,
          ) -> subprocess.CompletedProcess[str]:
    return thub(lf_env, "train", "sft", "--backend", "llamafactory", "--model-path", str(model), "--data-path",
                str(data), "--ckpt-output-dir", str(out), "--max-steps", str(steps), "--effective-batch-size", "2",
                *extra)


def built_by_llamafactory(lf_env: dict, out: Path, tmp_path: Path) -> list[dict[str, Any]]:
    """The examples LLaMA-Factory's own get_dataset builds from the run's train.yaml."""
    done = subprocess.run([lf_env["python"], "-c", BUILT, str(out / "llamafactory" / "train.yaml"),
                           str(tmp_path / "lf-out")], capture_output=True, text=True, env=lf_env["environ"],
                          timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("BUILT "))
    return list(json.loads(line[6:]))


def num_examples(out: Path) -> int:
    """``Num examples = N`` as LLaMA-Factory's Trainer logged it (logs/train.log)."""
    found = re.findall(r"Num examples = ([\d,]+)", (out / "logs" / "train.log").read_text())
    assert found, (out / "logs" / "train.log").read_text()[-3000:]
    return int(found[0].replace(",", ""))


def thub_chat(model: Path, data: Path, max_seq_len: int, unmask: bool) -> list[dict[str, list[int]]]:
    rows, locations = [], []
    for item in load_sources(training_sources({"data_path": str(data)})):
        rows += item.rows
        locations += item.locations
    samples, _stats = tokenize_chat(rows, load_tokenizer(str(model)), max_seq_len, unmask=unmask,
                                    locations=locations)
    return samples


@pytest.mark.parametrize("unmask", [False, True])
def test_every_edge_case_row_trained_with_thubs_tokens_and_masks(lf_env: dict, tiny_model: Path, edge_cases: Path,
                                                                  edge_cases_max_seq_len: int, tmp_path: Path,
                                                                  unmask: bool) -> None:
    """Items 1, 2, 5: no row dropped by LLaMA-Factory's sharegpt converter (consecutive user or
    assistant turns, a late system turn, parallel tool calls), tool calls in the model's own
    template (not LLaMA-Factory's ``Action:``/observation rendering), and unmask_messages trains
    exactly thub's tokens."""
    data = edge_cases / "chat.jsonl"
    out = tmp_path / "run"
    extra = ["--max-seq-len", str(edge_cases_max_seq_len), *(["--unmask-messages"] if unmask else [])]
    done = train(lf_env, tiny_model, data, out, *extra)
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "succeeded"
    # measured from LLaMA-Factory's own Trainer (its dataset through its collator), before step 1
    assert result["built"]["by"].startswith("llamafactory 0.9.5 (SFTDataCollatorWith4DAttentionMask")
    assert (result["built"]["examples"], result["built"]["matches"], result["built"]["masks_equal"]) == (10, True, True)
    expected = thub_chat(tiny_model, data, edge_cases_max_seq_len, unmask)
    assert len(expected) == 10
    assert num_examples(out) == 10  # LLaMA-Factory's own count: every row the user validated
    built = built_by_llamafactory(lf_env, out, tmp_path)
    assert [row["input_ids"] for row in built] == [row["input_ids"] for row in expected]
    assert [row["labels"] for row in built] == [row["labels"] for row in expected]
    from transformers import AutoTokenizer

    from thub.testing.masks import mask_differences

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model))
    rows = load_sources(training_sources({"data_path": str(data)}))[0].rows
    # and against transformers' own assistant mask of the model's template (every backend's reference)
    assert mask_differences(rows, built, tokenizer, edge_cases_max_seq_len, unmask=unmask) == []
    parallel = tokenizer.decode(built[2]["input_ids"])
    assert parallel.count("<tool_call>") == 2 and "Action:" not in parallel
    assert parallel.count("<|im_start|>tool\n") == 2  # tool results as tool turns, not user turns


def test_preview_shows_that_llamafactory_trains_thubs_tokens(lf_env: dict, tiny_model: Path, edge_cases: Path,
                                                             edge_cases_max_seq_len: int) -> None:
    """``thub data preview --backend llamafactory`` runs the runner's data path and
    LLaMA-Factory's loader: on every edge-case row the same trained text as thub's."""
    for unmask in ([], ["--unmask"]):
        done = subprocess.run([sys.executable, "-m", "thub", "data", "preview", "--model", str(tiny_model),
                               str(edge_cases / "chat.jsonl"), "-n", "1000", "--max-seq-len",
                               str(edge_cases_max_seq_len), "--backend", "llamafactory", "--json", *unmask],
                              capture_output=True, text=True, env=lf_env["environ"], timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        examples = json.loads(done.stdout)["examples"]
        assert len(examples) == 10
        for example in examples:
            assert example["comparison"]["equal"], (unmask, example["location"], example["comparison"])
            assert example["backend"]["trained_tokens"] == example["trained_tokens"], example["location"]


def bos_model(tiny_model: Path, tmp_path: Path) -> Path:
    """The tiny model with a tokenizer that adds a BOS (vocab.json/merges.txt, ``add_bos_token``:
    how GPT-2/Qwen-style repositories without a tokenizer.json load, ``add_bos_token`` True)."""
    model = tmp_path / "bos-model"
    shutil.copytree(tiny_model, model)
    spec = json.loads((model / "tokenizer.json").read_text())
    (model / "vocab.json").write_text(json.dumps(spec["model"]["vocab"]))
    merges = ["#version: 0.2", *(" ".join(m) if isinstance(m, list) else m for m in spec["model"]["merges"])]
    (model / "merges.txt").write_text("\n".join(merges) + "\n")
    config = json.loads((model / "tokenizer_config.json").read_text())
    config.update({"tokenizer_class": "GPT2Tokenizer", "bos_token": "<|endoftext|>", "add_bos_token": True,
                   "added_tokens_decoder": {str(t["id"]): {"content": t["content"], "special": t["special"],
                                                           "lstrip": False, "rstrip": False, "normalized": False,
                                                           "single_word": False} for t in spec["added_tokens"]}})
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    (model / "tokenizer.json").unlink()
    return model


def test_pretraining_blocks_are_thubs_blocks_with_a_bos_adding_tokenizer(lf_env: dict, tiny_model: Path,
                                                                         edge_cases: Path, tmp_path: Path) -> None:
    """Item 4: thub's block_size means documents joined with EOS into fixed blocks; LLaMA-Factory's
    pt stage used to overwrite each block's first token with BOS when the tokenizer adds one."""
    model = bos_model(tiny_model, tmp_path)
    tokenizer = load_tokenizer(str(model))
    assert tokenizer("x").input_ids[0] == tokenizer.bos_token_id  # the tokenizer really adds one
    data = edge_cases / "documents.jsonl"
    out = tmp_path / "pt"
    done = train(lf_env, model, data, out, "--is-pretraining", "--block-size", "64")
    assert done.returncode == 0, done.stderr[-4000:]
    rows = load_sources(training_sources({"data_path": str(data)}))[0].rows
    expected = pretraining_blocks(rows, tokenizer, 64)
    assert num_examples(out) == len(expected)
    measured = json.loads((out / "result.json").read_text())["built"]
    assert (measured["examples"], measured["matches"]) == (len(expected), True)
    built = built_by_llamafactory(lf_env, out, tmp_path)
    assert [row["input_ids"] for row in built] == [row["input_ids"] for row in expected]


def test_resume_with_only_a_half_checkpoint_starts_fresh(lf_env: dict, tiny_model: Path, demo_data: Path,
                                                         tmp_path: Path) -> None:
    """Item 6: thub skips an incomplete checkpoint and starts fresh; LLaMA-Factory must not
    auto-resume from it (transformers' get_last_checkpoint in its get_train_args).

    The state a run killed while saving its first checkpoint leaves: a real run's files, then
    the parent gone (no result.json), no final model, and checkpoint-2 without its weights."""
    out = tmp_path / "half"
    first = train(lf_env, tiny_model, demo_data / "chat.jsonl", out, "--save-steps", "2", steps=2)
    assert first.returncode == 0, first.stderr[-4000:]
    (out / "result.json").unlink()
    for entry in (out / "checkpoints").iterdir():
        if entry.name != "checkpoint-2":
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    (out / "checkpoints" / "checkpoint-2" / "model.safetensors").unlink()
    resumed = train(lf_env, tiny_model, demo_data / "chat.jsonl", out, "--save-steps", "2", "--resume", steps=2)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert "checkpoint-2 is not a complete checkpoint" in resumed.stdout + resumed.stderr
    assert json.loads((out / "result.json").read_text())["status"] == "succeeded"
    assert json.loads((out / "thub_run.json").read_text())["resume_from"] is None
    assert [line["step"] for line in read_metrics(out / "training_metrics.jsonl")] == [1, 2]
    assert "Resuming training from" not in (out / "logs" / "train.log").read_text()
    assert yaml.safe_load((out / "llamafactory" / "train.yaml").read_text())["overwrite_output_dir"] is True


def test_packing_and_validation_split_on_thubs_examples(lf_env: dict, tiny_model: Path, edge_cases: Path,
                                                        edge_cases_max_seq_len: int, tmp_path: Path) -> None:
    """``packing``: thub's examples packed by LLaMA-Factory's own greedy_knapsack into
    max_seq_len rows; ``validation_split``: split as LLaMA-Factory splits, evaluated by it."""
    data = edge_cases / "chat.jsonl"
    out = tmp_path / "packed"
    done = train(lf_env, tiny_model, data, out, "--max-seq-len", str(edge_cases_max_seq_len), "--packing",
                 "--validation-split", "0.2", "--validation-frequency", "1")
    assert done.returncode == 0, done.stderr[-4000:]
    built = built_by_llamafactory(lf_env, out, tmp_path)
    assert built and all(len(row["input_ids"]) == edge_cases_max_seq_len for row in built)
    validation = load_from_saved(out)
    expected = thub_chat(tiny_model, data, edge_cases_max_seq_len, unmask=False)
    # every trained token of thub's examples is in exactly one packed row, train or validation
    trained = sorted(t for row in built + validation for t in row["labels"] if t != -100)
    assert trained == sorted(t for row in expected for t in row["labels"] if t != -100)
    assert validation and "***** Running Evaluation *****" in (out / "logs" / "train.log").read_text()


def load_from_saved(out: Path) -> list[dict[str, Any]]:
    """The validation split thub saved for LLaMA-Factory (read with this environment's datasets)."""
    from datasets import load_from_disk

    return [dict(row) for row in load_from_disk(str(out / "llamafactory" / "tokenized"))["validation"]]


def test_pre_tokenized_rows_under_the_overlong_policy(lf_env: dict, tiny_model: Path, edge_cases: Path,
                                                      edge_cases_max_seq_len: int, tmp_path: Path) -> None:
    """Pre-tokenized rows (once refused) train as given; ``overlong: drop`` (once not honoured)
    leaves out the one longer than max_seq_len, as thub's policy says."""
    samples = thub_chat(tiny_model, edge_cases / "chat.jsonl", 4096, unmask=False)
    data = tmp_path / "processed.jsonl"
    data.write_text("".join(json.dumps(sample) + "\n" for sample in samples))
    out = tmp_path / "processed"
    done = train(lf_env, tiny_model, data, out, "--max-seq-len", str(edge_cases_max_seq_len), "--overlong", "drop")
    assert done.returncode == 0, done.stderr[-4000:]
    kept = [s for s in samples if len(s["input_ids"]) <= edge_cases_max_seq_len]
    assert len(kept) == len(samples) - 1 and num_examples(out) == len(kept)
    assert built_by_llamafactory(lf_env, out, tmp_path) == kept
