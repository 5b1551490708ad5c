"""``save_total_limit`` (issue 27 item 6): the library's own option where it has one (HF Trainer's
``save_total_limit``, verl's ``trainer.max_actor_ckpt_to_keep``), thub's pruning after each complete save
where it has none (mini-trainer, instructlab-training), on real checkpoint folders written to tmp."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from thub.config.resolve import resolve
from thub.manager import load_registry
from thub.runner.context import RunContext
from thub.runner.retention import prune, thub_retention
from thub.runner.rundir import RunDirectory

ROOT = Path(__file__).parents[1]

pytestmark = pytest.mark.needs_module("safetensors", "transformers")


#: a thub subprocess (the ``thub`` fixture of tests/conftest.py; these runs start in the checkout)
Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def saved_model(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model as transformers saves it (config.json + model.safetensors) with its tokenizer:
    what mini-trainer and instructlab-training write into ``hf_format/samples_N``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path_factory.mktemp("saved") / "model"
    AutoModelForCausalLM.from_pretrained(tiny_model).save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_model).save_pretrained(out)
    return out


def _samples(root: Path, saved: Path, *samples: int) -> list[Path]:
    folders = []
    for n in samples:
        folder = root / "checkpoints" / "hf_format" / f"samples_{n}"
        shutil.copytree(saved, folder)
        folders.append(folder)
    return folders


def _names(folder: Path) -> list[str]:
    return sorted((p.name for p in folder.iterdir()), key=lambda name: int(name.split("_")[1].split("-")[-1])
                  if name.split("_")[1].split("-")[-1].isdigit() else 0)


def test_keeps_the_newest_complete_checkpoints(saved_model: Path, tmp_path: Path) -> None:
    folders = _samples(tmp_path, saved_model, 10, 20, 30, 40, 50)
    removed = prune(folders[-1], 2, root=tmp_path)
    assert [p.name for p in removed] == ["samples_10", "samples_20", "samples_30"]
    assert _names(folders[0].parent) == ["samples_40", "samples_50"]
    assert prune(folders[-1], 2, root=tmp_path) == []  # already within the limit


def test_incomplete_and_newer_saves_are_neither_deleted_nor_counted(saved_model: Path, tmp_path: Path) -> None:
    folders = _samples(tmp_path, saved_model, 10, 20, 25, 30, 60)
    weights = folders[2] / "model.safetensors"  # samples_25: killed mid-save
    weights.write_bytes(weights.read_bytes()[:1000])
    (folders[4] / "config.json").unlink()  # samples_60: a save under way (weights written, config not yet)
    removed = prune(folders[3], 1, root=tmp_path)  # samples_30 reported
    assert [p.name for p in removed] == ["samples_10", "samples_20"]
    assert _names(folders[0].parent) == ["samples_25", "samples_30", "samples_60"]


def test_a_reported_save_that_is_not_complete_deletes_nothing(saved_model: Path, tmp_path: Path) -> None:
    folders = _samples(tmp_path, saved_model, 10, 20, 30)
    weights = folders[2] / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    assert prune(folders[2], 1, root=tmp_path) == []  # the older ones are what a resume would use
    assert len(list(folders[0].parent.iterdir())) == 3


def test_best_and_protected_checkpoints_are_kept(saved_model: Path, tmp_path: Path) -> None:
    folders = _samples(tmp_path, saved_model, 10, 20, 30, 40)
    best = folders[0].parent / "samples_15_best_val_loss"
    shutil.copytree(saved_model, best)
    removed = prune(folders[-1], 1, root=tmp_path, protect=[folders[1]])
    assert [p.name for p in removed] == ["samples_10", "samples_30"]
    assert _names(folders[0].parent) == ["samples_15_best_val_loss", "samples_20", "samples_40"]


def test_nothing_outside_the_run_directory_is_touched(saved_model: Path, tmp_path: Path) -> None:
    folders = _samples(tmp_path / "elsewhere", saved_model, 1, 2, 3)
    assert prune(folders[-1], 1, root=tmp_path / "run") == []
    assert len(list(folders[0].parent.iterdir())) == 3


def test_hf_trainer_checkpoints_and_the_resume_point(saved_model: Path, tmp_path: Path) -> None:
    run_dir = RunDirectory(tmp_path)
    for step in range(1, 5):
        folder = run_dir.checkpoints / f"checkpoint-{step}"
        shutil.copytree(saved_model, folder)
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    removed = prune(run_dir.checkpoints / "checkpoint-4", 2, root=tmp_path)
    assert [p.name for p in removed] == ["checkpoint-1", "checkpoint-2"]
    assert run_dir.latest_checkpoint() == (run_dir.checkpoints / "checkpoint-4", 4)
    with pytest.raises(ValueError, match="at least 1"):
        prune(run_dir.checkpoints / "checkpoint-4", 0, root=tmp_path)


def test_the_run_context_prunes_after_each_reported_save(saved_model: Path, tmp_path: Path) -> None:
    """The one call site: ``context.checkpoint()`` with the plan's ``retention`` set."""
    context = RunContext(algorithm="sft", backend="mini-trainer", params={"save_total_limit": 2},
                         run_dir=RunDirectory(tmp_path), retention=thub_retention({"save_total_limit": 2}))
    kept: list[list[str]] = []
    for step, samples in enumerate((8, 16, 24, 32), start=1):
        [folder] = _samples(tmp_path, saved_model, samples)  # saved, then reported
        context.checkpoint(folder, step)
        kept.append(_names(folder.parent))
    assert kept == [["samples_8"], ["samples_8", "samples_16"], ["samples_16", "samples_24"],
                    ["samples_24", "samples_32"]]
    assert len((tmp_path / "events.jsonl").read_text().splitlines()) == 4
    unset = RunContext(algorithm="sft", backend="mini-trainer", params={}, run_dir=RunDirectory(tmp_path / "all"))
    for step, folder in enumerate(_samples(tmp_path / "all", saved_model, 8, 16, 24), start=1):
        unset.checkpoint(folder, step)
    assert len(list((tmp_path / "all" / "checkpoints" / "hf_format").iterdir())) == 3
    assert thub_retention({}) is None and thub_retention({"save_total_limit": None}) is None


