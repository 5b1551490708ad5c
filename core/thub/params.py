"""Parameters every algorithm shares (:class:`BaseParams`) and :func:`param`, the way each
parameter is declared: one pydantic field with a default, a group and one line of help.

An algorithm's parameter model subclasses :class:`BaseParams` (a third-party algorithm imports
this module, never the built-in plugin ``thub_builtins``), and the core reads shared defaults
here (``divergence_steps``). The CLI options, the YAML schema (``thub config schema``),
``thub config init``, the Python API and the docs are generated from the fields
(:mod:`thub.config.fields`). A field left ``None`` means "the backend's default".

Imports pydantic: loaded only by commands that need parameters, never by ``thub --help``.
"""

from __future__ import annotations

import os
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)

__all__ = ["REQUIRED", "BaseParams", "DataFormat", "expand_path", "param", "with_tracker_parameters"]


def param(default: Any = None, *, group: str, help: str, flag: str | None = None, split: bool = True,
           path: bool = False, core_applied: bool = False, **kw: Any) -> Any:
    """A parameter: default, group (for --help and docs) and one line of help.

    ``flag`` renames the CLI option (``--dataset`` for ``datasets``); ``split=False`` keeps a list
    option's values whole instead of splitting them on commas. ``path=True``: a file-system path
    (its leading ``~`` is expanded once, at validation, whatever the source: :func:`expand_path`).
    ``core_applied=True``: thub's core applies it for every backend (the data, its mixing, the run
    directory): honoured by every backend without any listing it (:func:`thub.config.fields.core_applied`).
    """
    extra: dict[str, Any] = {"group": group}
    if flag:
        extra["flag"] = flag
    if not split:
        extra["split"] = False
    if path:
        extra["path"] = True
    if core_applied:
        extra["core_applied"] = True
    return Field(default, description=help, json_schema_extra=extra, **kw)


def expand_path(value: Any) -> Any:
    """``value`` with a leading ``~`` / ``~user`` expanded: a path string, each string of a list,
    and the ``path`` of each mapping in a list (``datasets``). Environment variables are not
    expanded: a literal ``$`` is a valid path character, no training library expands them either,
    and a shell has already expanded the ones typed on a command line."""
    if isinstance(value, str):
        return os.path.expanduser(value) if value.startswith("~") else value
    if isinstance(value, list):
        return [{**item, "path": expand_path(item["path"])} if isinstance(item, dict) and "path" in item
                else expand_path(item) for item in value]
    return value


def _has_nul(value: Any) -> bool:
    """Whether a NUL byte is in any string of ``value`` (keys and values of nested lists/mappings)."""
    if isinstance(value, str):
        return "\0" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_has_nul(item) for item in value)
    return False


REQUIRED = ...


def _registered_format(value: str) -> str:
    """``value`` when it is ``auto`` or a data format a plugin registered (thub_register_data_kinds)."""
    from thub.data.kinds import formats

    known = formats()
    if value != "auto" and value not in known.by_name:
        expected, hint = known.registry.unknown_format(value)
        raise ValueError(expected + hint)  # pydantic reports it under the field's name, with the value
    return value


class _FormatSchema:
    """The JSON Schema of ``data_format``: an enum of the formats registered when it is generated."""

    def __get_pydantic_json_schema__(self, core_schema: Any, handler: Any) -> dict[str, Any]:
        from thub.data.kinds import format_names

        return {**handler(core_schema), "enum": ["auto", *format_names()]}


#: ``auto`` or the name of a registered data format (checked against the plugins' registry)
DataFormat = Annotated[str, AfterValidator(_registered_format), _FormatSchema()]


