"""Measured, not assumed (issue 25): a real TRL run records what SFTTrainer built (its own dataset
through its own collator) in result.json, equal to what thub validated; a library that drops a
row (a test double of the count only) stops the run before step 1 with exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from thub.data import load_tokenizer, tokenize_chat, training_rows

pytestmark = pytest.mark.slow


def thub(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    environ.update(env or {})
    return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True, env=environ,
                          timeout=600)


def train(model: Path, data: Path, out: Path, *extra: str, env: dict[str, str] | None = None
          ) -> subprocess.CompletedProcess[str]:
    return thub("train", "sft", "--backend", "trl", "--model-path", str(model), "--data-path", str(data),
                "--ckpt-output-dir", str(out), "--max-steps", "1", "--set", "save_final_checkpoint=false", *extra,
                env=env)


@pytest.mark.parametrize("unmask", [False, True])
def test_result_records_what_sft_trainer_built_equal_to_thubs_masks(
        unmask: bool, tiny_model: Path, edge_cases: Path, edge_cases_max_seq_len: int, tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = train(tiny_model, edge_cases / "chat.jsonl", out, "--max-seq-len", str(edge_cases_max_seq_len),
                 "--set", f"unmask_messages={str(unmask).lower()}")
    assert done.returncode == 0, done.stdout + done.stderr
    built = json.loads((out / "result.json").read_text())["built"]
    # thub's own count, computed here independently of the run (the masks `thub data preview` shows)
    rows, locations = training_rows({"data_path": str(edge_cases / "chat.jsonl")})
    ours, _ = tokenize_chat(rows, load_tokenizer(str(tiny_model)), edge_cases_max_seq_len, unmask=unmask,
                            locations=locations)
    from thub.data.expected import mask_hash, trained_count

    trained = sum(trained_count(s["labels"]) for s in ours)  # labels with a loss: the first never has one
    assert built["by"].startswith("trl ") and "DataCollator" in built["by"]
    assert (built["examples"], built["trained_tokens"], built["tokens"]) == (
        len(ours), trained, sum(len(s["input_ids"]) for s in ours))
    assert built["expected"] == {"examples": len(ours), "tokens": built["tokens"], "trained_tokens": trained}
    assert built["matches"] is True and built["masks_equal"] is True
    hashes = json.loads((out / "built.json").read_text())["per_example"]["hashes"]
    assert hashes == [mask_hash(s["labels"]) for s in ours]
    assert f"{len(ours)} examples" in done.stderr and "as validated" in done.stderr


def test_validation_split_holds_out_rows_without_a_mismatch(tiny_model: Path, demo_data: Path,
                                                            tmp_path: Path) -> None:
    out = tmp_path / "split"
    done = train(tiny_model, demo_data / "chat.jsonl", out, "--set", "validation_split=0.25",
                 "--set", "validation_frequency=1")
    assert done.returncode == 0, done.stdout + done.stderr
    built = json.loads((out / "result.json").read_text())["built"]
    assert built["matches"] is True and built["examples"] == built["expected"]["examples"] - 16  # ceil(64 * 0.25)


def test_continued_pretraining_blocks_are_measured(tiny_model: Path, edge_cases: Path, tmp_path: Path) -> None:
    out = tmp_path / "pt"
    done = train(tiny_model, edge_cases / "documents.jsonl", out, "--set", "is_pretraining=true",
                 "--set", "block_size=64")
    assert done.returncode == 0, done.stdout + done.stderr
    built = json.loads((out / "result.json").read_text())["built"]
    # 5 documents + 5 EOS = 5535 tokens: 86 full blocks of 64, every token trained but each block's first
    assert (built["examples"], built["tokens"], built["trained_tokens"], built["matches"]) == (86, 5504, 5418, True)


def _dropping_library(tmp_path: Path) -> dict[str, str]:
    """A sitecustomize for the training child: the library "drops" its second example (only the
    count thub measures changes; what trains is untouched)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(textwrap.dedent("""
        import thub.runner.built as built

        real = built.collated_labels

        def dropping(dataset, collate_fn):
            labels = real(dataset, collate_fn)
            return None if labels is None else (x for i, x in enumerate(labels) if i != 1)

        built.collated_labels = dropping
    """))
    return {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}


