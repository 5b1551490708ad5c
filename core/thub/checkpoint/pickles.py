"""Pickles from files thub did not write, read so that nothing in them runs.

A checkpoint folder may come from anyone (a colleague's bucket, the Hub). Two of the formats thub
reads hold pickles, and a pickle can name any callable to run while it loads (``os.system``):

- a torch DCP folder's ``.metadata`` (torch's ``FileSystemReader.read_metadata`` is a plain
  ``pickle.load``): :func:`load_dcp_metadata` reads it with an unpickler that admits only what DCP
  metadata is made of (the classes of ``torch.distributed.checkpoint.metadata``, torch's storage
  record, dtypes, layouts, ``torch.Size``, ``PosixPath``) and :func:`dcp_reader` is torch's reader
  with that read in place of its own;
- a ``torch.save`` archive (``pytorch_model.bin``, ``optimizer.pt``, ``rng_state.pth``):
  :func:`archive_refusal` walks its pickle with every global replaced by an inert stand-in (nothing
  is imported, nothing is called) and names the first global outside :data:`TORCH_SAFE_GLOBALS`
  (torch's own ``weights_only`` allow-list) and the numpy types transformers' Trainer admits for its
  RNG state. The parent process runs it without importing torch, before anything loads the file.

Everything else thub or the libraries it drives loads goes through ``torch.load(weights_only=True)``
or safetensors; ``tests/test_trust_pickles.py`` greps the code for any other unpickling call site.
"""

from __future__ import annotations

import io
import pickle
import zipfile
from pathlib import Path
from typing import Any

from thub.errors import UsageError

__all__ = ["RefusedPickle", "TORCH_SAFE_GLOBALS", "archive_refusal", "dcp_reader", "load_dcp_metadata",
           "refused_message"]

# torch 2.13's ``torch._weights_only_unpickler._get_allowed_globals()``, written out so the parent
# process can check an archive without importing torch (a test compares it with torch's own list).
_DTYPES = ("bfloat16 bits16 bits1x8 bits2x4 bits4x2 bits8 bool complex128 complex32 complex64 float16 float32 "
           "float4_e2m1fn_x2 float64 float8_e4m3fn float8_e4m3fnuz float8_e5m2 float8_e5m2fnuz float8_e8m0fnu "
           "int1 int16 int2 int3 int32 int4 int5 int6 int64 int7 int8 qint32 qint8 quint2x4 quint4x2 quint8 "
           "uint1 uint16 uint2 uint3 uint32 uint4 uint5 uint6 uint64 uint7 uint8").split()
_QSCHEMES = ("per_channel_affine per_channel_affine_float_qparams per_channel_symmetric per_tensor_affine "
             "per_tensor_symmetric").split()
_KINDS = "BFloat16 Bool Byte Char Double Half Int Long Short".split()
_STORAGES = [f"{kind}Storage" for kind in (*_KINDS, "ComplexDouble", "ComplexFloat", "Float")]
_REBUILDS = ("device_tensor_from_cpu_tensor device_tensor_from_numpy meta_tensor_no_storage nested_tensor "
             "parameter parameter_with_state qtensor sparse_tensor tensor tensor_v2 tensor_v3 "
             "wrapper_subclass").split()

#: "module.name" of every global torch's ``weights_only`` loader admits
TORCH_SAFE_GLOBALS: frozenset[str] = frozenset(
    ["_codecs.encode", "builtins.bytearray", "builtins.complex", "builtins.set", "collections.Counter",
     "collections.OrderedDict", "torch.Size", "torch.Tensor", "torch.device", "torch.nn.parameter.Parameter",
     "torch._tensor._rebuild_from_type_v2", "torch.serialization._get_layout", "torch.storage.TypedStorage",
     "torch.storage.UntypedStorage"]
    + [f"torch.{name}" for name in (*_DTYPES, *_QSCHEMES)]
    + [f"torch._utils._rebuild_{name}" for name in _REBUILDS]
    + [f"torch.{name}" for name in (*_STORAGES, "QInt32Storage", "QInt8Storage", "QUInt2x4Storage",
                                    "QUInt4x2Storage", "QUInt8Storage")]
    + [f"torch.{kind}Tensor" for kind in (*_KINDS, "Float")]
    + [f"torch.cuda.{name}" for name in _STORAGES]
    + [f"torch.cuda.{kind}Tensor" for kind in (*_KINDS, "Float")]
    + [f"{module}.{kind}Tensor" for module in ("torch.sparse", "torch.cuda.sparse")
       for kind in ("BFloat16", "Byte", "Char", "Double", "Float", "Half", "Int", "Long", "Short")])

#: what transformers' Trainer adds for ``rng_state.pth`` (``trainer_pt_utils.safe_globals``: numpy's
#: RNG state is an array), for numpy 1.x and 2.x module names
RNG_STATE_GLOBALS: frozenset[str] = frozenset(
    ["numpy.core.multiarray._reconstruct", "numpy._core.multiarray._reconstruct", "numpy.ndarray", "numpy.dtype",
     "numpy.dtypes.UInt32DType"])


