"""What a training library left on disk: every checkpoint layout thub knows, detected from its files.

Training ends with many layouts (docs/checkpoints.md has the table): the HF Trainer's
``checkpoint-N`` (trl, unsloth, LLaMA-Factory, axolotl) holding a full model, a PEFT adapter,
DeepSpeed ZeRO ``global_stepN/`` shards or accelerate's FSDP state; instructlab-training's and
mini-trainer's ``hf_format/samples_N``; DeepSpeed's own ``global_stepN/`` with ``latest`` and
``zero_to_fp32.py``; torch DCP (``.metadata`` + ``*.distcp``); verl's ``global_step_N/actor``.
:func:`find` lists them under a run or any folder; :func:`detect` reads one folder.

Detection reads names and headers only, never tensors: a safetensors file's dtypes and sizes
come from its JSON header; a torch DCP checkpoint's from its ``.metadata`` (read with torch's own
``FileSystemReader``, imported only when such a folder is found). The file names are those the
libraries write (transformers ``trainer.py``, peft ``save_pretrained``, accelerate
``utils/fsdp_utils.py``, DeepSpeed ``runtime/engine.py``, verl ``fsdp_checkpoint_manager.py``).
"""

from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from thub.errors import UsageError
from thub.runner.checkpoints import INDEX_FILES, checkpoint_problem, saved_file_problem, shard_name_problem

#: layout id -> what it is (the ``layout`` field of every entry; docs/checkpoints.md lists them)
LAYOUTS: dict[str, str] = {
    "hf-model": "a Hugging Face model folder (config.json + safetensors or .bin weights)",
    "peft-adapter": "a PEFT adapter (adapter_config.json + adapter_model.safetensors); needs its base model",
    "deepspeed-zero": "DeepSpeed ZeRO shards (global_stepN/*_model_states.pt, zero_pp_rank_*_optim_states.pt)",
    "accelerate-fsdp": "accelerate's FSDP state (pytorch_model_fsdp_0/ torch DCP, or pytorch_model_fsdp*.bin)",
    "torch-dcp": "a torch.distributed.checkpoint folder (.metadata + *.distcp)",
    "verl-fsdp": "verl's FSDP actor shards (global_step_N/actor/model_world_size_W_rank_R.pt)",
}

ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
MODEL_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
#: the line PEFT's model card gets when the base was quantised in training (peft_model.create_or_update_model_card;
#: PEFT 0.21 no longer writes it: its hasattr check is on a dict, so thub's own run record is read first)
QLORA_MARK = "The following `bitsandbytes` quantization config was used during training"

_TRAINER_DIR = re.compile(r"checkpoint-(\d+)$")
_SAMPLES_DIR = re.compile(r"samples_(\d+)(?:_.*)?$")
_DS_TAG = re.compile(r"global_step(\d+)$")
_VERL_DIR = re.compile(r"global_step_(\d+)$")
_FULL_STATE_DIR = re.compile(r"step_(\d+)$")
_EPOCH_DIR = re.compile(r"epoch_(\d+)$")
_DS_MODEL = re.compile(r"(?:zero_pp_rank_(\d+)_)?mp_rank_(\d+)_model_states\.pt$")
_DS_OPTIM = re.compile(r"(?:bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_optim_states\.pt$")
_VERL_SHARD = re.compile(r"model_world_size_(\d+)_rank_(\d+)\.pt$")
_FSDP_BIN = re.compile(r"pytorch_model_fsdp(?:_(\d+))?(?:_rank(\d+))?\.bin$")
#: folders never searched for checkpoints (thub's own files, caches)
# eval/: thub eval's merged copies of adapters (RUN_DIR/eval/models/LABEL), not checkpoints of the run
_SKIP = {"logs", "thub_data", "slurm", "wandb", ".cache", "__pycache__", "mlruns", "eval"}


