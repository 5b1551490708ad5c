"""Preference tuning (``dpo``, ``kto``) on the trl backend, real on CPU with the tiny local model:
the translation to DPOConfig/KTOConfig, the tokens thub hands TRL under the ``overlong`` policy,
the metrics stream's preference fields, and real runs whose ``rewards/margins`` rise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from thub.config.resolve import resolve
from thub.errors import UsageError
from thub.manager import load_registry
from thub.runner.context import RunContext
from thub.runner.metrics import PREFERENCE_FIELDS, read_metrics
from thub.runner.rundir import RunDirectory

BASE = {"model_path": "m", "data_path": "d.jsonl", "ckpt_output_dir": "out"}


def _plan(algorithm: str, **params: Any) -> dict[str, Any]:
    registry = load_registry()
    resolved = resolve(registry, algorithm, backend="trl", flags={**BASE, **params}, environ={})
    return registry.translate(algorithm, "trl", resolved.values())


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def thub(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True, env=environ,
                          timeout=timeout)


# -- the metrics stream ------------------------------------------------------------------------


def test_metrics_stream_keeps_the_preference_fields(tmp_path: Path) -> None:
    """TRL logs ``rewards/chosen`` ...; the stream keeps those four ``/`` names (one schema) and
    still leaves the per-function GRPO names out."""
    from thub.runner.hf_trainer import metrics_callback

    run = RunDirectory(tmp_path / "run")
    run.path.mkdir(parents=True)
    callback = metrics_callback(RunContext("dpo", "trl", {}, run))
    logs = {"loss": 0.69, "learning_rate": 1e-6, "rewards/chosen": 0.02, "rewards/rejected": -0.01,
            "rewards/margins": 0.03, "rewards/accuracies": 0.75, "rewards/math/mean": 1.0, "logps/chosen": -40.0}
    state = SimpleNamespace(is_world_process_zero=True, epoch=0.5, global_step=3, max_steps=6)
    callback.on_log(None, state, None, logs=logs)
    (line,) = read_metrics(run.metrics)
    assert {name: line.get(name) for name in PREFERENCE_FIELDS} == {name: logs[name] for name in PREFERENCE_FIELDS}
    assert "rewards/math/mean" not in line and "logps/chosen" not in line and line["loss"] == 0.69


# -- translation -------------------------------------------------------------------------------


def test_dpo_and_kto_translate_to_real_trl_configs(tmp_path: Path) -> None:
    import trl

    dpo = _plan("dpo", ckpt_output_dir=str(tmp_path), max_seq_len=96, beta=0.25, loss_type="ipo",
                effective_batch_size=16, reference_model_path=str(tmp_path / "ref"))
    config = trl.DPOConfig(**dpo["config"])
    assert (config.max_length, config.beta, config.loss_type) == (96, 0.25, ["ipo"])
    assert (config.per_device_train_batch_size, config.gradient_accumulation_steps) == (8, 2)
    assert config.use_cpu is True and config.learning_rate == 1e-6  # DPOConfig's own default, shown as trl's
    assert dpo["trainer"] == "DPOTrainer" and dpo["reference_model"]["path"] == str(tmp_path / "ref")
    assert dpo["data"] == {"mode": "pairs", "overlong": "truncate", "max_seq_len": 96}
    assert _plan("dpo")["reference_model"] is None  # TRL's own frozen copy of model_path

    kto = _plan("kto", ckpt_output_dir=str(tmp_path), desirable_weight=1.5, undesirable_weight=0.5, overlong="drop")
    config = trl.KTOConfig(**kto["config"])
    assert (config.desirable_weight, config.undesirable_weight, config.beta) == (1.5, 0.5, 0.1)
    assert config.train_sampling_strategy == "sequential"  # TRL's KL pairing needs it: left as TRL has it
    assert kto["trainer"] == "KTOTrainer" and kto["data"]["mode"] == "unpaired" and kto["data"]["overlong"] == "drop"


@pytest.mark.parametrize("loss", ["orpo", "simpo"])
def test_losses_trl_runs_only_experimentally_are_refused_naming_the_backends_that_have_them(loss: str) -> None:
    with pytest.raises(UsageError, match=f"does not run dpo with loss_type {loss}.*sigmoid, ipo, hinge.*llamafactory"):
        _plan("dpo", loss_type=loss)
    assert _plan("dpo", loss_type="hinge")["config"]["loss_type"] == ["hinge"]


@pytest.mark.parametrize(("algorithm", "name", "value"), [
    ("dpo", "label_smoothing", 0.1),
])
def test_what_trl_would_not_use_is_refused(algorithm: str, name: str, value: Any) -> None:
    """TRL 1.16's sigmoid loss has no label smoothing: set, it is an error."""
    with pytest.raises(UsageError, match=f"does not honour these {algorithm} parameters:\n  {name}"):
        _plan(algorithm, **{name: value})


