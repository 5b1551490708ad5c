"""DeepSpeed ZeRO-1/2/3 checkpoints (``global_stepN/``) read tensor by tensor, without DeepSpeed.

The layout is the one DeepSpeed's own ``zero_to_fp32.py`` (deepspeed/utils/zero_to_fp32.py,
0.19) reads: the model states of rank 0 (``mp_rank_00_model_states.pt``; ZeRO-3:
``zero_pp_rank_0_mp_rank_00_model_states.pt``) hold ``param_shapes`` (one ordered dict per
parameter group), ``buffer_names``/``module`` (the buffers), ``frozen_param_shapes`` /
``frozen_param_fragments`` and ``shared_params``; each rank's ``*_optim_states.pt`` holds its fp32
master partition: ZeRO-1/2 ``single_partition_of_fp32_groups`` (each group's flat vector cut into
equal consecutive partitions, one per rank; ``param_alignment_paddings`` between parameters where
recorded), ZeRO-3 ``fp32_flat_groups`` (every parameter cut into ``ceil(numel / world)`` pieces,
rank r holding piece r of each, in order). ``zero_to_fp32`` concatenates the groups (ZeRO-2) or
gathers into one state dict before writing; here every file is memory-mapped and each tensor is
copied piece by piece into a tensor of the output dtype, so only what is being written is resident.

The optimizer files pickle one DeepSpeed class (``ZeroStageEnum``, an int enum); they are read with
``torch.load(weights_only=True)`` and a stand-in for it, so neither DeepSpeed nor arbitrary pickled
code is needed.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from thub.checkpoint.sharded import TensorEntry, hf_name
from thub.errors import UsageError

if TYPE_CHECKING:
    import torch


def _natural(path: Path) -> list[Any]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.name)]


class _ZeroStage(int):
    """Stands in for ``deepspeed.runtime.zero.config.ZeroStageEnum`` (an IntEnum) when unpickling."""


class _Opaque:
    """Stands in for any other DeepSpeed object pickled into a checkpoint (its ``LossScaler``, ...):
    built and given its state, never used."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args = args

    def __setstate__(self, state: Any) -> None:
        self.state = state


_UNSUPPORTED = re.compile(r"Unsupported global: GLOBAL (deepspeed\.[\w.]+) ")


def _load(path: Path) -> Any:
    """``torch.load(weights_only=True)`` memory-mapped, each DeepSpeed class the file names replaced
    by a stand-in (torch names one unsupported global per attempt; DeepSpeed pickles a few)."""
    import torch

    from thub.checkpoint.pickles import RefusedPickle, archive_refusal

    stand_ins: list[Any] = [(_ZeroStage, "deepspeed.runtime.zero.config.ZeroStageEnum")]
    for _attempt in range(20):
        with torch.serialization.safe_globals(stand_ins):
            try:
                return torch.load(path, map_location="cpu", mmap=True, weights_only=True)
            except Exception as exc:  # noqa: BLE001 - any unreadable file is a bad input, named
                found = _UNSUPPORTED.search(str(exc))
                if found is None and (refused := archive_refusal(path, frozenset(n for _, n in stand_ins))):
                    raise RefusedPickle(path, refused) from None
                if found is None:
                    raise UsageError(f"{path}: not readable as a DeepSpeed checkpoint file "
                                     f"({str(exc).strip().splitlines()[0]})") from None
                stand_ins.append((type(found.group(1).rsplit(".", 1)[1], (_Opaque,), {}), found.group(1)))
    raise UsageError(f"{path}: pickles more DeepSpeed objects than a checkpoint holds")