@dataclass
class Checkpoint:
    """One checkpoint as ``thub checkpoint ls`` reports it (``--json``: :meth:`to_dict`)."""

    path: str
    layout: str
    writer: str  # the container it was found as (``HF Trainer checkpoint-N``, ``hf_format/samples_N``, ...)
    step: int | None
    complete: bool
    problem: str | None  # why it is not complete (None when it is)
    size_bytes: int
    dtype: str | None  # the weights' dtype(s), from headers; None where only loading would tell
    loadable: bool  # loads as it is with AutoModelForCausalLM.from_pretrained
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The entry as JSON data."""
        return asdict(self)


def safetensors_header(path: Path) -> dict[str, Any]:
    """The JSON header of a safetensors file (tensor name -> dtype, shape, offsets), read without
    the tensors; raises ValueError for a file that is not one."""
    with path.open("rb") as handle:
        raw = handle.read(8)
        if len(raw) < 8:
            raise ValueError(f"{path.name} is cut short")
        (length,) = struct.unpack("<Q", raw)
        if length > 100 * 2**20:
            raise ValueError(f"{path.name} is not a safetensors file")
        header = json.loads(handle.read(length))
    if not isinstance(header, dict):
        raise ValueError(f"{path.name} has no tensor header")
    header.pop("__metadata__", None)
    return header


def _index(folder: Path, prefix: str) -> tuple[Path, list[str] | None] | None:
    """The index of ``folder``'s sharded ``prefix`` weights and the shards it names (None: unreadable),
    or None when there is no index."""
    for index_name in INDEX_FILES:
        index = folder / index_name.replace("model", prefix, 1)
        if index.is_file():
            try:
                return index, sorted(set(json.loads(index.read_text())["weight_map"].values()))
            except (OSError, ValueError, KeyError, AttributeError, TypeError):
                return index, None
    return None


def weight_files(folder: Path, prefix: str = "model") -> list[Path]:
    """The weight files of an HF folder (``prefix`` ``model`` or ``adapter_model``): every shard
    an index names, else the single file; [] when there is none. A shard named outside the folder
    (an absolute or ``..`` path) is left out: never opened (:func:`_weights_problem` reports it)."""
    index = _index(folder, prefix)
    if index is not None:
        return [folder / shard for shard in index[1] or [] if shard_name_problem(shard) is None]
    return [folder / name for name in _single_files(prefix) if (folder / name).is_file()][:1]


def _single_files(prefix: str) -> tuple[str, str]:
    """The unsharded weight file names, safetensors first: ``model.safetensors``/``pytorch_model.bin``
    (transformers' SAFE_WEIGHTS_NAME/WEIGHTS_NAME), ``adapter_model.safetensors``/``adapter_model.bin`` (PEFT's)."""
    return f"{prefix}.safetensors", "pytorch_model.bin" if prefix == "model" else f"{prefix}.bin"


def safetensors_dtypes(files: list[Path]) -> str | None:
    """The dtypes of the tensors in ``files`` from their headers (``BF16``; ``F32+BF16`` when
    mixed, most tensors first); None when no file is a readable safetensors file."""
    counts: dict[str, int] = {}
    for file in files:
        if file.suffix != ".safetensors":
            continue
        try:
            header = safetensors_header(file)
        except (OSError, ValueError, UnicodeDecodeError):
            continue
        for entry in header.values():
            if isinstance(entry, dict) and "dtype" in entry:
                counts[entry["dtype"]] = counts.get(entry["dtype"], 0) + 1
    return "+".join(sorted(counts, key=lambda d: -counts[d])) if counts else None


def folder_size(path: Path) -> int:
    """Bytes of every file under ``path`` (links not followed)."""
    total = 0
    for folder, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                pass
    return total


def _weights_problem(folder: Path, prefix: str) -> str | None:
    """Why ``folder``'s ``prefix`` weights are missing or incomplete (a shard the index names is
    absent or cut short), or None."""
    found = _index(folder, prefix)
    if found is not None:
        index, shards = found
        if shards is None:
            return f"{index.name} is unreadable"
        for shard in shards:
            if outside := shard_name_problem(shard):
                return f"{index.name} names {shard!r}: {outside}"
            problem = saved_file_problem(folder / shard, scan=True)  # transformers loads them weights-only
            if problem:
                return f"weight shard {shard} named in {index.name} is missing" if problem.startswith("no ") \
                    else problem
        return None
    files = weight_files(folder, prefix)
    if not files:
        return f"no {' or '.join(_single_files(prefix))} or index"
    return saved_file_problem(files[0], scan=True)


def run_parameters(checkpoint: Path) -> dict[str, Any] | None:
    """The parameter values of the thub run a checkpoint belongs to (``thub_run.json`` in it or up to
    three folders above: ``final/``, ``checkpoints/checkpoint-N/``), or None outside a thub run."""
    for folder in (checkpoint, *list(checkpoint.parents)[:3]):
        try:
            parameters = json.loads((folder / "thub_run.json").read_text()).get("parameters") or {}
        except (OSError, ValueError, AttributeError):
            continue
        return {name: entry.get("value") for name, entry in parameters.items() if isinstance(entry, dict)}
    return None


def _quantised_in_training(adapter: Path) -> bool:
    """Whether the adapter was trained on a 4/8-bit base (QLoRA): the thub run it belongs to says so
    (``load_in_4bit``/``load_in_8bit``), or PEFT's model card does (the versions of PEFT that record
    the base's quantisation there)."""
    parameters = run_parameters(adapter)
    if parameters is not None:
        return parameters.get("load_in_4bit") is True or parameters.get("load_in_8bit") is True
    try:
        return QLORA_MARK in (adapter / "README.md").read_text(errors="replace")
    except OSError:
        return False