def test_kto_needs_two_answers_per_device_batch() -> None:
    with pytest.raises(UsageError, match="at least 2 answers per device batch.*gives 1"):
        _plan("kto", effective_batch_size=1)
    assert _plan("kto", effective_batch_size=2)["config"]["per_device_train_batch_size"] == 2


# -- the tokens TRL trains ---------------------------------------------------------------------


def _locations(path: Path, rows: list[dict[str, Any]]) -> list[str]:
    return [f"{path}:{i + 1}" for i in range(len(rows))]


def test_trl_trains_the_tokens_the_chat_template_renders_of_each_row(tiny_model: Path,
                                                                      preference_files: dict[str, Path],
                                                                      tmp_path: Path) -> None:
    """Hard rows (a system turn, tool calls whose arguments have other keys from row to row, a tool
    result, Unicode): what TRL's DPOTrainer collates is, row by row, the prompt as the template
    renders it with the generation prompt, then each answer. (TRL's own preparation, through an
    Arrow dataset, renders ``{"a": 2, "b": 2, "city": null}`` for a row that holds ``{"a": 2, "b": 2}``.)"""
    import trl
    from thub_plugin_trl.preference import pretokenized, tokenize_preference
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = preference_files["dpo"]
    rows = _rows(path)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    examples, stats = tokenize_preference(rows, _locations(path, rows), tokenizer, "pairs", 1024, "truncate")
    assert (stats.rows_in, stats.rows_out, stats.warnings()) == (12, 12, [])
    plan = _plan("dpo", model_path=str(tiny_model), ckpt_output_dir=str(tmp_path), effective_batch_size=4)
    from datasets import Dataset

    trainer = pretokenized(trl.DPOTrainer)(model=AutoModelForCausalLM.from_pretrained(tiny_model),
                                           args=trl.DPOConfig(**plan["config"]), processing_class=tokenizer,
                                           train_dataset=Dataset.from_list(examples))
    prepared = trainer.train_dataset
    batch = trainer.data_collator([prepared[i] for i in range(len(prepared))])
    n = len(rows)
    for i, row in enumerate(rows):
        for half, answer in ((0, "chosen"), (1, "rejected")):
            keep = batch["attention_mask"][half * n + i].bool()
            ids = batch["input_ids"][half * n + i][keep].tolist()
            trained = batch["input_ids"][half * n + i][batch["completion_mask"][half * n + i].bool()].tolist()
            prompt_text = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
            assert tokenizer.decode(ids) == tokenizer.apply_chat_template(row["prompt"] + row[answer], tokenize=False)
            assert tokenizer.decode(ids).startswith(prompt_text)
            assert tokenizer.decode(trained) == row[answer][0]["content"] + "<|im_end|>\n"
    tool_row = tokenizer.decode(prepared[2]["prompt_ids"])
    assert '"arguments": {"a": 2, "b": 2}' in tool_row and "null" not in tool_row
    assert "Zürich" in tokenizer.decode(prepared[3]["prompt_ids"]) and "答えは短く" in tokenizer.decode(
        prepared[1]["prompt_ids"])


