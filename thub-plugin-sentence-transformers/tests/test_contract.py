"""thub's backend contract for sentence-transformers, and the translation against its own types."""

from __future__ import annotations

from pathlib import Path

import pytest

from thub.config.resolve import resolve
from thub.errors import UsageError
from thub.manager import load_registry
from thub.testing import BackendContract

BASE = {"model_path": "m", "data_path": "d.jsonl", "ckpt_output_dir": "out"}


class TestSentenceTransformersContract(BackendContract):
    backend = "sentence-transformers"
    plugin_module = "thub_plugin_sentence_transformers"
    readme = Path(__file__).parents[1] / "README.md"
    samples = {"embedding_sft": {**BASE, "loss_type": "mnrl", "learning_rate": 1e-4}}
    read_samples = [("embedding_sft", {**BASE, "validation_split": 0.2, "max_steps": 3, "save_steps": 2,
                                       "lr_scheduler": "cosine", "beta1": 0.8, "warmup_steps": 2,
                                       "batch_sampler": "default", "max_seq_len": 32}),
                    ("embedding_sft", {**BASE, "loss_fn": "x:Y", "validation_data_path": "v.jsonl",
                                       "checkpoint_at_epoch": True})]
    checks = frozenset()


def _plan(**params):
    registry = load_registry()
    resolved = resolve(registry, "embedding_sft", backend="sentence-transformers", flags={**BASE, **params},
                       environ={})
    return registry.translate("embedding_sft", "sentence-transformers", resolved.values())


def test_plan_builds_real_training_arguments(tmp_path: Path) -> None:
    pytest.importorskip("sentence_transformers")
    from sentence_transformers.sentence_transformer.training_args import SentenceTransformerTrainingArguments

    plan = _plan(ckpt_output_dir=str(tmp_path), max_steps=3, weight_decay=0.1)
    args = SentenceTransformerTrainingArguments(**plan["args"])
    assert args.output_dir == f"{tmp_path}/checkpoints" and args.max_steps == 3 and args.weight_decay == 0.1
    # Training Hub's defaults: 20 epochs, batch 32, lr 2e-5, warm-up 10 %, group_by_label for triplets
    assert (args.num_train_epochs, args.per_device_train_batch_size, args.learning_rate) == (20, 32, 2e-5)
    assert args.warmup_steps == 0.1 and args.batch_sampler == "group_by_label"
    assert plan["loss"] == {"type": "batch_all_triplet"} and plan["pairs"] is False


def test_sampler_follows_the_loss_as_in_training_hub() -> None:
    pytest.importorskip("sentence_transformers")
    from sentence_transformers.sentence_transformer.training_args import BatchSamplers

    assert _plan(loss_type="mnrl")["args"]["batch_sampler"] == "no_duplicates"
    assert _plan(loss_type="mnrl")["pairs"] is True
    # Training Hub's "default" is sentence-transformers' plain BatchSampler
    assert BatchSamplers(_plan(loss_fn="m:L")["args"]["batch_sampler"]) is BatchSamplers.BATCH_SAMPLER
    assert BatchSamplers(_plan(batch_sampler="default")["args"]["batch_sampler"]) is BatchSamplers.BATCH_SAMPLER
    assert _plan(loss_type="mnrl", batch_sampler="group_by_label")["args"]["batch_sampler"] == "group_by_label"


def test_warmup_steps_replace_the_ratio_and_both_are_refused() -> None:
    assert _plan(warmup_steps=3)["args"]["warmup_steps"] == 3
    with pytest.raises(UsageError, match="warmup_ratio and warmup_steps"):
        _plan(warmup_steps=3, warmup_ratio=0.2)


def test_unhonoured_parameter_is_rejected() -> None:
    with pytest.raises(UsageError, match="nproc_per_node"):
        _plan(nproc_per_node=2)
