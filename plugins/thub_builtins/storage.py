"""thub's own storage schemes, registered through ``thub_register_storage`` like any plugin's.

``hf`` and ``mlflow`` are push targets only, each with its own parse and push
(:mod:`thub_builtins.storage_hf`, :mod:`thub_builtins.storage_mlflow`); ``s3``, ``gs`` and ``file`` take
pushes and the ``checkpoint_storage`` mirror through fsspec (the generic fsspec push and mirror of the core:
their specs name no push function). Registering imports nothing: the drivers are named in ``packages``
and checked with ``find_spec`` where they are needed.
"""

from __future__ import annotations

from collections.abc import Callable

from thub import hookimpl
from thub.specs import StorageSpec

_PUSH = frozenset({"push"})
_BOTH = frozenset({"push", "mirror"})


@hookimpl
def thub_register_storage(register: Callable[[StorageSpec], None]) -> None:
    """hf, mlflow, s3, gs and file (in this order: the order every message lists them in)."""
    register(StorageSpec(name="hf", summary="the Hugging Face Hub: a model repo (private unless --public)",
                         uri="hf://ORG/NAME[@BRANCH]", supports=_PUSH, packages=("huggingface_hub",),
                         push="thub_builtins.storage_hf:push", parse="thub_builtins.storage_hf:parse",
                         visibility=True))
    register(StorageSpec(name="mlflow", summary="a new version of a model in MLflow's model registry",
                         uri="mlflow://MODEL_NAME[?tracking_uri=URI]", supports=_PUSH, packages=("mlflow",),
                         push="thub_builtins.storage_mlflow:push", parse="thub_builtins.storage_mlflow:parse",
                         check="thub_builtins.storage_mlflow:check"))
    register(StorageSpec(name="s3", summary="S3 or an S3-compatible store (s3fs; AWS_ENDPOINT_URL)",
                         uri="s3://BUCKET/PREFIX", supports=_BOTH, packages=("fsspec", "s3fs")))
    register(StorageSpec(name="gs", summary="Google Cloud Storage (gcsfs)", uri="gs://BUCKET/PREFIX",
                         supports=_BOTH, packages=("fsspec", "gcsfs")))
    register(StorageSpec(name="file", summary="a folder on this machine (or a mounted one)", uri="file:///PATH",
                         supports=_BOTH, packages=("fsspec",), location="path", local=True))