def test_overlong_policies_are_counted_and_error_names_each_row(tiny_model: Path, preference_files: dict[str, Path],
                                                                tmp_path: Path) -> None:
    from thub_plugin_trl.preference import tokenize_preference
    from transformers import AutoTokenizer

    rows = _rows(preference_files["dpo"])
    rows.append({**rows[0], "chosen": [{"role": "assistant", "content": "yes " * 150}]})  # answer too long
    rows.append({**rows[0], "prompt": [{"role": "user", "content": "why " * 200}]})  # the prompt alone fills it
    path = tmp_path / "long.jsonl"
    where = _locations(path, rows)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)

    kept, stats = tokenize_preference(rows, where, tokenizer, "pairs", 128, "truncate")
    assert (len(kept), stats.truncated, stats.dropped_prompt_fills) == (13, 1, 1)
    assert stats.warnings() == [
        f"1 of 14 pairs cut at max_seq_len (the answer's end is not trained) (first: {where[12]})",
        f"1 of 14 pairs dropped: the prompt alone fills max_seq_len (first: {where[13]})"]
    kept, stats = tokenize_preference(rows, where, tokenizer, "pairs", 128, "drop")
    assert (len(kept), stats.dropped_overlong) == (12, 2)
    with pytest.raises(UsageError, match=rf"2 pairs longer than max_seq_len=128 tokens \(prompt \+ answer\): "
                                         rf"{where[12]} \(\d+ tokens\), {where[13]} \(\d+ tokens\)"):
        tokenize_preference(rows, where, tokenizer, "pairs", 128, "error")

    unpaired = _rows(preference_files["kto"])
    unpaired.append({**unpaired[1], "completion": [{"role": "assistant", "content": "no " * 150}]})
    kept, stats = tokenize_preference(unpaired, _locations(path, unpaired), tokenizer, "unpaired", 128, "drop")
    assert (len(kept), stats.dropped_overlong, kept[1]["label"]) == (24, 1, False)
    assert set(kept[0]) == {"prompt_ids", "completion_ids", "label"}


# -- real runs through `thub train` ------------------------------------------------------------


def _common(model: Path, data: Path, out: Path) -> list[str]:
    return ["--backend", "trl", "--model-path", str(model), "--data-path", str(data), "--ckpt-output-dir", str(out),
            "--max-seq-len", "128", "--learning-rate", "5e-4", "--effective-batch-size", "4"]


def _third_means(lines: list[dict[str, Any]], name: str) -> tuple[float, float]:
    third = len(lines) // 3
    values = [line[name] for line in lines]
    return sum(values[:third]) / third, sum(values[-third:]) / third