def _adapter(folder: Path, writer: str, step: int | None) -> Checkpoint:
    details: dict[str, Any] = {}
    problem = None
    try:
        config = json.loads((folder / "adapter_config.json").read_text())
        details.update(base_model=config.get("base_model_name_or_path"), peft_type=config.get("peft_type"),
                       r=config.get("r"), use_dora=bool(config.get("use_dora")),
                       use_rslora=bool(config.get("use_rslora")))
    except (OSError, ValueError, AttributeError):
        problem = "adapter_config.json is unreadable"
    details["qlora"] = _quantised_in_training(folder)
    problem = problem or _weights_problem(folder, "adapter_model")
    return Checkpoint(str(folder), "peft-adapter", writer, step, problem is None, problem, folder_size(folder),
                      safetensors_dtypes(weight_files(folder, "adapter_model")), False, details)


def _hf_model(folder: Path, writer: str, step: int | None) -> Checkpoint:
    problem = None if (folder / "config.json").is_file() else "no config.json"
    problem = problem or _weights_problem(folder, "model")
    return Checkpoint(str(folder), "hf-model", writer, step, problem is None, problem, folder_size(folder),
                      safetensors_dtypes(weight_files(folder)), problem is None, {})


def _ranks_problem(ranks: set[int], what: str) -> str | None:
    missing = sorted(set(range(max(ranks) + 1)) - ranks) if ranks else []
    return f"{what} of rank {', '.join(map(str, missing))} missing" if missing else None