# --- the parameter and each backend's translation -------------------------------------------------------

def _values(algorithm: str, backend: str, **flags: Any) -> dict[str, Any]:
    base = {"model_path": "m", "data_path": str(ROOT / "examples" / "data" / "chat.jsonl"), "ckpt_output_dir": "o"}
    return resolve(load_registry(), algorithm, backend=backend, flags={**base, **flags}, environ={}).values()


def _translate(algorithm: str, backend: str, **flags: Any) -> dict[str, Any]:
    registry = load_registry()
    return registry.translate(algorithm, backend, _values(algorithm, backend, **flags))


def test_a_limit_below_one_is_refused(thub: Run, tmp_path: Path) -> None:
    done = thub("train", "sft", "--backend", "trl", "--model-path", "m", "--data-path",
                str(ROOT / "examples" / "data" / "chat.jsonl"), "--ckpt-output-dir", str(tmp_path / "o"),
                "--save-total-limit", "0", "--dry-run", cwd=ROOT)
    assert done.returncode == 2, done.stderr
    assert "save_total_limit" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("algorithm", ["sft", "lora_sft", "dpo", "kto", "grpo"])
def test_trl_passes_it_to_its_own_config(algorithm: str) -> None:
    from trl import DPOConfig, GRPOConfig, KTOConfig, SFTConfig

    plan = _translate(algorithm, "trl", save_total_limit=2, save_steps=1)
    config_class = {"sft": SFTConfig, "lora_sft": SFTConfig, "dpo": DPOConfig, "kto": KTOConfig,
                    "grpo": GRPOConfig}[algorithm]
    fields = {k: v for k, v in plan["config"].items() if k in config_class.__dataclass_fields__}
    assert config_class(**fields).save_total_limit == 2
    assert "save_total_limit" not in _translate(algorithm, "trl")["config"]  # unset: TRL's default (keep all)


