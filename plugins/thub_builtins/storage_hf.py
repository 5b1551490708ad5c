"""``hf://ORG/NAME[@BRANCH]``: ``thub checkpoint push`` to the Hugging Face Hub (moved from
``thub.checkpoint.push``; registered by :mod:`thub_builtins.storage`).

Through huggingface_hub's own API: ``HfApi.create_repo(private=not public, exist_ok=True)`` (an existing
public repo is refused without ``--public``), ``create_branch`` for ``@BRANCH``, then one ``create_commit``
of ``CommitOperationAdd`` operations, or for a large folder (:func:`large_folder`) ``upload_folder``
(huggingface_hub 2.4's resumable large-folder upload: with hf_xet it commits in batches and a re-run skips
what is committed). The token is huggingface_hub's (``HF_TOKEN``, ``hf auth login``). huggingface_hub is
imported only when a URI is parsed or a push runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from thub.checkpoint.collect import sendable, staged
from thub.checkpoint.storage import Target
from thub.errors import UsageError

#: past these a Hub push is huggingface_hub's upload_folder (with hf_xet: committed in batches, resumed by
#: running it again), else one create_commit
LARGE_FOLDER_FILES = 30
LARGE_FOLDER_BYTES = 1 << 30


def parse(uri: str, rest: str) -> Target:
    """``hf://ORG/NAME[@BRANCH]``: the repo id (checked by huggingface_hub) and the branch."""
    repo, _, revision = rest.partition("@")
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo)
    except HFValidationError as exc:
        raise UsageError(f"{repo!r} is not a Hub repo id ({exc})") from None
    if "@" in uri and not revision:
        raise UsageError("no branch after @")
    return Target("hf", uri, repo, revision or None)


def push(plan: dict[str, Any], extras: dict[str, bytes]) -> dict[str, Any]:
    """Send a planned push to the Hub (``StorageSpec.push`` of ``hf``): the repo made private unless
    ``--public`` (an existing public one refused without it), ``@BRANCH`` made, then one
    ``create_commit`` or, for a :func:`large_folder`, ``upload_folder``."""
    from huggingface_hub import CommitOperationAdd, HfApi

    target: Target = plan["_target"]
    api = HfApi()
    repo = api.create_repo(target.location, private=plan["private"], exist_ok=True, repo_type="model")
    if plan["private"] and api.repo_info(target.location, repo_type="model").private is False:
        raise UsageError(f"--to {target.uri}: the repo exists and is public; pass --public to push into it")
    if target.revision:
        api.create_branch(target.location, branch=target.revision, exist_ok=True, repo_type="model")
    folder = Path(plan["source"])
    message = f"thub checkpoint push of {folder.name}"
    if large_folder(plan["files"]):
        # upload_folder sends a folder whole: the collected files (links to them) beside the card
        with staged(folder, plan["files"], extras) as staging:
            info = api.upload_folder(repo_id=target.location, folder_path=str(staging), repo_type="model",
                                     revision=target.revision, commit_message=message)
        return {"revision": getattr(info, "oid", None), "url": getattr(info, "commit_url", None) or str(repo),
                "upload": "upload_folder"}
    operations = [CommitOperationAdd(path_in_repo=f["path"], path_or_fileobj=str(sendable(folder, f["path"])))
                  for f in plan["files"]]
    operations += [CommitOperationAdd(path_in_repo=name, path_or_fileobj=data) for name, data in extras.items()]
    info = api.create_commit(target.location, operations=operations, repo_type="model", revision=target.revision,
                             commit_message=message)
    return {"revision": getattr(info, "oid", None), "url": getattr(info, "commit_url", None) or str(repo),
            "upload": "create_commit"}


def large_folder(files: list[dict[str, Any]]) -> bool:
    """Whether a Hub push goes through ``upload_folder`` (resumable, several commits) rather than one
    ``create_commit``: past :data:`LARGE_FOLDER_FILES` files (where huggingface_hub warns that one commit
    may fail) or :data:`LARGE_FOLDER_BYTES`."""
    return len(files) > LARGE_FOLDER_FILES or sum(f["bytes"] for f in files) > LARGE_FOLDER_BYTES