class ZeroSource:
    """A DeepSpeed ZeRO checkpoint: ``root`` with ``latest`` (``tag`` read from it) or a tag folder."""

    layout = "deepspeed-zero"

    def __init__(self, root: Path, tag: str | None) -> None:
        folder = root / tag if tag and (root / tag).is_dir() else root
        self.folder = folder
        optim_files = sorted(folder.glob("*_optim_states.pt"), key=_natural)
        if not optim_files:
            raise UsageError(f"{folder}: no *_optim_states.pt (the fp32 weights of a ZeRO checkpoint)")
        self._optim = [_load(f)["optimizer_state_dict"] for f in optim_files]
        first = self._optim[0]
        self.stage = int(first["zero_stage"])
        world = first["partition_count"]
        self.world = max(world) if isinstance(world, list) else int(world)
        if self.world != len(optim_files):
            raise UsageError(f"{folder}: {len(optim_files)} *_optim_states.pt files, but the checkpoint was saved "
                             f"by {self.world} ranks (an overwritten or partly saved checkpoint?)")
        key = "fp32_flat_groups" if self.stage == 3 else "single_partition_of_fp32_groups"
        self._flat: list[list[torch.Tensor]] = [list(o[key]) for o in self._optim]
        model_name = "zero_pp_rank_0_mp_rank_00_model_states.pt" if self.stage == 3 else "mp_rank_00_model_states.pt"
        if not (folder / model_name).is_file():
            raise UsageError(f"{folder}: no {model_name} (the parameter names of a ZeRO-{self.stage} checkpoint)")
        self._model_files = sorted(folder.glob("*_model_states.pt"), key=_natural)
        self._states = _load(folder / model_name)
        self._rank_states: list[Any] | None = None
        self._paddings = first.get("param_alignment_paddings")
        self._locate()

    def _locate(self) -> None:
        """Where each tensor lives: ("buffer"|"frozen"|"zero2"|"zero3", details), in zero_to_fp32's order."""
        states = self._states
        self._where: dict[str, tuple[str, Any]] = {}
        self._entries: list[tuple[str, TensorEntry]] = []

        def add(name: str, shape: tuple[int, ...], dtype: Any, where: tuple[str, Any]) -> None:
            self._where[name] = where
            self._entries.append((hf_name(name), TensorEntry(name, shape, str(dtype).removeprefix("torch."))))

        module = states.get("module") or {}
        for name in states.get("buffer_names", []):
            if name in module:
                add(name, tuple(module[name].shape), module[name].dtype, ("buffer", None))
        for name, shape in (states.get("frozen_param_shapes") or {}).items():
            add(name, tuple(shape), self._flat[0][0].dtype, ("frozen", None))
        if self.stage == 3:
            flat_sizes = [t.numel() for t in self._flat[0]]
            offset = 0
            for group in states["param_shapes"]:
                for name, shape in group.items():
                    piece = math.ceil(math.prod(shape) / self.world)
                    add(name, tuple(shape), self._flat[0][0].dtype, ("zero3", (offset, piece)))
                    offset += piece
            if offset != sum(flat_sizes):
                raise UsageError(f"{self.folder}: the parameters take {offset} elements of each rank's partition, "
                                 f"which holds {sum(flat_sizes)}: not a checkpoint zero_to_fp32 could read either")
        else:
            for index, group in enumerate(states["param_shapes"]):
                offset = 0
                paddings = self._paddings[index] if self._paddings is not None else None
                for position, (name, shape) in enumerate(group.items()):
                    add(name, tuple(shape), self._flat[0][index].dtype, ("zero2", (index, offset)))
                    offset += math.prod(shape) + (paddings[position] if paddings is not None else 0)
        for alias, source in (states.get("shared_params") or {}).items():
            if source in self._where:
                self._where[alias] = self._where[source]
                entry = next(e for _n, e in self._entries if e.key == source)
                self._entries.append((hf_name(alias), TensorEntry(alias, entry.shape, entry.dtype)))

    def weights(self) -> tuple[list[tuple[str, TensorEntry]], list[str]]:
        """Buffers, frozen and trained parameters and shared aliases (zero_to_fp32's state dict);
        the optimizer's moments are left out."""
        return list(self._entries), ["optimizer_state_dict (exp_avg, exp_avg_sq)"]

    def read(self, entries: list[TensorEntry], dtypes: list[str]) -> dict[str, torch.Tensor]:
        """Each tensor gathered from the memory-mapped partitions into a tensor of its output dtype."""
        import torch

        out = {}
        for entry, dtype in zip(entries, dtypes, strict=True):
            target = torch.empty(math.prod(entry.shape), dtype=getattr(torch, dtype))
            kind, where = self._where[entry.key]
            if kind == "buffer":
                target.copy_(self._states["module"][entry.key].reshape(-1))
            elif kind == "frozen":
                self._frozen(entry, target)
            elif kind == "zero3":
                self._zero3(target, *where)
            else:
                self._zero2(target, *where)
            out[entry.key] = target.view(entry.shape)
        return out

    def _frozen(self, entry: TensorEntry, target: torch.Tensor) -> None:
        if self.stage != 3:
            target.copy_(self._states["frozen_param_fragments"][entry.key].reshape(-1))
            return
        if self._rank_states is None:  # memory-mapped, read once: each rank holds a piece of every frozen one
            self._rank_states = [_load(path) for path in self._model_files]
        filled = 0
        for states in self._rank_states:
            if filled >= target.numel():
                break
            piece = states["frozen_param_fragments"][entry.key].reshape(-1)
            take = min(piece.numel(), target.numel() - filled)
            target[filled:filled + take].copy_(piece[:take])
            filled += take

    def _zero3(self, target: torch.Tensor, offset: int, piece: int) -> None:
        """Rank r holds elements [r*piece, (r+1)*piece) of the parameter at ``offset`` of its flat
        partition (the groups laid end to end); the last piece is padded."""
        numel = target.numel()
        for rank, groups in enumerate(self._flat):
            start = rank * piece
            if start >= numel:
                break
            _copy_span(groups, offset, min(piece, numel - start), target[start:start + min(piece, numel - start)])

    def _zero2(self, target: torch.Tensor, group: int, offset: int) -> None:
        """The group's flat vector is the ranks' partitions end to end; the parameter is elements
        [offset, offset + numel) of it."""
        _copy_span([groups[group] for groups in self._flat], offset, target.numel(), target)


def _copy_span(parts: list[torch.Tensor], offset: int, length: int, target: torch.Tensor) -> None:
    """Copy elements [offset, offset + length) of ``parts`` laid end to end into ``target``."""
    position = 0
    for part in parts:
        size = part.numel()
        if offset < position + size and length > 0:
            begin = offset - position
            take = min(size - begin, length)
            written = target.numel() - length
            target[written:written + take].copy_(part.reshape(-1)[begin:begin + take])
            offset += take
            length -= take
        position += size
    if length:
        raise UsageError("a ZeRO partition is shorter than its parameters: the checkpoint is incomplete")