def test_a_library_that_drops_a_row_stops_the_run_before_step_1(tiny_model: Path, demo_data: Path,
                                                                 tmp_path: Path) -> None:
    out = tmp_path / "dropped"
    done = train(tiny_model, demo_data / "chat.jsonl", out, env=_dropping_library(tmp_path))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    message = done.stderr
    assert "backend trl builds 63 examples; thub validated 64" in message, message
    assert f"first affected: {demo_data / 'chat.jsonl'}:2" in message, message
    assert "allow_data_mismatch" in message
    assert not out.exists()  # stopped before step 1: nothing half-written, a rerun needs no --overwrite
    assert "full log" not in message and "run failed" not in message  # no pointer into what was removed
    assert "63 examples, 1302 tokens" in message and "DIFFERENT from validated" in message  # the summary line


def test_allow_data_mismatch_trains_anyway_and_records_the_difference(tiny_model: Path, demo_data: Path,
                                                                      tmp_path: Path) -> None:
    out = tmp_path / "allowed"
    done = train(tiny_model, demo_data / "chat.jsonl", out, "--set", "allow_data_mismatch=true",
                 env=_dropping_library(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    built = json.loads((out / "result.json").read_text())["built"]
    assert built["matches"] is False and built["allowed"] is True and built["refused"] is False
    assert built["first_location"] == f"{demo_data / 'chat.jsonl'}:2"
    assert "DIFFERENT from validated" in done.stderr


def test_processed_rows_follow_the_overlong_policy(tiny_model: Path, tmp_path: Path) -> None:
    """Already tokenized rows longer than max_seq_len are dropped under overlong=drop, as thub
    validated them (SFTTrainer alone would cut them at max_length)."""
    data = tmp_path / "processed.jsonl"
    rows = [{"input_ids": list(range(5, 5 + n)), "labels": [-100] * 2 + list(range(7, 5 + n))} for n in (8, 40, 12)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "run"
    done = train(tiny_model, data, out, "--max-seq-len", "16", "--set", "overlong=drop")
    assert done.returncode == 0, done.stdout + done.stderr
    built = json.loads((out / "result.json").read_text())["built"]
    assert (built["examples"], built["tokens"], built["trained_tokens"], built["matches"]) == (2, 20, 16, True)


def test_a_mismatch_on_rank_0_of_two_processes_is_the_same_refusal(tiny_model: Path, demo_data: Path,
                                                                   tmp_path: Path) -> None:
    """Under torchrun the exit code is torchrun's, not the child's 2: built.json decides."""
    out = tmp_path / "ddp"
    done = train(tiny_model, demo_data / "chat.jsonl", out, "--nproc-per-node", "2", "--effective-batch-size", "4",
                 env=_dropping_library(tmp_path))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "backend trl builds 63 examples; thub validated 64" in done.stderr
    assert not out.exists()


def test_grpo_counts_the_prompts_grpo_trainer_built(tiny_model: Path, demo_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "grpo"
    done = thub("train", "grpo", "--backend", "trl", "--model-path", str(tiny_model), "--data-path",
                str(demo_data / "grpo.jsonl"), "--ckpt-output-dir", str(out), "--max-steps", "1", "--group-size", "2",
                "--prompt-batch-size", "2", "--max-tokens", "4", "--reward", "math",
                "--set", "save_final_checkpoint=false")
    assert done.returncode == 0, done.stderr
    built = json.loads((out / "result.json").read_text())["built"]
    prompts = sum(1 for line in (demo_data / "grpo.jsonl").read_text().splitlines() if line.strip())
    assert (built["examples"], built["expected"]["examples"], built["matches"]) == (prompts, prompts, True)
    assert built["trained_tokens"] is None and built["samples_per_step"] == 4  # prompts x group size


def test_packed_sequences_are_measured_as_the_collator_yields_them(tiny_model: Path, edge_cases: Path,
                                                                   edge_cases_max_seq_len: int,
                                                                   tmp_path: Path) -> None:
    """With packing, SFTTrainer trains fewer, longer sequences (padding-free: each packed sample's
    first token masked by the collator): the totals it yields equal thub's."""
    out = tmp_path / "packed"
    done = train(tiny_model, edge_cases / "chat.jsonl", out, "--max-seq-len", str(edge_cases_max_seq_len),
                 "--set", "packing=true")
    assert done.returncode == 0, done.stdout + done.stderr
    built = json.loads((out / "result.json").read_text())["built"]
    assert built["examples"] < built["expected"]["examples"] == 10  # packed
    assert (built["tokens"], built["trained_tokens"]) == (built["expected"]["tokens"],
                                                          built["expected"]["trained_tokens"])
    assert built["matches"] is True and built["masks_equal"] is None
