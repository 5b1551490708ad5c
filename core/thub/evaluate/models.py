"""Which models ``thub eval MODEL_OR_RUN`` scores, and how each is served.

A run directory (``thub_run.json``) gives its final model (``result.json`` ``final_checkpoint``),
its checkpoints (every complete one :mod:`thub.checkpoint.layouts` detects, by step), its best
checkpoint (``result.json`` ``best_checkpoint``) and its base (the run's ``model_path``); a plain
Hugging Face model folder is scored as it is. Each model is served as the run trained it: with its
chat template when the run trained on a chat-template data kind and the model has one, the run's
``max_seq_len`` and the folder's ``generation_config.json``. A LoRA adapter is merged first (thub's
own merge, cached under ``RUN_DIR/eval/models/<label>/``); a sharded checkpoint is refused with the
command that consolidates it; a checkpoint whose chat template renders unlike the training input's
is refused unless ``allow_template_change``. Reads files only: nothing here imports torch.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from thub.errors import UsageError

CHECKPOINT_CHOICES = ("final", "all", "best")
#: where merged adapters are cached, under the run's eval folder
MODELS_DIR = "models"
_SHARDED = ("deepspeed-zero", "torch-dcp", "accelerate-fsdp", "verl-fsdp")


@dataclass
class EvalModel:
    """One model to score, resolved but not loaded.

    Attributes:
        label: ``final``, ``base``, ``checkpoint-<step>`` (``model`` for a plain folder).
        source: the folder found (a checkpoint, the base, the model folder given).
        model_path: the folder (or hub id, for a base named so) the evaluator loads: ``source``,
            or where its adapter is merged to.
        step: the optimizer step it was saved at (0 for the base; None when unknown).
        layout: :data:`thub.checkpoint.layouts.LAYOUTS` id (None for a hub id).
        merge: the adapter in ``source`` is merged into ``model_path`` before scoring.
        apply_chat_template, max_seq_len, generation_config: how it is served (EvalRequest).
        template: the chat-template check against the training input (``ok``, ``changed``,
            ``not checked``) and, when changed, ``problem``: the first difference.
        best: it is the run's best checkpoint (``--checkpoints best``).
    """

    label: str
    source: str
    model_path: str
    step: int | None = None
    layout: str | None = None
    merge: bool = False
    apply_chat_template: bool = False
    max_seq_len: int | None = None
    generation_config: str | None = None
    template: dict[str, Any] = field(default_factory=dict)
    best: bool = False

    def as_dict(self) -> dict[str, Any]:
        """JSON data (``--dry-run --json``)."""
        return asdict(self)


@dataclass
class RunInfo:
    """What ``thub eval`` reads of a run directory."""

    path: Path
    record: dict[str, Any]
    result: dict[str, Any] | None
    base_model: str | None
    max_seq_len: int | None
    chat: bool  # trained on a data kind rendered with the chat template
    data_kind: str | None


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: unreadable ({exc})") from None
    except RecursionError:  # a file from anywhere: deeper than Python's JSON reader goes
        raise UsageError(f"{path}: unreadable (nested too deeply: more levels of arrays and objects than can be "
                         "read)") from None
    if not isinstance(value, dict):
        raise UsageError(f"{path}: not a JSON object")
    return value


def _parameter(record: dict[str, Any], name: str) -> Any:
    entry = (record.get("parameters") or {}).get(name)
    return entry.get("value") if isinstance(entry, dict) else None


def is_run(path: str | Path) -> bool:
    """Whether ``path`` is a thub run directory (holds ``thub_run.json``)."""
    return (Path(path) / "thub_run.json").is_file()


def _data_kind(run: Path, record: dict[str, Any], registry: Any) -> tuple[str | None, bool]:
    """The data kind the run trained on (kept with its validated rows, ``thub_data/``) and whether
    that kind is rendered with the chat template. Without kept rows: the algorithm's kinds decide
    (all chat-template kinds, and no ``is_pretraining``)."""
    from thub.data.training import DATA_DIR

    meta = None
    try:
        meta = json.loads((run / DATA_DIR / "rows.thub.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        pass
    kinds = registry.data_kinds
    if isinstance(meta, dict) and isinstance(meta.get("kind"), str):
        kind = meta["kind"]
        return kind, bool(kind in kinds and kinds[kind].chat_template)
    if _parameter(record, "is_pretraining"):
        return None, False
    algorithm = registry.algorithms.get(str(record.get("algorithm")))
    accepted = list(getattr(algorithm, "data_kinds", ()) or ())
    return None, bool(accepted) and all(k in kinds and kinds[k].chat_template for k in accepted)


def read_run(path: str | Path, registry: Any) -> RunInfo:
    """The run directory's record, result and training settings. Raises UsageError for a folder
    that is not one, or whose files are unreadable."""
    from thub.runner.runpaths import rebase_result

    run = Path(path)
    record = _read_json(run / "thub_run.json")
    if record is None:
        raise UsageError(f"{run}: not a thub run directory (no thub_run.json)")
    result = _read_json(run / "result.json")
    if result is not None:  # a moved or copied run scores its own models (thub.runner.runpaths)
        working_dir = record.get("working_dir")
        result = rebase_result(run, result, working_dir if isinstance(working_dir, str) else None)
    kind, chat = _data_kind(run, record, registry)
    base = _parameter(record, "model_path")
    if isinstance(base, str) and not Path(base).is_absolute() and isinstance(record.get("working_dir"), str):
        # a path typed relative to where training ran means that folder, wherever thub eval runs
        launched = Path(record["working_dir"]) / base
        base = str(launched) if launched.exists() else base
    seq = _parameter(record, "max_seq_len")
    return RunInfo(run, record, result, str(base) if base else None,
                   seq if isinstance(seq, int) and not isinstance(seq, bool) else None, chat, kind)


def _has_template(folder: Path) -> bool:
    from thub.data.saved_template import read_chat_template

    try:
        return read_chat_template(folder) is not None
    except (OSError, ValueError):
        return False


def _serving(model: EvalModel, chat: bool | None, max_seq_len: int | None, base: str | None = None) -> EvalModel:
    """Fill how ``model`` is served: the chat template when the data was chat (None: a plain
    folder, served with its template when it has one) and the model (or its adapter's base)
    has one; ``max_seq_len``; the folder's generation config."""
    from thub.data.saved_template import has_tokenizer_files

    folder = Path(model.source)
    has = _has_template(folder) if folder.is_dir() else False
    if model.merge and not has_tokenizer_files(folder) and base:  # merged with its base's tokenizer files
        has = Path(base).expanduser().is_dir() and _has_template(Path(base).expanduser())
    model.apply_chat_template = bool(has and (chat is None or chat))
    model.max_seq_len = max_seq_len
    generation = folder / "generation_config.json"
    model.generation_config = str(generation) if generation.is_file() else None
    return model


def _check_template(model: EvalModel, reference: str | None, allow: bool) -> None:
    """Compare ``model``'s saved chat template with the training input's (thub.data.template_check);
    a difference is refused (exit 2) unless ``allow``."""
    from thub.data.template_check import check_checkpoints

    if not reference:
        model.template = {"status": "not checked", "why": "the run names no model_path"}
        return
    report = check_checkpoints(reference, [model.source])
    if report["mismatches"]:
        problem = report["mismatches"][0]["problem"]
        model.template = {"status": "changed", "problem": problem, "reference": reference}
        if not allow:
            raise UsageError(
                f"{model.label} ({model.source}): its chat template differs from the training input's "
                f"({reference}): {problem} (expected: the training input's; found: the checkpoint's). It would "
                "be scored with a template it was not trained with: restore the input model's tokenizer files, "
                "or pass --allow-template-change to evaluate it anyway")
    elif report["checked"]:
        model.template = {"status": "ok", "reference": reference}
    else:
        why = report["reference"] if report["reference"] != reference else "no tokenizer files saved with it"
        model.template = {"status": "not checked", "why": why}


def _from_checkpoint(label: str, path: str, step: int | None, run: Path, base: str | None) -> EvalModel:
    """An :class:`EvalModel` for a checkpoint folder by its layout: as it is (a full HF model),
    merged first (an adapter, into ``RUN_DIR/eval/models/<label>``), else refused."""
    from thub.checkpoint.layouts import detect, final_model

    found = detect(path)
    if found is None:
        raise UsageError(f"{label}: {path} is not a checkpoint of a known layout (`thub checkpoint ls {run}`)")
    if not found.complete:
        raise UsageError(f"{label}: {path} is incomplete ({found.problem})")
    if found.layout == "hf-model":
        return EvalModel(label, found.path, found.path, step, found.layout)
    if found.layout == "peft-adapter":
        target = run / "eval" / MODELS_DIR / label
        return EvalModel(label, found.path, str(target), step, found.layout, merge=True)
    command = (final_model(found.path) or {}).get("next") or f"thub checkpoint consolidate {found.path} --out DIR"
    raise UsageError(f"{label}: {found.path} is a sharded checkpoint ({found.layout}): consolidate it into an HF "
                     f"model first with `{command}`, then run `thub eval DIR`")


def _final(info: RunInfo) -> EvalModel:
    result = info.result
    if result is None:
        raise UsageError(f"{info.path}: no result.json: the run has not finished (`thub runs status {info.path}`)")
    final = result.get("final_checkpoint") or (result.get("final_model") or {}).get("path")
    if not final:
        raise UsageError(f"{info.path}: the run saved no final model (status {result.get('status')}); "
                         "evaluate its checkpoints with --checkpoints all")
    step = result.get("reached_step")
    return _from_checkpoint("final", str(final), step if isinstance(step, int) else None, info.path,
                            info.base_model)


def _checkpoints(info: RunInfo) -> list[EvalModel]:
    """Every complete step checkpoint of the run, by step (the eval folder's merged models are not
    the run's checkpoints)."""
    from thub.checkpoint.layouts import find

    eval_dir = info.path / "eval"
    found = [c for c in find(info.path) if c.complete and c.step is not None
             and eval_dir not in Path(c.path).parents]
    by_step = {c.step: c for c in sorted(found, key=lambda c: (c.step or 0, c.path))}
    return [_from_checkpoint(f"checkpoint-{step}", c.path, step, info.path, info.base_model)
            for step, c in sorted(by_step.items())]


def _best(info: RunInfo) -> EvalModel:
    best = (info.result or {}).get("best_checkpoint")
    if not isinstance(best, dict) or not best.get("path"):
        raise UsageError(f"{info.path}: result.json names no best_checkpoint: the run was trained without "
                         "validation; turn it on (validation_split or validation_data_path) to have one, or use "
                         "--checkpoints final|all")
    step = best.get("step")
    label = f"checkpoint-{step}" if isinstance(step, int) else "best"
    model = _from_checkpoint(label, str(best["path"]), step if isinstance(step, int) else None, info.path,
                             info.base_model)
    model.best = True
    return model


def resolve_models(target: str | Path, registry: Any, *, checkpoints: str = "final", base: bool = False,
                   allow_template_change: bool = False) -> tuple[RunInfo | None, list[EvalModel]]:
    """The run (None for a plain model folder) and the models to score, base first, then by step,
    the final model last. Raises UsageError (exit 2) for anything that cannot be scored."""
    if checkpoints not in CHECKPOINT_CHOICES:
        raise UsageError(f"--checkpoints {checkpoints!r}: expected one of {', '.join(CHECKPOINT_CHOICES)}")
    path = Path(target).expanduser()
    if not path.exists():
        from thub.errors import did_you_mean_path

        raise UsageError(f"{target}: no such run directory or model folder{did_you_mean_path(str(target))}")
    if not is_run(path):
        return None, [_plain(path, checkpoints, base)]
    info = read_run(path, registry)
    models: list[EvalModel] = []
    if checkpoints == "all":
        models += _checkpoints(info)
        try:
            models.append(_final(info))
        except UsageError:
            if not models:
                raise
    elif checkpoints == "best":
        models.append(_best(info))
    else:
        models.append(_final(info))
    for model in models:
        _check_template(model, info.base_model, allow_template_change)
        _serving(model, info.chat, info.max_seq_len, info.base_model)
    if base:
        if not info.base_model:
            raise UsageError(f"{path}: thub_run.json names no model_path: nothing to compare with (--base)")
        local = Path(info.base_model).expanduser()
        origin = EvalModel("base", info.base_model, str(local) if local.is_dir() else info.base_model, 0,
                           "hf-model" if local.is_dir() else None, template={"status": "reference"})
        if local.is_dir():
            origin = _serving(origin, info.chat, info.max_seq_len)
        else:  # a hub id: the harness loads it (its template, if any, is unknown here)
            origin.apply_chat_template, origin.max_seq_len = info.chat, info.max_seq_len
        models.insert(0, origin)
    return info, models


def _plain(path: Path, checkpoints: str, base: bool) -> EvalModel:
    """A plain HF model folder, scored as it is (served with its chat template when it has one)."""
    from thub.checkpoint.layouts import detect

    if base:
        raise UsageError(f"{path}: --base needs a run directory (its thub_run.json names the base model)")
    if checkpoints != "final":
        raise UsageError(f"{path}: --checkpoints {checkpoints} needs a run directory; a model folder is scored "
                         "as it is")
    found = detect(path)
    if found is None or found.layout != "hf-model" or not found.complete:
        what = "not a model folder" if found is None else f"a {found.layout} checkpoint" + (
            f" ({found.problem})" if found.problem else "")
        hint = ""
        if found is not None and found.layout == "peft-adapter":
            hint = f": merge it first with `thub checkpoint merge {path} --out DIR`"
        elif found is not None and found.layout in _SHARDED:
            hint = f": consolidate it first with `thub checkpoint consolidate {path} --out DIR`"
        raise UsageError(f"{path}: {what}{hint}; thub eval takes a run directory or an HF model folder")
    return _serving(EvalModel("model", found.path, found.path, None, found.layout,
                              template={"status": "not checked", "why": "no run: no training input to compare"}),
                    None, None)