class RefusedPickle(UsageError):
    """A file whose pickle names something to run (exit 2): it was not loaded."""

    def __init__(self, path: Path | str, name: str) -> None:
        super().__init__(f"{path}: {refused_message(name)}")
        self.path = str(path)
        self.global_name = name


def refused_message(name: str) -> str:
    """The one wording of a refusal: what the file asked for, and that nothing ran."""
    return (f"refused: this file asks to run code ({name}, which no checkpoint needs); it was not loaded. "
            "Take checkpoints only from people you trust")


class _Refused(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class _Inert:
    """Stands in for every admitted global while an archive's pickle is walked: called, built,
    appended to and given items, it does nothing."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> _Inert:
        return _Inert()

    def __setstate__(self, state: Any) -> None:
        pass

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def append(self, value: Any) -> None:
        pass

    def extend(self, values: Any) -> None:
        pass


class _InertUnpickler(pickle.Unpickler):
    def __init__(self, data: bytes, also: frozenset[str]) -> None:
        super().__init__(io.BytesIO(data))
        self.also = also

    def find_class(self, module: str, name: str) -> Any:
        full = f"{module}.{name}"
        if full in TORCH_SAFE_GLOBALS or full in RNG_STATE_GLOBALS or full in self.also:
            return _Inert
        raise _Refused(full)

    def persistent_load(self, pid: Any) -> Any:
        return _Inert()  # a tensor's storage: its bytes are never read


def archive_refusal(path: Path, also: frozenset[str] = frozenset()) -> str | None:
    """The global a ``torch.save`` archive's pickle names outside torch's ``weights_only`` allow-list
    (and the Trainer's RNG-state numpy types, and ``also``: names a caller stands in for), as
    ``module.name``; None when it names none, or when ``path`` is not a zip archive (the caller's own
    check says it is unreadable)."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if n == "data.pkl" or n.endswith("/data.pkl")]
            if not names:
                return None
            data = archive.read(min(names, key=len))
    except (OSError, zipfile.BadZipFile, RuntimeError, ValueError):
        return None
    try:
        _InertUnpickler(data, also).load()
    except _Refused as refused:
        return refused.name
    except Exception:  # noqa: BLE001 - a malformed pickle is torch's to report when it loads; nothing ran
        return None
    return None


# --- torch DCP .metadata --------------------------------------------------------------------------

_DCP_METADATA = "torch.distributed.checkpoint.metadata"
_DCP_EXTRA = {("torch.distributed.checkpoint.filesystem", "_StorageInfo"), ("torch", "Size"),
              ("torch.serialization", "_get_layout"), ("pathlib", "PosixPath"), ("pathlib", "PurePosixPath"),
              ("collections", "OrderedDict"), ("builtins", "set"), ("builtins", "frozenset"),
              ("builtins", "complex"), ("builtins", "bytearray")}


class _DcpMetadataUnpickler(pickle.Unpickler):
    """Admits the classes DCP metadata is made of (torch's own), dtypes and nothing else."""

    def find_class(self, module: str, name: str) -> Any:
        import importlib

        if module == _DCP_METADATA or (module, name) in _DCP_EXTRA or (module == "torch" and name in _DTYPES):
            found = getattr(importlib.import_module(module), name, None)
            # a class defined there (a dataclass or enum of DCP's), not a function it imported
            if module != _DCP_METADATA or (isinstance(found, type) and found.__module__ == _DCP_METADATA):
                if found is not None:
                    return found
        raise _Refused(f"{module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("DCP metadata holds no persistent references")


def load_dcp_metadata(path: Path) -> Any:
    """A DCP ``.metadata`` file read as torch's ``Metadata``, with nothing in it run: RefusedPickle
    when it names anything DCP metadata is not made of, UsageError when it is not metadata at all."""
    from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

    try:
        with open(path, "rb") as handle:
            metadata = _DcpMetadataUnpickler(handle).load()
    except _Refused as refused:
        raise RefusedPickle(path, refused.name) from None
    except (OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError, AttributeError, IndexError,
            KeyError, MemoryError, RecursionError) as exc:
        raise UsageError(f"{path}: not readable as torch DCP metadata ({type(exc).__name__}: {exc})") from None
    if not isinstance(metadata, Metadata):
        raise UsageError(f"{path}: not torch DCP metadata (holds a {type(metadata).__name__})")
    if getattr(metadata, "storage_meta", None) is None:  # as torch's reader fills it in
        metadata.storage_meta = StorageMeta()
    return metadata


def dcp_reader(folder: Path | str) -> Any:
    """torch's ``FileSystemReader`` on ``folder``, reading ``.metadata`` with :func:`load_dcp_metadata`
    (once: torch asks for it on every load) instead of ``pickle.load``."""
    from torch.distributed.checkpoint import FileSystemReader

    class SafeFileSystemReader(FileSystemReader):
        _metadata: Any = None

        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            if self._metadata is None or kwargs.get("rank") is not None:
                path = Path(str(self._get_metadata_path(kwargs.get("rank"))))
                metadata = load_dcp_metadata(path)
                metadata.storage_meta.load_id = self.load_id
                self._metadata = metadata
            return self._metadata

    return SafeFileSystemReader(str(folder))
