"""Readers of sharded training checkpoints, one tensor group at a time (for consolidate).

Each reader lists the model weights a checkpoint holds (its Hugging Face name, shape, stored
dtype) from metadata alone, then reads the tensors asked for, whole, without loading the rest:

- :class:`DcpSource`: torch DCP (FSDP2 + ``torch.distributed.checkpoint``, accelerate's
  ``pytorch_model_fsdp_0/``). torch's own loader (``_load_state_dict`` with ``DefaultLoadPlanner``,
  what ``dcp.load`` runs, in ``no_dist`` mode) fills preallocated tensors of the asked keys only.
- :class:`ZeroSource`: DeepSpeed ZeRO-1/2/3 ``global_stepN/`` in the layout DeepSpeed's
  ``zero_to_fp32.py`` reads; the fp32 partitions are memory-mapped (``torch.load(mmap=True)``),
  so a tensor's bytes are read when it is gathered, not before.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from thub.errors import UsageError

if TYPE_CHECKING:
    import torch

# Module wrappers whose names torch and accelerate put into parameter names: FSDP1's and
# activation checkpointing's wrappers (torch.distributed.fsdp._common_utils.clean_tensor_name),
# torch.compile's _orig_mod, DDP's leading module.
_WRAPPERS = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")
# Where a checkpoint nests the model's state dict: accelerate's save_fsdp_model writes
# {"model": state_dict}; DCP flattens it to "model.<name>" and keeps the path in planner_data.
_MODEL_KEYS = ("model", "module", "model_state_dict", "state_dict")


@dataclass(frozen=True)
class TensorEntry:
    """One stored tensor: its key in the checkpoint, global shape and stored dtype (torch name)."""

    key: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        """Bytes of the whole tensor in its stored dtype."""
        import torch

        n = getattr(torch, self.dtype).itemsize
        for dim in self.shape:
            n *= dim
        return n


class ShardedSource(Protocol):
    """What consolidate needs of a sharded checkpoint."""

    layout: str

    def weights(self) -> tuple[list[tuple[str, TensorEntry]], list[str]]:
        """(Hugging Face name, entry) of every model weight in order, and the keys skipped
        (optimizer state, scheduler, ...)."""

    def read(self, entries: list[TensorEntry], dtypes: list[str]) -> dict[str, torch.Tensor]:
        """The full tensors of ``entries``, by key, each in the dtype given for it (converted as each
        stored piece is copied in, so a float32 copy of a bfloat16 output is never held whole)."""


def hf_name(name: str) -> str:
    """A parameter name as transformers names it: the wrappers' components taken out."""
    for wrapper in _WRAPPERS:
        name = name.replace(wrapper, "")
    return name.removeprefix("module.")


class DcpSource:
    """A torch DCP folder read with torch's own reader and planner."""

    def __init__(self, folder: Path, layout: str) -> None:
        from thub.checkpoint.pickles import dcp_reader, load_dcp_metadata

        self.layout = layout
        self.folder = folder
        # torch's reader, its .metadata read once and with nothing in the pickle run
        self._reader = dcp_reader(folder)
        self.metadata = load_dcp_metadata(folder / ".metadata")

    def weights(self) -> tuple[list[tuple[str, TensorEntry]], list[str]]:
        """The model's tensors: the ``model`` subtree where the state dict was nested (accelerate,
        ``{"model": ..., "optim": ...}``), else the top-level tensors; other entries skipped."""
        from torch.distributed.checkpoint.metadata import TensorStorageMetadata

        planner_data = self.metadata.planner_data or {}
        paths = {key: tuple(str(p) for p in planner_data.get(key, (key,)))
                 for key in self.metadata.state_dict_metadata}
        nested = [k for k in _MODEL_KEYS if any(len(p) > 1 and p[0] == k for p in paths.values())]
        weights, skipped = [], []
        for key, item in self.metadata.state_dict_metadata.items():
            path = paths[key]
            if nested:
                name = ".".join(path[1:]) if len(path) > 1 and path[0] == nested[0] else None
            else:
                name = key if len(path) == 1 else None
            if name is None or not isinstance(item, TensorStorageMetadata):
                skipped.append(key)
                continue
            dtype = str(item.properties.dtype).removeprefix("torch.")
            weights.append((hf_name(name), TensorEntry(key, tuple(item.size), dtype)))
        return weights, skipped

    def read(self, entries: list[TensorEntry], dtypes: list[str]) -> dict[str, torch.Tensor]:
        """torch's loader fills one preallocated tensor per key (only their bytes are read); its
        ``copy_`` of each stored chunk into the target converts the dtype."""
        import torch
        from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
        from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

        state = {e.key: torch.empty(e.shape, dtype=getattr(torch, d)) for e, d in zip(entries, dtypes, strict=True)}
        # flatten_state_dict=False: the keys are already DCP's flat keys (dots included)
        _load_state_dict(state, storage_reader=self._reader, planner=DefaultLoadPlanner(flatten_state_dict=False),
                         no_dist=True)
        return state


def open_sharded(source: Path) -> ShardedSource:
    """The reader for ``source``; UsageError (exit 2) naming what ``thub checkpoint ls`` calls it
    when it is not a complete sharded checkpoint."""
    from thub.checkpoint.layouts import LAYOUTS, detect, find

    if not source.exists():
        raise UsageError(f"{source}: no such folder")
    found = detect(source)
    if found is None:
        inside = find(source) if source.is_dir() else []
        if inside:  # a run directory or a folder of checkpoints: name them, as `ls` does
            listed = ", ".join(f"{c.path} ({c.layout})" for c in inside[:4]) + (", ..." if len(inside) > 4 else "")
            raise UsageError(f"{source}: a folder of {len(inside)} checkpoint(s), not one: {listed}; "
                             "consolidate one of them")
        raise UsageError(f"{source}: not a checkpoint (`thub checkpoint ls {source}` lists none there); "
                         "consolidate reads torch DCP, accelerate FSDP and DeepSpeed ZeRO checkpoints")
    what = f"{source}: {found.layout} ({LAYOUTS[found.layout]})"
    if found.layout == "hf-model":
        raise UsageError(f"{what}: already a Hugging Face model, nothing to consolidate")
    if found.layout == "peft-adapter":
        raise UsageError(f"{what}: merge it into its base with `thub checkpoint merge {source} --out DIR`")
    # an HF Trainer checkpoint-N without trainer_state.json cannot be resumed, but its weights were
    # found whole (layouts checks them first): consolidating needs only those
    if not found.complete and not (found.details.get("trainer_state") is False
                                   and found.problem == "no trainer_state.json"):
        raise UsageError(f"{what}: incomplete ({found.problem}); nothing was written")
    if found.layout == "torch-dcp":
        return DcpSource(source, "torch-dcp")
    if found.layout == "accelerate-fsdp" and found.details.get("state_dict_type") == "SHARDED_STATE_DICT":
        return DcpSource(source / "pytorch_model_fsdp_0", "accelerate-fsdp")
    if found.layout == "deepspeed-zero":
        from thub.checkpoint.zero import ZeroSource

        return ZeroSource(source, found.details.get("tag"))
    raise UsageError(f"{what}: consolidate does not read this layout "
                     f"({found.details.get('state_dict_type', found.layout)}); "
                     "it reads torch DCP, accelerate's SHARDED_STATE_DICT and DeepSpeed ZeRO")
