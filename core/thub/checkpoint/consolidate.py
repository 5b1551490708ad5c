"""``thub checkpoint consolidate``: a sharded checkpoint into one Hugging Face safetensors folder.

Streaming: the tensors' names, shapes and dtypes are read from the checkpoint's own metadata
first, so every output shard's safetensors header is known before a byte of weights is read;
the weights are then read a few tensors at a time (a group no larger than the largest tensor)
and written straight into the open shard. Peak memory stays near the largest tensor, where
torch's ``dcp_to_torch_save`` and DeepSpeed's ``zero_to_fp32`` hold the whole model (in fp32).

Sources (the readers: :mod:`thub.checkpoint.sharded`, :mod:`thub.checkpoint.zero`): torch DCP folders (``.metadata`` +
``__R_S.distcp``, what FSDP2 + ``torch.distributed.checkpoint`` writes, and accelerate's
``pytorch_model_fsdp_N/`` SHARDED_STATE_DICT) and DeepSpeed ZeRO-1/2/3 ``global_stepN/``.

The output is written into a temporary folder next to ``--out`` and renamed onto it when every
file is complete: a failure leaves nothing half-written.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from thub.errors import UsageError

if TYPE_CHECKING:
    import torch

    from thub.checkpoint.sharded import ShardedSource, TensorEntry

DEFAULT_MAX_SHARD_SIZE = "5GB"  # transformers 4's save_pretrained default; the Hub's tools favour it

# What a serving engine (vLLM, SGLang, TGI) reads besides the weights: the model's config, its
# tokenizer in every format transformers writes, the chat template, the generation defaults and
# a multimodal model's processor files (LLaMA-Factory leaves preprocessor_config.json out).
SERVING_FILES = (
    "config.json", "generation_config.json",
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
    "tokenizer.model", "vocab.json", "merges.txt", "vocab.txt", "spiece.model",
    "chat_template.jinja", "chat_template.json",
    "preprocessor_config.json", "processor_config.json", "video_preprocessor_config.json",
)

# safetensors' dtype names (its format spec); anything else cannot be written.
_SAFETENSORS_DTYPES = {
    "float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16",
    "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2",
    "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL",
}
DTYPE_CHOICES = ("auto", "bfloat16", "float16", "float32")


@dataclass
class OutTensor:
    """One tensor of the output: its Hugging Face name, where it comes from, and how it is written."""

    name: str
    entry: TensorEntry
    dtype: str  # the dtype written (a torch dtype name)
    nbytes: int


@dataclass
class Shard:
    """One output safetensors file and the tensors in it, in order."""

    file: str
    tensors: list[OutTensor] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        """Bytes of tensor data in the file (its header aside)."""
        return sum(t.nbytes for t in self.tensors)


@dataclass
class Plan:
    """Everything consolidate will write, decided before anything is read or written."""

    source: Path
    layout: str
    out: Path
    dtype: str
    base: Path | None
    shards: list[Shard]
    copied: list[tuple[str, Path]]  # (file name, where it is copied from)
    skipped: list[str]  # checkpoint entries that are not model weights (optimizer state, ...)
    reader: ShardedSource

    @property
    def tensors(self) -> list[OutTensor]:
        """Every output tensor in file order."""
        return [t for shard in self.shards for t in shard.tensors]

    def summary(self, dry_run: bool) -> dict[str, Any]:
        """The JSON shape of ``thub checkpoint consolidate --json``."""
        tensors = self.tensors
        return {
            "source": str(self.source), "layout": self.layout, "out": str(self.out), "dtype": self.dtype,
            "base": str(self.base) if self.base else None, "dry_run": dry_run,
            "tensors": len(tensors), "parameters": sum(_numel(t.entry.shape) for t in tensors),
            "total_size": sum(t.nbytes for t in tensors),
            "largest_tensor": max((t.nbytes for t in tensors), default=0),
            "shards": [{"file": s.file, "tensors": len(s.tensors), "bytes": s.nbytes} for s in self.shards],
            "index": "model.safetensors.index.json" if len(self.shards) > 1 else None,
            "copied": [{"file": name, "from": str(origin)} for name, origin in self.copied],
            "skipped": len(self.skipped),
        }


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for dim in shape:
        n *= dim
    return n


def parse_size(value: str) -> int:
    """``--max-shard-size`` in bytes: an integer or transformers' units (``5GB``, ``500MB``, ``2GiB``)."""
    text = value.strip()
    if text.isdigit():
        return int(text)
    units = {"GIB": 2**30, "MIB": 2**20, "KIB": 2**10, "GB": 10**9, "MB": 10**6, "KB": 10**3}
    for unit, factor in units.items():  # the longer units first, as transformers reads them
        if text.upper().endswith(unit) and text[: -len(unit)].strip().isdigit():
            return int(text[: -len(unit)]) * factor
    raise UsageError(f"--max-shard-size {value!r}: expected bytes or a size such as 5GB, 500MB, 2GiB")