def test_dry_run_shows_the_dpo_config(tiny_model: Path, preference_files: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "plan"
    done = thub("train", "dpo", *_common(tiny_model, preference_files["dpo"], out), "--beta", "0.3",
                "--loss-type", "hinge", "--dry-run")
    assert done.returncode == 0, done.stderr
    for text in ("trainer: DPOTrainer", "config_class: DPOConfig", "max_length: 128", "beta: 0.3", "- hinge",
                 "reference_model: null", "mode: pairs"):
        assert text in done.stdout, (text, done.stdout)
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.parametrize(("algorithm", "epochs", "examples"), [("dpo", "3", 12), ("kto", "2", 24)])
def test_preference_run_learns_the_preference(algorithm: str, epochs: str, examples: int, tiny_model: Path,
                                              preference_files: dict[str, Path], tmp_path: Path) -> None:
    """The tiny model learns a consistent preference: ``rewards/margins`` rises over the run (the
    first step's policy is its own reference: margin 0, DPO loss ln 2), every metrics line carries
    the preference fields, and thub counted what TRL's collator got."""
    import math

    out = tmp_path / algorithm
    done = thub("train", algorithm, *_common(tiny_model, preference_files[algorithm], out), "--num-epochs", epochs)
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "succeeded", result
    lines = read_metrics(out / "training_metrics.jsonl")
    assert [line["step"] for line in lines] == list(range(1, examples * int(epochs) // 4 + 1))
    fields = PREFERENCE_FIELDS if algorithm == "dpo" else tuple(f for f in PREFERENCE_FIELDS if "accuracies" not in f)
    assert all(line.get(name) is not None for line in lines for name in (*fields, "loss", "learning_rate"))
    assert lines[0]["rewards/margins"] == lines[0]["rewards/chosen"] == 0.0
    if algorithm == "dpo":
        assert math.isclose(lines[0]["loss"], math.log(2), abs_tol=1e-4)
    first, last = _third_means(lines, "rewards/margins")
    assert last > first, (first, last)
    assert result["built"]["examples"] == examples
    log = (out / "logs" / "train.log").read_text()
    said = "pairs" if algorithm == "dpo" else "answers (12 desirable, 12 undesirable)"
    assert f"prepared {examples} of {examples} {said}" in log


def _long_pairs(preference_files: dict[str, Path], folder: Path) -> Path:
    """The dpo rows and two more: one whose answer is too long, one whose prompt alone fills max_seq_len."""
    rows = _rows(preference_files["dpo"])
    rows.append({**rows[0], "chosen": [{"role": "assistant", "content": "yes " * 150}]})
    rows.append({**rows[0], "prompt": [{"role": "user", "content": "why " * 200}]})
    data = folder / "long.jsonl"
    data.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return data


@pytest.fixture(scope="module")
def overlong_run(tiny_model: Path, preference_files: dict[str, Path],
                 tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """One real dpo step on the long pairs per ``overlong`` policy, each run once for the module. The
    ``truncate`` run also has another model (examples/make_tiny_model.py, seed 1) as its reference
    (``reference/``) for test_reference_model_path_is_the_frozen_reference: one run checks both."""
    root = tmp_path_factory.mktemp("dpo-overlong")
    data = _long_pairs(preference_files, root)
    runs: dict[str, Path] = {}

    def run(overlong: str) -> Path:
        if overlong not in runs:
            extra: list[str] = []
            if overlong == "truncate":
                subprocess.run([sys.executable, str(Path(__file__).parents[2] / "examples" / "make_tiny_model.py"),
                                "--out", str(root / "reference"), "--seed", "1"], check=True, capture_output=True,
                               text=True)
                extra = ["--reference-model-path", str(root / "reference")]
            out = root / overlong
            done = thub("train", "dpo", *_common(tiny_model, data, out), "--max-steps", "1", "--overlong", overlong,
                        *extra)
            assert done.returncode == 0, done.stderr[-4000:]
            runs[overlong] = out
        return runs[overlong]

    return run


@pytest.mark.slow
def test_reference_model_path_is_the_frozen_reference(overlong_run: Callable[[str], Path]) -> None:
    """With another model as reference the first step already has non-zero rewards (policy and
    reference differ); without one they are 0 (TRL's copy of the policy: test_preference_run_learns_the_preference)."""
    out = overlong_run("truncate")
    (line,) = read_metrics(out / "training_metrics.jsonl")
    assert line["rewards/chosen"] != 0.0 and line["rewards/rejected"] != 0.0
    assert json.loads((out / "thub_run.json").read_text())["parameters"]["reference_model_path"]["value"] == str(
        out.parent / "reference")


@pytest.mark.slow
@pytest.mark.parametrize(("overlong", "kept", "said"), [
    ("truncate", 13, ["1 of 14 pairs cut at max_seq_len", "1 of 14 pairs dropped: the prompt alone fills"]),
    ("drop", 12, ["2 of 14 pairs dropped: longer than max_seq_len"]),
])
def test_overlong_pairs_are_reported_and_what_trl_builds_is_what_thub_validated(
        overlong: str, kept: int, said: list[str], overlong_run: Callable[[str], Path]) -> None:
    """The pairs TRL's collator gets (counted before step 1) are the pairs thub validated under the
    run's overlong policy: ``built`` says ``as validated``, the log names what was cut or dropped."""
    out = overlong_run(overlong)
    built = json.loads((out / "result.json").read_text())["built"]
    assert (built["examples"], built["matches"]) == (kept, True)
    log = (out / "logs" / "train.log").read_text()
    assert f"prepared {kept} of 14 pairs" in log and all(text in log for text in said), log