def _deepspeed(root: Path, writer: str, step: int | None) -> Checkpoint:
    """``root`` holds ``latest`` and ``global_stepN/`` (DeepSpeed's save_checkpoint), or is a tag folder."""
    details: dict[str, Any] = {"zero_to_fp32": (root / "zero_to_fp32.py").is_file()}
    tag_dir = root
    problem = None
    if not any(_DS_MODEL.match(p.name) for p in root.iterdir()):
        latest = root / "latest"
        try:
            tag = latest.read_text().strip()
        except OSError:
            tags = sorted((p for p in root.iterdir() if _DS_TAG.match(p.name)), key=lambda p: int(p.name[11:]))
            tag = tags[-1].name if tags else ""
            problem = "no `latest` file naming the tag DeepSpeed resumes from"
        details["tag"] = tag
        tag_dir = root / tag
        if not tag_dir.is_dir():
            problem = f"`latest` names {tag!r}, which is not a folder here"
    names = [p.name for p in tag_dir.iterdir()] if tag_dir.is_dir() else []
    model = [m for n in names if (m := _DS_MODEL.match(n))]
    optim = {int(m.group(1)) for n in names if (m := _DS_OPTIM.match(n))}
    stage3 = any(m.group(1) is not None for m in model)
    details.update(stage="3" if stage3 else "1 or 2", world_size=max(optim) + 1 if optim else None)
    if step is None and (m := _DS_TAG.match(tag_dir.name)):
        step = int(m.group(1))
    if problem is None:
        if not model:
            problem = f"no *_model_states.pt in {tag_dir.name}"
        elif stage3:
            problem = _ranks_problem({int(m.group(1)) for m in model}, "model states") or (
                None if {int(m.group(1)) for m in model} == optim or not optim
                else f"model states of ranks {sorted({int(m.group(1)) for m in model})} but optimizer states of "
                     f"ranks {sorted(optim)}")
        problem = problem or _ranks_problem(optim, "optimizer states")
        for name in sorted(names):
            if problem is None and name.endswith(".pt"):
                problem = saved_file_problem(tag_dir / name)
    return Checkpoint(str(root), "deepspeed-zero", writer, step, problem is None, problem, folder_size(root), None,
                      False, details)


def _dcp(folder: Path, layout: str, writer: str, step: int | None) -> Checkpoint:
    """A torch DCP folder: complete when ``.metadata`` reads and every file it names is there and long enough.
    ``.metadata`` is a pickle, read so that nothing in it runs (:mod:`thub.checkpoint.pickles`)."""
    problem, dtype = None, None
    details: dict[str, Any] = {}
    try:
        from torch.distributed.checkpoint.metadata import TensorStorageMetadata

        from thub.checkpoint.pickles import RefusedPickle, load_dcp_metadata, refused_message

        metadata = load_dcp_metadata(folder / ".metadata")
        ends: dict[str, int] = {}
        for info in (metadata.storage_data or {}).values():
            ends[info.relative_path] = max(ends.get(info.relative_path, 0), info.offset + info.length)
        for name, end in sorted(ends.items()):
            try:
                size = (folder / name).stat().st_size
            except OSError:
                problem = f"{name} named in .metadata is missing"
                break
            if size < end:
                problem = f"{name} is cut short ({size} of {end} bytes)"
                break
        dtypes = {str(item.properties.dtype).removeprefix("torch.")
                  for item in metadata.state_dict_metadata.values() if isinstance(item, TensorStorageMetadata)}
        dtype = "+".join(sorted(dtypes)) or None
        details.update(files=len(ends), entries=len(metadata.state_dict_metadata))
    except ImportError:
        problem = "torch is not installed here: cannot read .metadata"
    except RefusedPickle as refused:
        problem = f".metadata {refused_message(refused.global_name)}"
    except Exception as exc:  # noqa: BLE001 - any unreadable metadata is a reason, not a crash
        reason = (str(exc).removeprefix(f"{folder / '.metadata'}: ") if isinstance(exc, UsageError)
                  else f"{type(exc).__name__}: {exc}")
        problem = f".metadata is unreadable ({reason})"
    return Checkpoint(str(folder), layout, writer, step, problem is None, problem, folder_size(folder), dtype, False,
                      details)


def _accelerate_fsdp(folder: Path, writer: str, step: int | None) -> Checkpoint | None:
    dcp = folder / "pytorch_model_fsdp_0"
    if (dcp / ".metadata").is_file() or dcp.is_dir():
        found = _dcp(dcp, "accelerate-fsdp", writer, step)
        found.path, found.size_bytes = str(folder), folder_size(folder)
        found.details["state_dict_type"] = "SHARDED_STATE_DICT"
        return found
    bins = [(p, m) for p in sorted(folder.iterdir()) if (m := _FSDP_BIN.match(p.name))]
    if not bins:
        return None
    local = any(m.group(2) is not None for _p, m in bins)
    problem = _ranks_problem({int(m.group(2)) for _p, m in bins if m.group(2) is not None}, "model state") \
        if local else None
    for path, _m in bins:
        problem = problem or saved_file_problem(path)
    return Checkpoint(str(folder), "accelerate-fsdp", writer, step, problem is None, problem, folder_size(folder),
                      None, False, {"state_dict_type": "LOCAL_STATE_DICT" if local else "FULL_STATE_DICT"})