def find_base(source: Path, base: str | None) -> Path | None:
    """The base model folder: ``--base``, else the ``model_path`` of the run the checkpoint is in
    (the nearest ``thub_run.json`` above it), else None."""
    if base is not None:
        path = Path(os.path.expanduser(base))
        if not (path / "config.json").is_file():
            raise UsageError(f"--base {base}: no config.json there (a local Hugging Face model folder is expected)")
        return path
    for parent in [source, *source.parents][:5]:
        record = parent / "thub_run.json"
        if record.is_file():
            try:
                value = json.loads(record.read_text())["parameters"]["model_path"]["value"]
            except (OSError, ValueError, KeyError, TypeError):
                return None
            path = Path(os.path.expanduser(str(value)))
            return path if (path / "config.json").is_file() else None
    return None


def _config_sources(source: Path) -> list[Path]:
    """Folders whose serving files belong to this checkpoint, nearest first: the checkpoint itself
    and, for accelerate's ``checkpoint-N/pytorch_model_fsdp_0`` and DeepSpeed's
    ``checkpoint-N/global_stepN``, the ``checkpoint-N`` folder around it."""
    return [source, source.parent]


def serving_files(source: Path, base: Path | None) -> list[tuple[str, Path]]:
    """Each serving file and where it comes from: the checkpoint's own copy, else the base's."""
    found = []
    for name in SERVING_FILES:
        for folder in [*_config_sources(source), *([base] if base else [])]:
            if (folder / name).is_file():
                found.append((name, folder / name))
                break
    return found


def _config(copied: list[tuple[str, Path]]) -> dict[str, Any]:
    origin = dict(copied).get("config.json")
    if origin is None:
        raise UsageError("no config.json for the consolidated model: neither the checkpoint nor a base model "
                         "has one (pass --base MODEL, the model the run trained from)")
    try:
        config = json.loads(origin.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"{origin}: not a readable JSON config ({exc})") from None
    if not isinstance(config, dict):
        raise UsageError(f"{origin}: expected a JSON object")
    return config


def _target_dtype(requested: str, config: dict[str, Any], entries: list[TensorEntry]) -> str:
    """``--dtype auto``: the model's own dtype (its config's ``dtype``/``torch_dtype``, what it trained
    from and is served in), else the dtype the checkpoint stores its floating tensors in."""
    if requested != "auto":
        return requested
    declared = config.get("dtype") or config.get("torch_dtype")
    if isinstance(declared, str) and declared in DTYPE_CHOICES:
        return declared
    floating = [e.dtype for e in entries if e.dtype.startswith(("float", "bfloat"))]
    return max(set(floating), key=floating.count) if floating else "float32"


def _check_names(tensors: list[OutTensor], config: dict[str, Any], config_dir: Path) -> None:
    """The consolidated names and shapes against the model the config builds (on the meta device):
    a checkpoint of another model, or names thub cannot map, are refused before anything is written.
    A missing tensor is allowed only where it is tied to one present (``lm_head`` to the embeddings)."""
    import torch
    import transformers

    architectures = config.get("architectures") or []
    cls = getattr(transformers, architectures[0], None) if architectures else None
    if cls is None:
        return  # a remote-code model: nothing to build it from here; transformers checks at load time
    with torch.device("meta"):
        model = cls(transformers.AutoConfig.from_pretrained(config_dir))
    expected = model.state_dict(keep_vars=True)
    ours = {t.name: t for t in tensors}
    unexpected = [name for name in ours if name not in expected]
    if unexpected:
        raise UsageError(f"{len(unexpected)} tensors of the checkpoint are not in {architectures[0]} "
                         f"(first: {', '.join(unexpected[:3])}): not a checkpoint of this model?")
    wrong = [f"{n}: {list(ours[n].entry.shape)} vs {list(expected[n].shape)}" for n in ours
             if tuple(expected[n].shape) != tuple(ours[n].entry.shape)]
    if wrong:
        raise UsageError(f"shapes differ from {architectures[0]}'s config: {'; '.join(wrong[:3])}")
    present = {id(expected[n]) for n in ours}
    missing = [n for n, p in expected.items() if n not in ours and id(p) not in present]
    if missing:
        raise UsageError(f"{len(missing)} tensors of {architectures[0]} are not in the checkpoint "
                         f"(first: {', '.join(missing[:3])})")


