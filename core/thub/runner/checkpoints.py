"""Is a checkpoint complete enough to resume from? (HF Trainer's ``checkpoint-N`` layout)

A run killed mid-save, a full disk or a folder someone dropped into ``checkpoints/`` leaves a
``checkpoint-N`` that crashes a resume. A complete HF Trainer checkpoint has a readable
``trainer_state.json``, readable weights (a single file, or every shard of an index) and, where
they were saved, readable training states (``optimizer.pt``, ``scheduler.pt``, ``rng_state.pth``).

The parent process checks this without torch, safetensors or numpy (none is a dependency of
thub's core, and ``thub`` must stay light): a safetensors file is an 8-byte header length, a
JSON header and the tensor bytes, so a truncated one is recognised from its header; a torch
``.bin`` is a zip archive whose central directory is at the end, so a cut one does not open. Its
pickle is walked with nothing imported or run (:func:`thub.checkpoint.pickles.archive_refusal`): a
file that asks to run code is not complete either, and ``--resume`` passes over it.
"""

from __future__ import annotations

import json
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path

WEIGHT_FILES = ("model.safetensors", "adapter_model.safetensors", "pytorch_model.bin", "adapter_model.bin")
INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


def _safetensors_problem(path: Path) -> str | None:
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            raw = handle.read(8)
            if len(raw) < 8:
                return f"{path.name} is cut short"
            (length,) = struct.unpack("<Q", raw)
            if 8 + length > size:
                return f"{path.name} is cut short"
            header = json.loads(handle.read(length))
    except (OSError, ValueError, UnicodeDecodeError):
        return f"{path.name} is unreadable"
    if not isinstance(header, dict):
        return f"{path.name} has no tensor header"
    end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__" and isinstance(t, dict)),
              default=0)
    if 8 + length + end > size:
        return f"{path.name} is cut short ({size} of {8 + length + end} bytes)"
    return None


def _weights_problem(path: Path, scan: bool = True) -> str | None:
    """Why a weights or training-state file is unreadable; with ``scan``, also when its pickle names
    code to run. Scanned are the files transformers and the HF Trainer load with torch's weights-only
    loader (weights, optimizer, scheduler, RNG state), where anything outside torch's allow-list is
    never legitimate; other libraries' files (DeepSpeed's, verl's DTensor shards, mini-trainer's
    training state) pickle their own classes and are read by their own loaders."""
    if path.suffix == ".safetensors":
        return _safetensors_problem(path)
    try:
        with zipfile.ZipFile(path):
            pass
    except (OSError, zipfile.BadZipFile):
        return f"{path.name} is unreadable or cut short"
    if not scan:
        return None
    from thub.checkpoint.pickles import archive_refusal, refused_message

    # a torch.save archive is a pickle: one that names code to run is refused before any library loads it
    refused = archive_refusal(path)
    return f"{path.name} {refused_message(refused)}" if refused else None


def shard_name_problem(name: object) -> str | None:
    """Why ``name``, a file an index (``weight_map``) lists, does not name a file inside the index's
    folder, or None when it does: an absolute path or a ``..`` in it leads out of the folder, so it
    is never opened (links are followed, as transformers follows them: the Hub cache links its files)."""
    if not isinstance(name, str) or not name.strip():
        return "not a file name"
    parts = name.replace("\\", "/").split("/")
    if name.startswith(("/", "\\")) or Path(name).is_absolute() or (len(parts[0]) == 2 and parts[0][1] == ":"):
        return "an absolute path, outside the folder"
    if ".." in parts:
        return "a '..' path, outside the folder"
    return None


def checkpoint_problem(path: str | Path) -> str | None:
    """Why ``path`` is not a complete HF Trainer checkpoint, or None when it is."""
    path = Path(path)
    try:
        state = json.loads((path / "trainer_state.json").read_text())
    except FileNotFoundError:
        return "no trainer_state.json"
    except (OSError, ValueError):
        return "trainer_state.json is unreadable"
    if not isinstance(state, dict):
        return "trainer_state.json is unreadable"
    for index_name in INDEX_FILES:
        index = path / index_name
        if index.exists():
            try:
                shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            except (OSError, ValueError, KeyError, AttributeError, TypeError):
                return f"{index_name} is unreadable"
            for shard in shards:
                if outside := shard_name_problem(shard):
                    return f"{index_name} names {shard!r}: {outside}"
                if not (path / shard).is_file():
                    return f"weight shard {shard} is missing"
                problem = _weights_problem(path / shard)
                if problem:
                    return problem
            return None
    for name in WEIGHT_FILES:
        if (path / name).is_file():
            return _weights_problem(path / name) or _states_problem(path)
    return "no model weights"


def _states_problem(path: Path) -> str | None:
    """A cut-short training state a resume loads (``optimizer.pt``, ``scheduler.pt``, RNG states):
    absent is fine (``save_only_model``), unreadable is not."""
    for state in sorted(path.glob("*.pt")) + sorted(path.glob("*.pth")):
        problem = _weights_problem(state) if state.is_file() else None
        if problem:
            return problem
    return None


def saved_file_problem(path: Path, scan: bool = False) -> str | None:
    """Why a saved file is missing or cut short, or None when it is whole: a ``.safetensors`` file by its
    header, anything else as a ``torch.save`` zip archive; ``scan``: also refused when its pickle names
    code to run (for files loaded with torch's weights-only loader: see ``_weights_problem``)."""
    if not path.is_file():
        return f"no {path.name}"
    return _weights_problem(path, scan)


def library_resume_point(folder: str | Path, step_of: Callable[[str], int | None],
                         problem_of: Callable[[Path], str | None], library: str) -> tuple[Path, int] | None:
    """The newest complete checkpoint among ``folder``'s children that ``library`` would resume
    from by itself, as (path, step); None when there is none.

    Libraries that auto-resume (mini-trainer, instructlab-training, ART) take the newest checkpoint
    they find, complete or not, and crash on a half-written one. thub decides instead: every newer
    incomplete one is moved out of the library's sight into ``<folder>.incomplete/`` (kept, not
    deleted) and said, so the library resumes from what thub names. ``step_of(name)`` is a child's
    step (None: not a checkpoint); ``problem_of(path)`` says why one is incomplete (None: complete).
    """
    root = Path(folder)
    try:
        children = [(step, child) for child in root.iterdir()
                    if child.is_dir() and (step := step_of(child.name)) is not None]
    except OSError:
        return None
    for step, child in sorted(children, reverse=True):
        problem = problem_of(child)
        if problem is None:
            return child, step
        aside = root.with_name(root.name + ".incomplete")
        aside.mkdir(exist_ok=True)
        target = aside / child.name
        suffix = 1
        while target.exists():
            target, suffix = aside / f"{child.name}.{suffix}", suffix + 1
        child.rename(target)
        print(f"thub: {child} is not a complete checkpoint ({problem}); moved to {target} so {library} does not "
              "resume from it", flush=True)
    return None