@pytest.mark.parametrize("algorithm", ["sft", "lora_sft", "dpo", "kto"])
@pytest.mark.needs_backend("llamafactory")
def test_llamafactory_passes_it_to_its_training_arguments(algorithm: str) -> None:
    from transformers import Seq2SeqTrainingArguments  # LLaMA-Factory's TrainingArguments subclass this

    plan = _translate(algorithm, "llamafactory", save_total_limit=3, save_steps=1)
    assert plan["args"]["save_total_limit"] == 3
    assert "save_total_limit" in Seq2SeqTrainingArguments.__dataclass_fields__


@pytest.mark.needs_backend("axolotl", "unsloth")
def test_axolotl_and_unsloth_pass_it_to_the_trainer() -> None:
    assert _translate("sft", "axolotl", save_total_limit=2)["config"]["save_total_limit"] == 2
    assert _translate("lora_sft", "unsloth", save_total_limit=2)["config"]["save_total_limit"] == 2


@pytest.mark.needs_backend("verl")
def test_verl_keeps_that_many_actor_checkpoints() -> None:
    plan = _translate("grpo", "verl", data_path=str(ROOT / "examples" / "data" / "grpo.jsonl"), reward=["length"],
                      save_total_limit=2)
    assert "trainer.max_actor_ckpt_to_keep=2" in plan["overrides"]


@pytest.mark.parametrize(("backend", "algorithm"), [("mini-trainer", "sft"), ("mini-trainer", "osft"),
                                                    ("instructlab-training", "sft")])
def test_backends_without_a_limit_get_thubs_pruning_in_the_plan(thub: Run, backend: str, algorithm: str,
                                                                tmp_path: Path) -> None:
    """The wiring, shown by the dry run: the plan's ``retention`` is what the runner gives the context."""
    if backend not in load_registry().backends:
        pytest.skip(f"thub-plugin-{backend} is not installed")
    extra = ["--unfreeze-rank-ratio", "0.25"] if algorithm == "osft" else []
    extra += ["--save-steps", "2"] if backend == "mini-trainer" else ["--save-samples", "16"]
    done = thub("train", algorithm, "--backend", backend, "--model-path", "m", "--data-path",
                str(ROOT / "examples" / "data" / "chat.jsonl"), "--ckpt-output-dir", str(tmp_path / "o"),
                "--save-total-limit", "2", "--effective-batch-size", "8",
                "--max-tokens-per-gpu", "512", "--max-seq-len", "256", *extra, "--dry-run", "--json", cwd=ROOT)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    translation = plan["translation"]
    assert translation["retention"]["save_total_limit"] == 2, translation
    assert translation["retention"]["applied_by"] == "thub"


# --- mini-trainer's runner (its workers need CUDA: run_training stands in, writing real folders) --------

