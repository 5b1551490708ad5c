"""Real training runs on the tiny local model, on CPU: every algorithm, the run lifecycle,
interrupt + resume, crash and hang handling, and two processes through torchrun."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from thub.config.resolve import resolve
from thub.manager import load_registry
from thub.runner.metrics import read_metrics
from thub.testing.interrupt import sigterm_then_resume

pytestmark = pytest.mark.slow

METRIC_FIELDS = ("step", "max_steps", "epoch", "timestamp", "learning_rate")


def thub(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    environ.update(env or {})
    return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True,
                          env=environ, timeout=timeout)


def common(model: Path, data: Path, out: Path) -> list[str]:
    return ["--backend", "trl", "--model-path", str(model), "--data-path", str(data), "--ckpt-output-dir", str(out)]


def assert_finished_run(out: Path, status: str = "succeeded", reward: bool = False,
                        source_flag: bool = True) -> dict[str, Any]:
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == status, result
    record = json.loads((out / "thub_run.json").read_text())
    assert record["versions"]["library"]["name"] == "trl" and record["versions"]["library"]["version"]
    if source_flag:
        assert record["parameters"]["data_path"]["source"] == "flag --data-path"
    lines = read_metrics(out / "training_metrics.jsonl")
    assert lines, "no metrics written"
    for line in lines:
        assert all(field in line for field in METRIC_FIELDS), line
        assert ("reward" if reward else "loss") in line
        assert line["max_steps"] == lines[-1]["max_steps"]
    assert [line["step"] for line in lines] == list(range(1, len(lines) + 1))
    assert (out / "logs" / "train.log").stat().st_size > 0
    return result


def test_sft_loss_falls_and_final_model_saved(tiny_model: Path, demo_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "sft"
    done = thub("train", "sft", *common(tiny_model, demo_data / "chat.jsonl", out), "--learning-rate", "5e-3",
                "--num-epochs", "3", "--json")
    assert done.returncode == 0, done.stderr
    result = assert_finished_run(out)
    assert json.loads(done.stdout)["status"] == "succeeded"  # --json prints result.json
    lines = read_metrics(out / "training_metrics.jsonl")
    assert lines[-1]["max_steps"] == 24 and len(lines) == 24
    first, last = sum(line["loss"] for line in lines[:3]) / 3, sum(line["loss"] for line in lines[-3:]) / 3
    assert last < first * 0.7, (first, last)
    assert "step 1/" not in done.stderr  # --json: no progress lines, result.json on stdout
    assert result["final_checkpoint"] == str(out / "final")
    assert (out / "final" / "model.safetensors").exists() and (out / "final" / "tokenizer.json").exists()


def test_refuses_to_overwrite_a_finished_run(tiny_model: Path, demo_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "done"
    args = common(tiny_model, demo_data / "chat.jsonl", out) + ["--max-steps", "1"]
    assert thub("train", "sft", *args).returncode == 0
    again = thub("train", "sft", *args)
    assert again.returncode == 2 and "holds a finished run" in again.stderr and "--overwrite" in again.stderr
    assert thub("train", "sft", *args, "--overwrite").returncode == 0


@pytest.mark.parametrize("unmask", [False, True])
@pytest.mark.parametrize("data", ["demo", "edge_cases"])
def test_sft_trainer_trains_the_template_marked_tokens(data: str, unmask: bool, tiny_model: Path, demo_data: Path,
                                                       edge_cases: Path, edge_cases_max_seq_len: int,
                                                       tmp_path: Path) -> None:
    """What TRL's SFTTrainer itself prepares and collates from the runner's dataset is, row by row, the
    tokens the model's template marks (tool calls, odd turn orders, Unicode, unmask rows, the overlong row
    cut at max_seq_len): TRL's own preparation (its truncation, its dropping of fully masked rows) changes
    nothing."""
    import trl
    from thub_plugin_trl.runner import _load_tokenizer, _sft_dataset
    from transformers import AutoModelForCausalLM

    from thub.data import load_dataset_rows
    from thub.runner.context import RunContext
    from thub.runner.rundir import RunDirectory
    from thub.testing.masks import mask_differences

    path = (demo_data if data == "demo" else edge_cases) / "chat.jsonl"
    registry = load_registry()
    flags = {"model_path": str(tiny_model), "data_path": str(path), "ckpt_output_dir": str(tmp_path / "run"),
             "max_seq_len": edge_cases_max_seq_len, "unmask_messages": unmask}
    params = resolve(registry, "sft", backend="trl", flags=flags, environ={}).values()
    plan = registry.translate("sft", "trl", params)
    tokenizer = _load_tokenizer(plan)
    train, _ = _sft_dataset(RunContext("sft", "trl", params, RunDirectory(tmp_path / "run")), plan, tokenizer)
    trainer = trl.SFTTrainer(model=AutoModelForCausalLM.from_pretrained(tiny_model), processing_class=tokenizer,
                             args=trl.SFTConfig(**plan["config"]), train_dataset=train)
    prepared = trainer.train_dataset
    batch = trainer.data_collator([prepared[i] for i in range(len(prepared))])
    samples = [{"input_ids": ids[mask.bool()].tolist(), "labels": labels[mask.bool()].tolist()}
               for ids, labels, mask in zip(batch["input_ids"], batch["labels"], batch["attention_mask"], strict=True)]
    rows = load_dataset_rows(str(path))
    assert mask_differences(rows, samples, tokenizer, edge_cases_max_seq_len, unmask=unmask) == []


def test_lora_sft_saves_an_adapter(tiny_model: Path, demo_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "lora"
    done = thub("train", "lora_sft", *common(tiny_model, demo_data / "chat.jsonl", out), "--max-steps", "4",
                "--lora-r", "4", "--target-modules", "q_proj,v_proj")
    assert done.returncode == 0, done.stderr
    assert_finished_run(out)
    lines = read_metrics(out / "training_metrics.jsonl")
    assert f"loss {lines[0]['loss']:.4g} -> {lines[-1]['loss']:.4g} over steps 1-4" in done.stderr
    assert "step 4/4" in done.stderr  # plain progress lines when stderr is not a terminal
    config = json.loads((out / "final" / "adapter_config.json").read_text())
    assert config["r"] == 4 and sorted(config["target_modules"]) == ["q_proj", "v_proj"]
    assert (out / "final" / "adapter_model.safetensors").exists()
    assert not (out / "final" / "model.safetensors").exists()


def test_lora_sft_save_merged_exports_a_loadable_model(tiny_model: Path, demo_data: Path, tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    out = tmp_path / "merged"
    done = thub("train", "lora_sft", *common(tiny_model, demo_data / "chat.jsonl", out), "--max-steps", "2",
                "--lora-r", "4", "--learning-rate", "1e-2", "--save-merged")
    assert done.returncode == 0, done.stderr
    result = assert_finished_run(out)
    assert result["final_checkpoint"] == str(out / "final") and (out / "final" / "adapter_model.safetensors").exists()
    assert result["summary"]["merged_model"] == str(out / "merged")
    merged_dir = out / "merged"
    assert (merged_dir / "model.safetensors").exists() and (merged_dir / "tokenizer.json").exists()
    assert not (merged_dir / "adapter_config.json").exists()
    merged = AutoModelForCausalLM.from_pretrained(merged_dir)
    assert merged.dtype in (torch.bfloat16, torch.float16)
    assert not any("lora" in name for name, _ in merged.named_parameters())
    base = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=merged.dtype)
    changed = [name for name, p in merged.named_parameters()
               if not torch.equal(p, dict(base.named_parameters())[name])]
    assert changed and all("proj" in n for n in changed), changed  # the adapted linear layers, merged in
    with torch.no_grad():
        logits = merged(torch.tensor([[1, 2, 3]])).logits
    assert torch.isfinite(logits).all()


def test_continued_pretraining_on_documents(tiny_model: Path, demo_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "pt"
    done = thub("train", "sft", *common(tiny_model, demo_data / "documents.jsonl", out), "--is-pretraining",
                "--block-size", "64", "--max-steps", "3", "--effective-batch-size", "4")
    assert done.returncode == 0, done.stderr
    assert_finished_run(out)


@pytest.mark.parametrize("algorithm", ["grpo", "lora_grpo"])
def test_grpo_with_builtin_reward(algorithm: str, tiny_model: Path, demo_data: Path, tmp_path: Path) -> None:
    out = tmp_path / algorithm
    done = thub("train", algorithm, *common(tiny_model, demo_data / "grpo.jsonl", out), "--max-steps", "2",
                "--group-size", "4", "--prompt-batch-size", "2", "--max-tokens", "8", "--reward", "math",
                "--learning-rate", "1e-4")
    assert done.returncode == 0, done.stderr
    assert_finished_run(out, reward=True)


@pytest.mark.parametrize(("algorithm", "steps"), [("sft", 30), ("dpo", 15), ("kto", 15)])
def test_sigterm_checkpoints_and_resume_continues_without_gaps(algorithm: str, steps: int, tiny_model: Path,
                                                               demo_data: Path, preference_files: dict[str, Path],
                                                               tmp_path: Path) -> None:
    out = tmp_path / "resume"
    data = demo_data / "chat.jsonl" if algorithm == "sft" else preference_files[algorithm]
    args = ["train", algorithm, *common(tiny_model, data, out), "--max-steps", str(steps),
            "--effective-batch-size", "2"]
    sigterm_then_resume(args, out, steps=steps)
    assert_finished_run(out)  # every line has the unified fields, from trl


def test_crash_reports_failed_with_root_cause(tiny_model: Path, demo_data: Path, tmp_path: Path) -> None:
    (tmp_path / "bad_reward.py").write_text(textwrap.dedent("""
        def explode(prompts, completions, **kw):
            raise ValueError("reward function exploded on purpose")
    """))
    out = tmp_path / "crash"
    done = thub("train", "grpo", *common(tiny_model, demo_data / "grpo.jsonl", out), "--max-steps", "2",
                "--group-size", "2", "--max-tokens", "4", "--reward", "bad_reward:explode",
                env={"PYTHONPATH": str(tmp_path)})
    assert done.returncode == 1
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "failed"
    assert result["error"] == "ValueError: reward function exploded on purpose"
    assert any("bad_reward.py" in line for line in result["root_cause"])
    assert "root cause" in done.stderr and "reward function exploded on purpose" in done.stderr


def test_child_that_hangs_after_its_result_is_stopped(tiny_model: Path, demo_data: Path, tmp_path: Path) -> None:
    # a sitecustomize that makes only the training child (it has THUB_RUN_DIR) hang at exit
    (tmp_path / "sitecustomize.py").write_text(
        "import atexit, os, time\n"
        "if os.environ.get('THUB_RUN_DIR'):\n"
        "    atexit.register(lambda: time.sleep(3600))\n"
    )
    out = tmp_path / "hang"
    # timeout=1200 (a subprocess error past it) is the proof thub did not wait out the child's hour-long
    # hang, with room for a busy machine: the run itself takes seconds
    done = thub("train", "sft", *common(tiny_model, demo_data / "chat.jsonl", out), "--max-steps", "1",
                env={"PYTHONPATH": str(tmp_path), "THUB_EXIT_GRACE": "2"}, timeout=1200)
    assert done.returncode == 0, done.stderr
    result = assert_finished_run(out)
    assert "did not exit within 2 s" in result["note"]


def test_two_processes_through_torchrun_log_once(tiny_model: Path, demo_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "ddp"
    done = thub("train", "sft", *common(tiny_model, demo_data / "chat.jsonl", out), "--nproc-per-node", "2",
                "--max-steps", "3", "--effective-batch-size", "4")
    assert done.returncode == 0, done.stderr
    assert_finished_run(out)
    assert len(read_metrics(out / "training_metrics.jsonl")) == 3
    plan = json.loads((out / "thub_run.json").read_text())
    assert plan["parameters"]["nproc_per_node"]["value"] == 2
    log = (out / "logs" / "train.log").read_text()
    assert "torch.distributed" in log or "world_size" in log.lower() or log.count("thub: prepared") == 2


def test_bad_data_is_rejected_before_anything_is_written(tiny_model: Path, tmp_path: Path) -> None:
    data = tmp_path / "bad.jsonl"
    data.write_text('{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": '
                    '"yo"}]}\n{"messages": [\n')
    out = tmp_path / "never"
    done = thub("train", "sft", *common(tiny_model, data, out))
    assert done.returncode == 2
    assert f"{data}:2" in done.stderr and "Traceback" not in done.stderr
    assert not out.exists()


def test_failing_preflight_check_stops_the_launch(tiny_model: Path, demo_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "pre"
    done = thub("train", "sft", *common(tiny_model, demo_data / "chat.jsonl", out),
                env={"TMPDIR": str(tmp_path / "missing-tmp")})
    assert done.returncode == 1
    assert "preflight checks failed" in done.stderr and "core.tmpdir" in done.stderr and "fix:" in done.stderr
    assert not out.exists()


def test_sft_on_a_mix_of_chat_and_sharegpt(tiny_model: Path, demo_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "mix"
    done = thub("train", "sft", "--backend", "trl", "--model-path", str(tiny_model), "--ckpt-output-dir", str(out),
                "--dataset", str(demo_data / "chat.jsonl"), "--dataset",
                f"{demo_data / 'sharegpt.jsonl'}:format=sharegpt",
                "--mix-strategy", "interleave_under", "--max-steps", "2")
    assert done.returncode == 0, done.stderr
    assert_finished_run(out, source_flag=False)
    log = (out / "logs" / "train.log").read_text()
    assert "thub: prepared 32 of 32 samples" in log  # interleave_under: 16 + 16 rows


def test_crash_after_the_result_was_saved_keeps_succeeded(tiny_model: Path, demo_data: Path, tmp_path: Path) -> None:
    # teardown crashes (vLLM/Ray shutdown) after the model is saved must not turn a run into a failure
    (tmp_path / "sitecustomize.py").write_text(
        "import atexit, os\n"
        "if os.environ.get('THUB_RUN_DIR'):\n"
        "    atexit.register(lambda: os._exit(3))\n"
    )
    out = tmp_path / "teardown"
    done = thub("train", "sft", *common(tiny_model, demo_data / "chat.jsonl", out), "--max-steps", "1",
                env={"PYTHONPATH": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    result = assert_finished_run(out)
    assert "exited with code 3 after writing its result" in result["note"]
