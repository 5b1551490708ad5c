"""dpo and kto on LLaMA-Factory for real, in its managed environment: its own parser and
preference data path build every pair thub validated (the model's chat template, the answer
trained), and real CPU runs of the tiny model through ``thub train`` log the preference metrics
under thub's names (``rewards/margins`` rising, the first DPO loss ln 2)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from thub.backend import TrainingData
from thub.config.resolve import resolve
from thub.manager import load_registry
from thub.runner.metrics import read_metrics

pytestmark = [pytest.mark.slow, pytest.mark.install]

# Runs in the managed environment: LLaMA-Factory's get_train_args, then its own get_dataset on the
# rows thub wrote (its sharegpt converter, the template it parses from the model's chat template,
# its pairwise or feedback processor); prints what it built.
BUILD = textwrap.dedent("""
    import json, sys, yaml
    from llamafactory.data import get_dataset, get_template_and_fix_tokenizer
    from llamafactory.hparams import get_train_args
    from llamafactory.model import load_tokenizer
    args = {**yaml.safe_load(open(sys.argv[1])), "report_to": "none"}
    model, data, training, finetuning, _ = get_train_args(args)
    module = load_tokenizer(model)
    tokenizer = module["tokenizer"]
    template = get_template_and_fix_tokenizer(tokenizer, data)
    stage = "rm" if finetuning.stage == "dpo" else "kto"
    dataset = get_dataset(template, model, data, training, stage=stage, **module)["train_dataset"]
    def text(ids): return tokenizer.decode(ids)
    def trained(labels): return tokenizer.decode([t for t in labels if t != -100])
    built = []
    for example in dataset:
        if stage == "rm":
            built.append({"chosen": text(example["chosen_input_ids"]), "rejected": text(example["rejected_input_ids"]),
                          "chosen_trained": trained(example["chosen_labels"]),
                          "rejected_trained": trained(example["rejected_labels"])})
        else:
            built.append({"text": text(example["input_ids"]), "trained": trained(example["labels"]),
                          "tag": example["kto_tags"]})
    print("BUILT", json.dumps({"stage": finetuning.stage, "pref_loss": finetuning.pref_loss,
                               "pref_beta": finetuning.pref_beta, "use_ref_model": finetuning.use_ref_model,
                               "kto_chosen_weight": finetuning.kto_chosen_weight, "built": built}))
""")


def _values(algorithm: str, model: Path, out: Path, **params: Any) -> dict[str, Any]:
    flags = {"model_path": str(model), "data_path": "d.jsonl", "ckpt_output_dir": str(out), **params}
    return resolve(load_registry(), algorithm, backend="llamafactory", flags=flags, environ={}).values()


def _plan(algorithm: str, model: Path, out: Path, **params: Any) -> dict[str, Any]:
    return load_registry().translate(algorithm, "llamafactory", _values(algorithm, model, out, **params))


@pytest.mark.parametrize("algorithm", ["dpo", "kto"])
def test_llamafactory_builds_every_row_with_the_models_template(lf_env: dict, tiny_model: Path, tmp_path: Path,
                                                                preference_files: dict[str, Path],
                                                                algorithm: str) -> None:
    from thub_plugin_llamafactory.dataset import write_preference_dataset
    from transformers import AutoTokenizer

    rows = [json.loads(line) for line in preference_files[algorithm].read_text().splitlines()]
    extra = {"desirable_weight": 2.0} if algorithm == "kto" else {}
    values = _values(algorithm, tiny_model, tmp_path / "run", beta=0.25, **extra)
    plan = load_registry().translate(algorithm, "llamafactory", values)
    write_preference_dataset(algorithm, TrainingData(rows, [f"p.jsonl:{i + 1}" for i in range(len(rows))],
                                                     algorithm, "k"), values, plan)
    config = tmp_path / "train.yaml"
    config.write_text(yaml.safe_dump(plan["args"]))
    done = subprocess.run([lf_env["python"], "-c", BUILD, str(config)], capture_output=True, text=True, timeout=600,
                          env=lf_env["environ"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(next(line[6:] for line in done.stdout.splitlines() if line.startswith("BUILT ")))
    assert (result["stage"], result["pref_beta"]) == (algorithm, 0.25)
    # LLaMA-Factory's own preprocessing built every row (none skipped as abnormal), in order
    assert len(result["built"]) == len(rows) == 8
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    for row, built in zip(rows, result["built"], strict=True):
        if algorithm == "dpo":
            assert result["pref_loss"] == "sigmoid" and result["use_ref_model"] is True
            for side in ("chosen", "rejected"):
                # the template LLaMA-Factory parsed renders as the model's chat template; the answer
                # (with its end-of-turn and the template's newline after it) is what is trained
                assert built[side] == tokenizer.apply_chat_template(row["prompt"] + row[side], tokenize=False)
                assert built[f"{side}_trained"] == row[side][0]["content"] + "<|im_end|>\n"
        else:
            assert result["kto_chosen_weight"] == 2.0
            assert built["text"] == tokenizer.apply_chat_template(row["prompt"] + row["completion"], tokenize=False)
            assert built["trained"] == row["completion"][0]["content"] + "<|im_end|>\n"
            assert built["tag"] is row["label"]


def thub(lf_env: dict, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True,
                          env=lf_env["environ"], timeout=timeout)


@pytest.mark.parametrize("algorithm", ["dpo", "kto"])
def test_real_cpu_preference_run(lf_env: dict, tiny_model: Path, preference_files: dict[str, Path], tmp_path: Path,
                                 algorithm: str) -> None:
    out = tmp_path / algorithm
    done = thub(lf_env, "train", algorithm, "--backend", "llamafactory", "--model-path", str(tiny_model),
                "--data-path", str(preference_files[algorithm]), "--ckpt-output-dir", str(out), "--max-steps", "6",
                "--learning-rate", "5e-3", "--effective-batch-size", "2", "--json")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-4000:]
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "succeeded", result
    lines = read_metrics(out / "training_metrics.jsonl")
    assert [line["step"] for line in lines] == [1, 2, 3, 4, 5, 6]
    # LLaMA-Factory's preference metrics, under the names of thub's metrics schema
    assert all("loss" in line and ("rewards/chosen" in line or "rewards/rejected" in line) for line in lines)
    # the reference is the initial policy: at step 1 every reward is 0 (the DPO loss ln 2; KTO's 0.5)
    assert lines[0]["loss"] == pytest.approx(math.log(2) if algorithm == "dpo" else 0.5, abs=1e-3)
    assert lines[0].get("rewards/margins", 0.0) == pytest.approx(0.0, abs=1e-6)  # KTO: with both labels only
    assert (out / "checkpoints" / "model.safetensors").exists()
    built = json.loads((out / "built.json").read_text())
    # counted from LLaMA-Factory's own dataset (its preference processor), before step 1
    assert built["examples"] == 8 and built["by"].startswith("llamafactory ")
    if algorithm == "dpo":
        assert all({"rewards/margins", "rewards/accuracies"} <= set(line) for line in lines)
        assert lines[-1]["rewards/margins"] > lines[0]["rewards/margins"] + 0.1  # the margin rises over the run
        assert max(line["rewards/accuracies"] for line in lines[1:]) == 1.0