def _takes_bool(annotation: Any) -> bool:
    """Whether a field's type admits a bool as itself: anything but a number (``int``, ``float``,
    optional or annotated), which pydantic's lax mode would make of it (True -> 1)."""
    import types
    import typing

    if annotation in (int, float):
        return False
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _takes_bool(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return any(_takes_bool(arg) for arg in typing.get_args(annotation) if arg is not type(None))
    return True


class BaseParams(BaseModel):
    """Parameters shared by every algorithm."""

    # allow_inf_nan=False: inf, 1e309 and nan are never a learning rate, clip norm or epsilon
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    # core
    model_path: str = param(REQUIRED, path=True, core_applied=True, group="core",
                            help="Local path or hub id of the base model.")
    data_path: str | None = param(path=True, core_applied=True, group="core",
                                  help="Training data: a JSONL, JSON, Parquet or CSV file, a saved HF dataset "
                                       "directory, or a Hub dataset id org/name (its train split); or use datasets.")
    ckpt_output_dir: str = param(REQUIRED, path=True, core_applied=True, group="core",
                                 help="Run directory: checkpoints, metrics, logs, result.json.")
    data_format: DataFormat = param("auto", core_applied=True, group="core",
                                    help="Data format; 'auto' detects it from the first row.")
    datasets: list[str | dict[str, Any]] | None = param(
        core_applied=True, group="data", flag="dataset", split=False, path=True,
        help="Several datasets to mix: PATH[:key=value,...] on the command line, or mappings "
             "{path, format, role_tag, content_tag, user_tag, assistant_tag, prob, ...} in YAML (see docs/data.md).")
    mix_strategy: Literal["concat", "interleave_under", "interleave_over"] = param(
        "concat", core_applied=True, group="data",
        help="How datasets are combined: concat, or interleave until the shortest/longest ends.")
    mix_probabilities: list[Annotated[float, Field(ge=0)]] | None = param(
        core_applied=True, group="data", help="Sampling weights of the datasets for interleaving.")
    num_epochs: int | None = param(group="core", help="Passes over the data.", ge=1)
    max_steps: int | None = param(group="core",
                                  help="Stop after this many optimizer steps (overrides num_epochs where the backend "
                                       "supports it).", ge=1)
    effective_batch_size: int | None = param(group="core",
                                             help="Samples per optimizer step across all processes (per-device batch x "
                                                  "accumulation x world size).", ge=1)
    learning_rate: float | None = param(group="core", help="Peak learning rate.", gt=0)
    max_seq_len: int | None = param(group="core", help="Maximum tokens per sample.", ge=1)
    max_tokens_per_gpu: int | None = param(group="core",
                                           help="Token budget per GPU per micro-batch (dynamic batching).", ge=1)
    seed: int = param(42, group="core", ge=0, lt=2**32,
                      help="Random seed for data order and initialisation (numpy's range).")
    data_output_dir: str | None = param(path=True, group="core",
                                        help="Where prepared data goes (default: inside the run directory).")
    save_steps: int | None = param(group="core", help="Save a checkpoint every N steps.", ge=1)
    checkpoint_at_epoch: bool | None = param(group="core", help="Save a checkpoint at the end of every epoch.")
    save_final_checkpoint: bool = param(True, group="core", help="Save the model when training ends.")
    save_total_limit: int | None = param(group="core", ge=1,
                                         help="Keep only the newest N complete checkpoints, deleting older ones "
                                              "after each save; the one --resume would use, the final model and "
                                              "the best one are always kept (unset: keep all).")
    checkpoint_storage: str | None = param(
        core_applied=True, group="core",
        help="Mirror every complete checkpoint to this URI (s3://BUCKET/PREFIX, gs://BUCKET/PREFIX, file:///PATH), "
             "a completion marker written last; --resume continues from the newest complete one, local or "
             "remote (docs/checkpoints.md#mirror-checkpoint_storage).")
    export: str | None = param(path=True, core_applied=True, group="core",
                               help="After a successful run, make the final model a verified, self-contained "
                                    "Hugging Face folder here: merge an adapter, consolidate a sharded "
                                    "checkpoint or copy an HF model, then verify it (result.json export; "
                                    "docs/checkpoints.md).")
    eval: list[str] | None = param(core_applied=True, group="core",
                                   help="After a successful run (and its export), score the final model (the "
                                        "export folder when there is one) on these tasks: harness task names or "
                                        "local task files (RUN_DIR/eval/, result.json eval; docs/eval.md).")
    eval_base: bool = param(False, core_applied=True, group="core",
                            help="With eval: also score the base model, for tuned-minus-base deltas.")
    push: str | None = param(core_applied=True, group="core",
                             help="After a successful run (its export and eval), publish the export folder (or an "
                                  "HF final model) with its model card: hf://ORG/NAME[@BRANCH], mlflow://NAME, "
                                  "s3://, gs://, file:/// (thub checkpoint push; docs/checkpoints.md).")
    push_public: bool = param(False, core_applied=True, group="core",
                              help="With push to hf://: make the Hub repo public (default: private).")
    trust_remote_code: bool = param(False, group="core", help="Allow model code from the model repository.")
    gradient_checkpointing: bool | None = param(group="core",
                                                help="Trade compute for memory by recomputing activations.")
    allow_data_mismatch: bool = param(False, core_applied=True, group="data",
                                      help="Train even when the backend's library builds other examples or trained "
                                           "tokens than thub validated (measured before step 1; see result.json "
                                           "built).")

    # optimizer
    lr_scheduler: str | None = param(group="optimizer", help="Learning-rate schedule (linear, cosine, constant, ...).")
    lr_scheduler_kwargs: dict[str, Any] | None = param(group="optimizer",
                                                       help="Extra scheduler arguments (JSON object).")
    warmup_steps: int | None = param(group="optimizer", help="Linear warm-up steps.", ge=0)
    beta1: float | None = param(group="optimizer", help="AdamW beta1 (torch's range).", ge=0, lt=1)
    beta2: float | None = param(group="optimizer", help="AdamW beta2 (torch's range).", ge=0, lt=1)
    eps: float | None = param(group="optimizer", help="AdamW epsilon.", gt=0)
    weight_decay: float | None = param(group="optimizer", help="AdamW weight decay.", ge=0)
    max_grad_norm: float | None = param(group="optimizer", help="Gradient clipping norm.", gt=0)

    # torchrun / distributed
    nproc_per_node: Annotated[int, Field(ge=1)] | Literal["auto", "gpu"] | None = param(
        group="distributed", help="Processes per node (an int, 'auto' or 'gpu').")
    nnodes: int | None = param(group="distributed", help="Number of nodes.", ge=1)
    node_rank: int | None = param(group="distributed", help="Rank of this node.", ge=0)
    rdzv_id: str | None = param(group="distributed", help="Rendezvous id.")
    rdzv_endpoint: str | None = param(group="distributed", help="Rendezvous endpoint host:port.")
    master_addr: str | None = param(group="distributed", help="Master address (static rendezvous).")
    master_port: int | None = param(group="distributed", help="Master port.", ge=1, le=65535)

    # logging
    logging_steps: int = param(1, group="logging", help="Write a metrics line every N steps.", ge=1)
    divergence_steps: int = param(3, core_applied=True, group="logging", ge=0,
                                   help="Stop the run as failed when the loss or gradient norm is NaN/inf for this "
                                        "many consecutive logged steps (0: never).")
    wandb_project: str | None = param(group="logging", help="Weights & Biases project.")
    wandb_entity: str | None = param(group="logging", help="Weights & Biases entity.")
    wandb_run_name: str | None = param(group="logging", help="Weights & Biases run name.")
    tensorboard_log_dir: str | None = param(path=True, group="logging", help="TensorBoard log directory.")
    mlflow_tracking_uri: str | None = param(group="logging", help="MLflow tracking URI.")
    mlflow_experiment_name: str | None = param(group="logging", help="MLflow experiment.")
    mlflow_run_name: str | None = param(group="logging", help="MLflow run name.")

    @field_validator("*", mode="before")
    @classmethod
    def _text_and_paths(cls, value: Any, info: ValidationInfo) -> Any:
        """Every field, whatever its source: no string holds a NUL byte (no path, name or
        environment variable can: it would fail later in the lock, the data or the child's
        environment), and a path field's ``~`` is expanded (``thub_run.json`` records it so)."""
        if _has_nul(value):
            raise ValueError("contains a NUL byte (\\x00), which no path, name or environment variable can hold")
        field = cls.model_fields[info.field_name] if info.field_name else None
        if isinstance(value, bool) and field is not None and not _takes_bool(field.annotation):
            # pydantic's lax mode reads True as 1: max_steps=True would train one step
            raise ValueError(f"expected a number, found a boolean ({value})")
        extra = cls.model_fields[info.field_name].json_schema_extra if info.field_name else None
        return expand_path(value) if isinstance(extra, dict) and extra.get("path") else value

    @field_validator("checkpoint_storage")
    @classmethod
    def _storage_uri(cls, value: str | None) -> str | None:
        """A URI with its fsspec driver installed (:func:`thub.runner.mirror.check_storage_uri`)."""
        from thub.runner.mirror import check_storage_uri

        return None if value is None else check_storage_uri(value)

    @model_validator(mode="after")
    def _some_data(self) -> BaseParams:
        if not self.data_path and not self.datasets:
            raise ValueError("data_path or datasets is required")
        sources = len(self.datasets or ()) + bool(self.data_path)
        if self.mix_probabilities and self.datasets and len(self.mix_probabilities) != sources:
            raise ValueError("mix_probabilities needs one weight per dataset (data_path counts as the first)")
        for step in ("export", "eval", "push"):  # the post-run steps (thub.runner.poststeps)
            if getattr(self, step) and not self.save_final_checkpoint:
                raise ValueError(f"{step} needs the final model: save_final_checkpoint is false")
        for option, step in (("eval_base", "eval"), ("push_public", "push")):
            if getattr(self, option) and not getattr(self, step):
                raise ValueError(f"{option} changes nothing without {step}")
        if self.save_steps and self.checkpoint_at_epoch:
            # HF Trainer (trl, unsloth, LLaMA-Factory, axolotl) has one save_strategy: one of the two would
            # be dropped without a word there; refused on every backend so a config means one thing
            raise ValueError("save_steps and checkpoint_at_epoch cannot both be set: the trainers' single "
                             "save_strategy saves by steps or by epochs; set one (checkpoint_at_epoch: false "
                             "to save by steps)")
        return self


# (model, the trackers' parameter models) -> the model with their fields: one class per pair, so
# that every command of a process sees the same parameter model
_WITH_TRACKERS: dict[tuple[type[BaseModel], tuple[str, ...]], type[BaseModel]] = {}


def with_tracker_parameters(model: type[BaseModel]) -> type[BaseModel]:
    """``model`` plus the fields of the registered trackers' own parameter models
    (``TrackerSpec.parameters``) that it does not declare: a tracker from a plugin brings its
    parameters to every algorithm (CLI flags, YAML, ``THUB_*``) without a change to any of them.
    ``model`` itself when no tracker brings one (thub's own trackers' parameters are fields of
    :class:`BaseParams`)."""
    from thub.manager import get_registry
    from thub.specs import load_object

    named = tuple(t.parameters for t in get_registry().trackers.values() if t.parameters)
    if not named:
        return model
    key = (model, named)
    if key not in _WITH_TRACKERS:
        fields: dict[str, Any] = {}
        for import_string in named:
            for name, info in load_object(import_string).model_fields.items():
                if name not in model.model_fields and name not in fields:
                    fields[name] = (info.annotation, info)
        _WITH_TRACKERS[key] = create_model(model.__name__, __base__=model, __module__=model.__module__,
                                           **fields) if fields else model
    return _WITH_TRACKERS[key]