class _SavingMiniTrainer:
    """Stands in for ``mini_trainer.run_training``: its metrics lines and, every save, a real
    ``hf_format/samples_N`` (the model as transformers saves it, weights first, then the config)."""

    def __init__(self, saved: Path, steps: int) -> None:
        self.saved, self.steps = saved, steps

    def __call__(self, torch_args: Any, train_args: Any) -> None:
        out = Path(train_args.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        per_epoch = math.ceil(64 / train_args.batch_size)
        for step in range(1, self.steps + 1):
            line = {"step": step, "epoch": (step - 1) // per_epoch, "steps_per_epoch": per_epoch, "lr": 1e-5,
                    "grad_norm": 1.0, "loss": 3.0 / step, "num_samples": train_args.batch_size,
                    "total_samples_accumulated": step * train_args.batch_size, "val_loss": None,
                    "peak_memory_usage_GB": 1.0, "timestamp": "2026-11-30T12:00:00"}
            with (out / "training_metrics_0.jsonl").open("a") as handle:
                handle.write(json.dumps(line) + "\n")
            if step * train_args.batch_size % train_args.min_samples_per_checkpoint == 0:
                folder = out / "hf_format" / f"samples_{step * train_args.batch_size}"
                shutil.copytree(self.saved, folder)
                # as the real one, which goes on training meanwhile; here: once thub has reported it (and
                # pruned), so each save is seen on its own (a hang guard, not a timing assert)
                events = out.parent / "events.jsonl"
                deadline = time.time() + 300
                while str(folder) not in (events.read_text() if events.exists() else "") and time.time() < deadline:
                    time.sleep(0.05)


def test_mini_trainer_runner_prunes_its_hf_format_saves(saved_model: Path, tiny_model: Path, demo_data: Path,
                                                         tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mini_trainer = pytest.importorskip("mini_trainer")
    from thub_plugin_minitrainer.runner import run

    monkeypatch.setattr(mini_trainer, "run_training", _SavingMiniTrainer(saved_model, 8))
    params = resolve(load_registry(), "sft", backend="mini-trainer", environ={}, flags={
        "model_path": str(tiny_model), "data_path": str(demo_data / "chat.jsonl"),
        "ckpt_output_dir": str(tmp_path / "run"), "effective_batch_size": 8, "max_seq_len": 256,
        "max_tokens_per_gpu": 512, "save_steps": 2, "save_total_limit": 2}).values()
    run_dir = RunDirectory(tmp_path / "run")
    run_dir.path.mkdir()
    outcome = run(RunContext(algorithm="sft", backend="mini-trainer", params=params, run_dir=run_dir))
    hf_format = run_dir.checkpoints / "hf_format"
    assert sorted(p.name for p in hf_format.iterdir()) == ["samples_48", "samples_64"]
    assert outcome["final_checkpoint"] == str(hf_format / "samples_64")
    events = [json.loads(x) for x in run_dir.events.read_text().splitlines()]
    assert [Path(e["path"]).name for e in events] == ["samples_16", "samples_32", "samples_48", "samples_64"]


# --- Training Hub's names --------------------------------------------------------------------------------

def test_training_hub_save_total_limit_is_thubs(tmp_path: Path) -> None:
    import thub

    plan = thub.dry_run("lora_sft", backend="trl", model_path="m", data_path=str(ROOT / "examples" / "data" /
                        "chat.jsonl"), ckpt_output_dir=str(tmp_path / "o"), save_steps=10, save_total_limit=3)
    assert plan["parameters"]["save_total_limit"]["value"] == 3
    assert plan["translation"]["config"]["save_total_limit"] == 3


@pytest.mark.parametrize(("keep_last", "limit"), [(True, 1), (False, None)])
def test_training_hub_keep_last_checkpoint_only_is_a_limit_of_one(keep_last: bool, limit: int | None,
                                                                  tmp_path: Path) -> None:
    import thub

    if "instructlab-training" not in load_registry().backends:
        pytest.skip("thub-plugin-instructlab is not installed")
    plan = thub.dry_run("sft", backend="instructlab-training", model_path="m",
                        data_path=str(ROOT / "examples" / "data" / "chat.jsonl"), ckpt_output_dir=str(tmp_path / "o"),
                        num_epochs=1, effective_batch_size=8, learning_rate=1e-5, max_seq_len=256,
                        max_tokens_per_gpu=512, keep_last_checkpoint_only=keep_last)
    assert plan["parameters"]["save_total_limit"]["value"] == limit
    assert (plan["translation"]["retention"] or {}).get("save_total_limit") == limit


def test_art_refuses_it(thub: Run, tmp_path: Path) -> None:
    """ART saves an adapter every step and its delete_checkpoints keeps the newest and the best, with no count."""
    if "art" not in load_registry().backends:
        pytest.skip("thub-plugin-art is not installed")
    done = thub("train", "lora_grpo", "--backend", "art", "--model-path", "m", "--data-path",
                str(ROOT / "examples" / "data" / "grpo.jsonl"), "--ckpt-output-dir", str(tmp_path / "o"),
                "--reward", "length", "--save-total-limit", "2", "--dry-run", cwd=ROOT)
    assert done.returncode == 2 and "save_total_limit" in done.stderr and "Traceback" not in done.stderr