def _verl(actor: Path, writer: str, step: int | None) -> Checkpoint:
    shards = {int(m.group(2)): int(m.group(1)) for p in actor.iterdir() if (m := _VERL_SHARD.match(p.name))}
    world = max(shards.values()) if shards else None
    problem = None
    if not shards:
        problem = "no model_world_size_*_rank_*.pt"
    else:
        missing = sorted(set(range(world or 0)) - set(shards))
        if missing:
            problem = f"model_world_size_{world}_rank_{missing[0]}.pt is missing"
        for rank in sorted(shards):
            problem = problem or saved_file_problem(actor / f"model_world_size_{world}_rank_{rank}.pt")
    details = {"world_size": world, "huggingface": (actor / "huggingface" / "config.json").is_file(),
               "lora_adapter": (actor / "lora_adapter").is_dir()}
    return Checkpoint(str(actor), "verl-fsdp", writer, step, problem is None, problem, folder_size(actor), None, False,
                      details)


def _latest_is_a_tag(root: Path) -> bool:
    """``latest`` names a folder of DeepSpeed model states (any tag: accelerate's save_state uses ``pytorch_model``)."""
    try:
        tag = (root / "latest").read_text().strip()
        return bool(tag) and any(_DS_MODEL.match(p.name) for p in (root / tag).iterdir())
    except (OSError, ValueError):
        return False


def _mini_trainer_full_state(path: Path, step: int) -> Checkpoint:
    """mini-trainer's ``full_state_checkpoints/step_N``: the model as torch DCP in ``distributed/``, per-rank
    optimizer and RNG states, and ``training_state.pt``, without which mini-trainer does not resume from it."""
    found = _dcp(path / "distributed", "torch-dcp", "mini-trainer full_state_checkpoints/step_N", step)
    found.path, found.size_bytes = str(path), folder_size(path)
    if found.complete:
        state = path / "training_state.pt"
        found.problem = saved_file_problem(state) if state.exists() else \
            "no training_state.pt (mini-trainer resumes only from a step with one)"
        found.complete = found.problem is None
    return found


def detect(folder: str | Path) -> Checkpoint | None:
    """The checkpoint ``folder`` is, or None when it is none of the known layouts."""
    path = Path(folder)
    if not path.is_dir():
        return None
    try:
        names = {p.name for p in path.iterdir()}
    except OSError:
        return None
    trainer = _TRAINER_DIR.match(path.name)
    samples = _SAMPLES_DIR.match(path.name) if path.parent.name == "hf_format" else None
    verl = _VERL_DIR.match(path.parent.name) if path.name == "actor" else None
    step = int(trainer.group(1)) if trainer else int(verl.group(1)) if verl else None
    writer = ("HF Trainer checkpoint-N" if trainer else "instructlab/mini-trainer hf_format/samples_N" if samples
              else "verl global_step_N/actor" if verl else "folder")
    found: Checkpoint | None = None
    full_state = _FULL_STATE_DIR.match(path.name) if path.parent.name == "full_state_checkpoints" else None
    if full_state and "distributed" in names:
        return _mini_trainer_full_state(path, int(full_state.group(1)))
    if verl and any(_VERL_SHARD.match(n) for n in names):
        found = _verl(path, writer, step)
    elif "adapter_config.json" in names:
        found = _adapter(path, writer, step)
    elif "config.json" in names and (names & {*MODEL_WEIGHTS, *INDEX_FILES}):
        found = _hf_model(path, writer, step)
    elif "latest" in names and (any(_DS_TAG.match(n) for n in names) or _latest_is_a_tag(path)) \
            or any(_DS_MODEL.match(n) for n in names):
        found = _deepspeed(path, writer, step)
    elif "pytorch_model_fsdp_0" in names or any(_FSDP_BIN.match(n) for n in names):
        found = _accelerate_fsdp(path, writer, step)
    elif ".metadata" in names:  # its .distcp files may be gone: the metadata names them
        found = _dcp(path, "torch-dcp", writer, step)
    elif trainer and "trainer_state.json" in names:
        problem = checkpoint_problem(path) or "no weights of a known layout"
        found = Checkpoint(str(path), "hf-model", writer, step, False, problem, folder_size(path), None, False, {})
    if found is None:
        return None
    if samples:
        found.details["samples"] = int(samples.group(1))
    if path.parent.name == "full_state" and (epoch := _EPOCH_DIR.match(path.name)):
        found.writer = "instructlab full_state/epoch_E (accelerate save_state)"
        found.details["epoch"] = int(epoch.group(1))
    if trainer:
        # an HF Trainer checkpoint resumes only with its trainer state (thub's resume check)
        found.details["trainer_state"] = "trainer_state.json" in names
        if found.complete and found.layout in ("hf-model", "peft-adapter"):
            found.problem = checkpoint_problem(path)  # also the training states a resume loads
        elif found.complete and "trainer_state.json" not in names:
            found.problem = "no trainer_state.json"
        found.complete = found.problem is None
    if found.layout == "hf-model" and found.complete:
        found.details["missing_for_serving"] = [n for n in ("tokenizer_config.json", "generation_config.json")
                                                if n not in names]
    return found