def plan(source: str | Path, out: str | Path, base: str | None = None, dtype: str = "auto",
         max_shard_size: str = DEFAULT_MAX_SHARD_SIZE, check_names: bool = True) -> Plan:
    """Decide what consolidate writes (reads only metadata and configs). UsageError on a bad input."""
    from thub.checkpoint.sharded import open_sharded

    src = Path(os.path.expanduser(str(source)))
    dest = Path(os.path.expanduser(str(out)))
    if dtype not in DTYPE_CHOICES:
        raise UsageError(f"--dtype {dtype!r}: expected one of {', '.join(DTYPE_CHOICES)}")
    limit = parse_size(max_shard_size)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise UsageError(f"--out {dest}: already exists and is not an empty folder (nothing was written)")
    reader = open_sharded(src)
    weights, skipped = reader.weights()
    if not weights:
        raise UsageError(f"{src}: the {reader.layout} checkpoint holds no model weights "
                         f"({len(skipped)} other entries, e.g. {', '.join(skipped[:3]) or 'none'})")
    base_path = find_base(src, base)
    copied = serving_files(src, base_path)
    config = _config(copied)
    target = _target_dtype(dtype, config, [e for _, e in weights])
    tensors = []
    for name, entry in weights:
        out_dtype = target if entry.dtype.startswith(("float", "bfloat")) else entry.dtype
        if out_dtype not in _SAFETENSORS_DTYPES:
            raise UsageError(f"{src}: tensor {name} is {entry.dtype}, which safetensors cannot store")
        tensors.append(OutTensor(name, entry, out_dtype, _numel(entry.shape) * _itemsize(out_dtype)))
    if check_names:
        _check_names(tensors, config, dict(copied)["config.json"].parent)
    return Plan(src, reader.layout, dest, target, base_path, _split(tensors, limit), copied, skipped, reader)


def _itemsize(dtype: str) -> int:
    return {"float64": 8, "int64": 8, "float32": 4, "int32": 4, "float16": 2, "bfloat16": 2, "int16": 2}.get(dtype, 1)


def _pack(tensors: list[OutTensor], limit: int) -> list[list[OutTensor]]:
    """Consecutive tensors in groups of at most ``limit`` bytes, a new group started when the next
    tensor would pass it (transformers' sharding rule: a tensor larger than the limit is alone)."""
    groups: list[list[OutTensor]] = [[]]
    size = 0
    for tensor in tensors:
        if groups[-1] and size + tensor.nbytes > limit:
            groups.append([])
            size = 0
        groups[-1].append(tensor)
        size += tensor.nbytes
    return groups


def _split(tensors: list[OutTensor], limit: int) -> list[Shard]:
    """The output files: one ``model.safetensors``, or transformers' numbered shards past ``limit``."""
    groups = _pack(tensors, limit)
    if len(groups) == 1:
        return [Shard("model.safetensors", groups[0])]
    return [Shard(f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors", g) for i, g in enumerate(groups)]


def _header(shard: Shard) -> bytes:
    """The safetensors header of ``shard``: 8-byte little-endian length, then JSON padded with
    spaces to 8 bytes (the format's alignment), offsets in file order."""
    entries: dict[str, Any] = {"__metadata__": {"format": "pt"}}  # transformers refuses files without it
    offset = 0
    for tensor in shard.tensors:
        entries[tensor.name] = {"dtype": _SAFETENSORS_DTYPES[tensor.dtype], "shape": list(tensor.entry.shape),
                                "data_offsets": [offset, offset + tensor.nbytes]}
        offset += tensor.nbytes
    text = json.dumps(entries, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text


def _write_tensor(handle: Any, tensor: torch.Tensor, expected: OutTensor) -> None:
    import torch

    data = tensor.to(getattr(torch, expected.dtype)).contiguous().reshape(-1)  # a no-op when read in its dtype
    raw = data.view(torch.uint8).numpy()  # bfloat16 has no numpy dtype; its bytes do
    if raw.nbytes != expected.nbytes:
        raise AssertionError(f"{expected.name}: read {raw.nbytes} bytes, planned {expected.nbytes}")
    handle.write(memoryview(raw))


def _groups(tensors: list[OutTensor]) -> list[list[OutTensor]]:
    """Tensors read together: consecutive ones up to the largest tensor's size (at least 16 MiB), so
    small norms and biases share a read while peak memory stays near the largest tensor."""
    return _pack(tensors, max(max(t.nbytes for t in tensors), 16 * 2**20))


def _needed_bytes(plan: Plan) -> int:
    """What the written folder takes: every shard (tensors and header) and the copied side files."""
    headers = sum(len(_header(shard)) for shard in plan.shards)
    return sum(s.nbytes for s in plan.shards) + headers + sum(o.stat().st_size for _, o in plan.copied) + (1 << 16)


def _gib(size: int) -> str:
    return f"{size / (1 << 30):.2f} GiB" if size >= 1 << 28 else f"{size / (1 << 20):.1f} MiB"


def write(plan: Plan) -> dict[str, Any]:
    """Write the plan into a temporary folder beside ``plan.out`` and rename it there at the end.

    Refused (UsageError, nothing left behind) when the disk has too little room for it, when it
    fills up while writing, and when another process wrote ``plan.out`` meanwhile (two consolidates
    into one folder: the first to finish keeps it, whole)."""
    plan.out.parent.mkdir(parents=True, exist_ok=True)
    need, free = _needed_bytes(plan), shutil.disk_usage(plan.out.parent).free
    if free < need:
        raise UsageError(f"--out {plan.out}: {plan.out.parent} has {_gib(free)} free, the consolidated model "
                         f"needs {_gib(need)}; nothing was written")
    tmp = plan.out.parent / f".{plan.out.name}.thub-partial-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        _write_shards(plan, tmp)
        _write_side_files(plan, tmp)
        from thub.checkpoint.manifest import write_manifest

        write_manifest(tmp, "thub checkpoint consolidate")  # last: what verify and push check the folder against
        if plan.out.exists():
            plan.out.rmdir()  # planned empty; an entry that appeared since makes this fail, as it should
        os.replace(tmp, plan.out)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise UsageError(f"--out {plan.out}: the disk filled up while writing ({exc.strerror}; the model needs "
                             f"{_gib(need)}); nothing was written") from None
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR) and plan.out.exists():
            raise UsageError(f"--out {plan.out}: another process wrote it while this consolidate ran; its folder "
                             "was kept and nothing of this run was") from None
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return plan.summary(dry_run=False)


def _write_shards(plan: Plan, folder: Path) -> None:
    position = {id(t): (i, j) for i, shard in enumerate(plan.shards) for j, t in enumerate(shard.tensors)}
    handles: dict[int, Any] = {}
    try:
        for group in _groups(plan.tensors):
            loaded = plan.reader.read([t.entry for t in group], [t.dtype for t in group])
            for tensor in group:
                index, _ = position[id(tensor)]
                if index not in handles:
                    for done in [k for k in handles if k < index]:  # a shard is complete: close it now
                        handles.pop(done).close()
                    handles[index] = open(folder / plan.shards[index].file, "wb")  # noqa: SIM115 - open across groups
                    handles[index].write(_header(plan.shards[index]))
                _write_tensor(handles[index], loaded.pop(tensor.entry.key), tensor)
            del loaded
    finally:
        for handle in handles.values():
            handle.close()
    if len(plan.shards) > 1:
        index_file = {"metadata": {"total_size": sum(s.nbytes for s in plan.shards)},
                      "weight_map": {t.name: s.file for s in plan.shards for t in s.tensors}}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index_file, indent=2) + "\n")


