"""The backend SDK: everything a backend plugin may use from thub, in one public module.

A backend plugin imports from ``thub.backend`` only (its tests may also use ``thub.testing``);
the contract kit (:class:`thub.testing.contract.BackendContract`) fails a plugin that imports any
other ``thub.*`` module, so that thub's internals can move without breaking plugins.

    from thub.backend import BackendSpec, RunContext, UsageError, hookimpl, split_batch

Importing this module is cheap: each name is looked up in the module that defines it on first
access and never cached here, so ``from thub.backend import RunContext`` costs what
``from thub.runner.context import RunContext`` costs, and a test that monkeypatches the defining
module (``thub.selection.cuda_visible``) is seen by a plugin that imports the name inside a
function. ``docs/writing-plugins.md`` lists what each name is for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# name -> defining module (one definition per fact: the code stays where it is)
_EXPORTS: dict[str, str] = {
    # registration
    "hookimpl": "thub.hookspecs",
    "BackendSpec": "thub.specs",
    "MemoryPolicy": "thub.specs",
    "CheckSpec": "thub.specs",
    "CheckContext": "thub.specs",
    "CheckResult": "thub.specs",
    "CommandSpec": "thub.specs",
    "translation_hook": "thub.specs",
    "load_object": "thub.specs",
    "get_registry": "thub.manager",
    # a plugin's own algorithm: its spec and parameter model (thub_register_algorithms)
    "AlgorithmSpec": "thub.specs",
    "BaseParams": "thub.params",
    "param": "thub.params",
    # errors
    "ThubError": "thub.errors",
    "UsageError": "thub.errors",
    "did_you_mean": "thub.errors",
    "DataMismatch": "thub.runner.built",
    # the machine and installed libraries
    "cuda_visible": "thub.selection",
    "when_gpu_visible": "thub.selection",
    "requirement_problem": "thub.selection",
    "installed_version": "thub.selection",
    # the training child
    "RunContext": "thub.runner.context",
    # data: a runner reads its rows from the run context (context.data(), rows(), prepare()),
    # never from params["data_path"]; these turn the rows into what its library trains on
    "TrainingData": "thub.data.training",
    "PrepareResult": "thub.data.prepare",
    "tokenize_chat": "thub.data",
    "load_tokenizer": "thub.data",
    "pretraining_blocks": "thub.data.blocks",
    "processed_samples": "thub.data.expected",
    "supervised_examples": "thub.data.examples",
    # the chat template renderer (like apply_chat_template, from the saved template, no transformers):
    # e.g. a BackendSpec.check_rows that checks how the model's template renders a row
    "ChatTemplate": "thub.data.templates",
    "TemplateRejected": "thub.data.templates",
    # a data kind of the plugin's own (thub_register_data_kinds): its spec, the pieces its
    # validator is built from (file:line errors alike), and what its preview is built from
    "DataKindSpec": "thub.specs",
    "DataFormatSpec": "thub.specs",
    "DatasetSource": "thub.data.formats",
    "RowCheck": "thub.data.formats",
    "check_messages": "thub.data.formats",
    "describe": "thub.data.formats",
    "sharegpt_tags": "thub.data.formats",
    "PreviewView": "thub.data.preview",
    "explain_messages": "thub.data.preview",
    "explain_prompt": "thub.data.preview",
    "explain_text": "thub.data.preview",
    "explain_ids": "thub.data.preview",
    # measured, not assumed: what the library built (context.report_built), see thub.runner.built
    "collated_labels": "thub.runner.built",
    # metrics and progress
    "MetricsWriter": "thub.runner.metrics",
    "MetricsTail": "thub.runner.metrics",
    "read_metrics": "thub.runner.metrics",
    "truncate_after": "thub.runner.metrics",
    "PollingFollower": "thub.runner.follow",
    "root_cause_from_file": "thub.runner.rootcause",
    # resuming a library that finds its own checkpoints: thub decides which one
    "library_resume_point": "thub.runner.checkpoints",
    "saved_file_problem": "thub.runner.checkpoints",
    # save_total_limit for a library without one: the plan's retention, applied by context.checkpoint()
    "thub_retention": "thub.runner.retention",
    # after training: an adapter merged into its base (PEFT's merge; `thub checkpoint merge` is the same)
    "merge_adapter": "thub.checkpoint.merge",
    # files
    "write_text_atomic": "thub.fileio",
    # Hugging Face Trainer based libraries
    "optional_training_args": "thub.runner.hf_trainer",
    "report_settings": "thub.runner.hf_trainer",
    "with_legacy_logging_dir": "thub.runner.hf_trainer",
    "metrics_callback": "thub.runner.hf_trainer",
    "validation_training_args": "thub.runner.hf_trainer",
    # held-out data: validation_data_path's rows (validation_split is split by the backend)
    "validation_data": "thub.data.validation",
    # batch split and distributed settings
    "split_batch": "thub.runner.batching",
    "world_size": "thub.runner.batching",
    "torchrun_values": "thub.launch.torchrun",
    # trackers
    "run_name": "thub.trackers",
    "shared_run_name": "thub.trackers",
    "tracker_run_names": "thub.trackers",
    "library_tracker_environment": "thub.trackers.library",
    "wandb_key_environment": "thub_builtins.trackers_wandb",  # the built-in W&B tracker's
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # what type checkers and editors see; at runtime __getattr__ imports on use
    from thub.checkpoint.merge import merge_adapter
    from thub.data import load_tokenizer, tokenize_chat
    from thub.data.blocks import pretraining_blocks
    from thub.data.examples import supervised_examples
    from thub.data.expected import processed_samples
    from thub.data.formats import DatasetSource, RowCheck, check_messages, describe, sharegpt_tags
    from thub.data.prepare import PrepareResult
    from thub.data.preview import PreviewView, explain_ids, explain_messages, explain_prompt, explain_text
    from thub.data.templates import ChatTemplate, TemplateRejected
    from thub.data.training import TrainingData
    from thub.data.validation import validation_data
    from thub.errors import ThubError, UsageError, did_you_mean
    from thub.fileio import write_text_atomic
    from thub.hookspecs import hookimpl
    from thub.launch.torchrun import torchrun_values
    from thub.manager import get_registry
    from thub.params import BaseParams, param
    from thub.runner.batching import split_batch, world_size
    from thub.runner.built import DataMismatch, collated_labels
    from thub.runner.checkpoints import library_resume_point, saved_file_problem
    from thub.runner.context import RunContext
    from thub.runner.follow import PollingFollower
    from thub.runner.hf_trainer import (
        metrics_callback,
        optional_training_args,
        report_settings,
        validation_training_args,
        with_legacy_logging_dir,
    )
    from thub.runner.metrics import MetricsTail, MetricsWriter, read_metrics, truncate_after
    from thub.runner.retention import thub_retention
    from thub.runner.rootcause import root_cause_from_file
    from thub.selection import cuda_visible, installed_version, requirement_problem, when_gpu_visible
    from thub.specs import (
        AlgorithmSpec,
        BackendSpec,
        CheckContext,
        CheckResult,
        CheckSpec,
        CommandSpec,
        DataFormatSpec,
        DataKindSpec,
        MemoryPolicy,
        load_object,
        translation_hook,
    )
    from thub.trackers import run_name, shared_run_name, tracker_run_names
    from thub.trackers.library import library_tracker_environment


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'thub.backend' has no attribute {name!r} (the backend SDK exports: "
                             f"{', '.join(__all__)})")
    import importlib

    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return [*__all__, "__doc__", "__name__"]