def _walk(root: Path, depth: int) -> Iterator[Checkpoint]:
    found = detect(root)
    if found is not None:
        yield found
    if depth <= 0:
        return
    try:
        children = sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink() and p.name not in _SKIP)
    except OSError:
        return
    for child in children:
        # inside a checkpoint only the checkpoints saved next to a final model are searched
        # (LLaMA-Factory and axolotl save it into output_dir itself, beside checkpoint-N); its own
        # parts (a ZeRO tag folder, pytorch_model_fsdp_0/, actor/huggingface/) belong to it
        if found is None or _TRAINER_DIR.match(child.name):
            yield from _walk(child, depth - 1)


def find(root: str | Path, depth: int = 4) -> list[Checkpoint]:
    """Every checkpoint under ``root`` (``root`` itself when it is one), by path; of a checkpoint's
    subfolders only ``checkpoint-N`` ones are searched (a ZeRO tag folder is part of its checkpoint)."""
    return sorted(_walk(Path(root), depth), key=lambda c: (str(Path(c.path).parent), c.step or 0, c.path))


def final_model(path: str | None) -> dict[str, Any] | None:
    """``result.json``'s ``final_model``: the run's final model with its layout, whether it is
    complete and loads as it is (``AutoModelForCausalLM.from_pretrained``), and, where it does not,
    the ``thub checkpoint`` command that makes it so (``next``). None without a final model."""
    if not path:
        return None
    found = detect(path)
    if found is None:
        return {"path": str(path), "layout": None, "loadable": False, "complete": False,
                "problem": "not a checkpoint of a known layout", "dtype": None}
    entry: dict[str, Any] = {"path": found.path, "layout": found.layout, "loadable": found.loadable,
                             "complete": found.complete, "problem": found.problem, "dtype": found.dtype}
    if found.complete and found.layout == "peft-adapter":
        entry["next"] = f"thub checkpoint merge {found.path} --out DIR"
    elif found.complete and (found.layout in ("deepspeed-zero", "torch-dcp") or (
            found.layout == "accelerate-fsdp" and found.details.get("state_dict_type") == "SHARDED_STATE_DICT")):
        entry["next"] = f"thub checkpoint consolidate {found.path} --out DIR"
    elif found.complete and found.layout == "verl-fsdp":  # verl's own converter (consolidate does not read it)
        entry["next"] = f"python -m verl.model_merger merge --backend fsdp --local_dir {found.path} --target_dir DIR"
    return entry