def _write_side_files(plan: Plan, folder: Path) -> None:
    for name, origin in plan.copied:
        if name == "config.json":
            config = json.loads(origin.read_text())
            # the dtype written, in the key this transformers reads (5.x: dtype, 4.x: torch_dtype)
            config["torch_dtype" if "torch_dtype" in config and "dtype" not in config else "dtype"] = plan.dtype
            (folder / name).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        else:
            shutil.copyfile(origin, folder / name)


def source_state_dict(source: Path) -> dict[str, torch.Tensor]:
    """The checkpoint's model weights, by Hugging Face name, loaded whole by the library that wrote
    it (what ``thub checkpoint verify --source`` compares a consolidated model with): torch DCP with
    torch's own loader of the whole checkpoint (``_EmptyStateDictLoadPlanner``, what
    ``dcp_to_torch_save`` runs), DeepSpeed with its ``zero_to_fp32``. Holds the whole model: for
    checks on models that fit, never for consolidation."""
    from thub.checkpoint.sharded import DcpSource, hf_name, open_sharded

    reader = open_sharded(source)
    if isinstance(reader, DcpSource):
        from torch.distributed.checkpoint._nested_dict import flatten_state_dict
        from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
        from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

        from thub.checkpoint.pickles import dcp_reader

        class _TensorsOnly(_EmptyStateDictLoadPlanner):
            # torch unpickles a non-tensor entry with weights_only=False; the comparison needs the weights only
            def load_bytes(self, read_item: Any, value: Any) -> None:
                pass

        state: dict[str, Any] = {}
        _load_state_dict(state, storage_reader=dcp_reader(reader.folder), planner=_TensorsOnly(), no_dist=True)
        flat, _mapping = flatten_state_dict(state)  # the keys .metadata names
        return {name: flat[entry.key] for name, entry in reader.weights()[0]}
    try:
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint  # type: ignore[import-not-found]
    except ImportError:
        raise UsageError(f"{source}: DeepSpeed is not importable here, so its zero_to_fp32 cannot load the "
                         "checkpoint to compare with") from None
    folder = getattr(reader, "folder", source)
    return {hf_name(k): v.contiguous() for k, v in
            get_fp32_state_dict_from_zero_checkpoint(str(folder.parent), tag=folder.name).items()}
