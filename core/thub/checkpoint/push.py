"""``thub checkpoint push DIR --to URI``: publish a verified model folder with its model card.

Targets (:func:`parse_target`):

- ``hf://ORG/NAME[@BRANCH]``: the Hugging Face Hub through huggingface_hub's own API:
  ``HfApi.create_repo(private=not public, exist_ok=True)`` (an existing public repo is refused
  without ``--public``), ``create_branch`` for ``@BRANCH``, then one ``create_commit`` of
  ``CommitOperationAdd`` operations, or for a large folder (:func:`large_folder`) ``upload_folder``
  (huggingface_hub 2.4's resumable large-folder upload: with hf_xet it commits in batches and a
  re-run skips what is committed). The token is huggingface_hub's (``HF_TOKEN``, ``hf auth login``).
- ``mlflow://MODEL_NAME[?tracking_uri=URI&registry_uri=URI&experiment=NAME]``: a new version of
  MODEL_NAME in MLflow's model registry: an MLflow run (experiment ``thub-push`` unless named)
  carrying the thub run's parameters (``thub.<name>``, as thub's trackers log them) and final
  metrics, the folder logged as its ``model``
  artifact, and ``create_model_version`` on it. The tracking URI is the query's, else
  ``MLFLOW_TRACKING_URI``, else the run's ``mlflow_tracking_uri`` parameter (never ``./mlruns``).
- ``s3://BUCKET/PREFIX``, ``gs://BUCKET/PREFIX``, ``file:///PATH``: fsspec (s3fs, gcsfs);
  credentials and ``AWS_ENDPOINT_URL`` as those libraries read them. The target must be new or
  empty; the card is written last.

What is sent (:mod:`thub.checkpoint.collect`): every file under DIR except the trainer's resume state,
hidden folders, links that leave DIR (never followed: each is named), and any file that looks like a
secret by its name or its content (private keys, token shapes, secret values); a ``README.md`` there is
replaced by the card (:mod:`thub.checkpoint.card`). ``--dry-run`` lists exactly that, and every transport
sends exactly those files, each as it resolves when sent (:func:`thub.checkpoint.collect.sendable`).
A file:// push writes the usual modes (0777/0666 less the umask) and keeps a private file private.

Verification: the ``export`` entry of the run's ``result.json`` when ``thub train --export``
wrote DIR and verified it, else :func:`thub.checkpoint.verify.verify` runs now; a folder that did
not pass is refused (exit 2) unless ``--force``.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from thub.checkpoint.collect import (  # noqa: F401 - collect and secret_finding are this module's API too
    collect,
    copy_local,
    secret_finding,
    sendable,
    staged,
    write_new,
)
from thub.checkpoint.manifest import MANIFEST, manifest_bytes
from thub.errors import ThubError, UsageError
from thub.redact import redact, redact_text

SCHEMES = ("hf", "mlflow", "s3", "gs", "file")
MLFLOW_EXPERIMENT = "thub-push"
#: past these a Hub push is huggingface_hub's upload_folder (with hf_xet: committed in batches, resumed by
#: running it again), else one create_commit
LARGE_FOLDER_FILES = 30
LARGE_FOLDER_BYTES = 1 << 30


@dataclass
class Target:
    """Where a push goes: ``scheme`` (one of :data:`SCHEMES`), ``location`` (repo id, model name or
    fsspec path), ``revision`` (an hf branch), ``options`` (mlflow's query), ``shown`` (redacted)."""

    scheme: str
    uri: str
    location: str
    revision: str | None = None
    options: dict[str, str] = field(default_factory=dict)

    @property
    def shown(self) -> str:
        return redact_text(self.uri)


def parse_target(uri: str) -> Target:
    """``--to URI`` as a :class:`Target`; UsageError (exit 2) naming the expected shapes."""
    scheme, sep, rest = uri.partition("://")
    expected = "expected hf://ORG/NAME[@BRANCH], mlflow://MODEL_NAME[?tracking_uri=...], s3://BUCKET/PREFIX, " \
               "gs://BUCKET/PREFIX or file:///PATH"
    if not sep or scheme not in SCHEMES or not rest:
        raise UsageError(f"--to {redact_text(uri)}: {expected}")
    if scheme == "hf":
        repo, _, revision = rest.partition("@")
        from huggingface_hub.utils import HFValidationError, validate_repo_id

        try:
            validate_repo_id(repo)
        except HFValidationError as exc:
            raise UsageError(f"--to {uri}: {repo!r} is not a Hub repo id ({exc})") from None
        if "@" in uri and not revision:
            raise UsageError(f"--to {uri}: no branch after @")
        return Target("hf", uri, repo, revision or None)
    if scheme == "mlflow":
        name, _, query = rest.partition("?")
        if not name.strip("/"):
            raise UsageError(f"--to {redact_text(uri)}: no model name (mlflow://MODEL_NAME)")
        options = {k: v[-1] for k, v in parse_qs(query).items()}
        unknown = sorted(set(options) - {"tracking_uri", "registry_uri", "experiment"})
        if unknown:
            raise UsageError(f"--to {redact_text(uri)}: unknown option {unknown[0]!r} (expected tracking_uri, "
                             "registry_uri, experiment)")
        return Target("mlflow", uri, name.strip("/"), options=options)
    if scheme == "file" and not rest.startswith("/"):
        raise UsageError(f"--to {uri}: a file:// target is an absolute path (file:///PATH)")
    if scheme in ("s3", "gs") and not rest.strip("/"):
        raise UsageError(f"--to {uri}: no bucket ({scheme}://BUCKET/PREFIX)")
    return Target(scheme, uri, rest.rstrip("/") if scheme != "file" else rest.rstrip("/") or "/")


# --- the run and the verify result ----------------------------------------------------------------

def find_run(folder: Path, run: str | None) -> Path | None:
    """``--run RUN_DIR`` (must hold thub_run.json), else the thub run ``folder`` is in (itself or up to
    three folders above, as ``thub checkpoint ls`` finds it), else None."""
    if run:
        if not (Path(run) / "thub_run.json").is_file():
            raise UsageError(f"--run {run}: not a thub run directory (no thub_run.json)")
        return Path(run)
    for candidate in (folder, *list(folder.resolve().parents)[:3]):
        if (candidate / "thub_run.json").is_file():
            return candidate
    return None


def _recorded(folder: Path, run_dir: Path | None) -> dict[str, Any] | None:
    """The run's ``result.json`` ``export`` entry when it is about ``folder`` (its path found from
    where the run directory is now: :mod:`thub.runner.runpaths`)."""
    from thub.runner.runpaths import read_result

    export = ((read_result(run_dir) if run_dir else None) or {}).get("export")
    if isinstance(export, dict) and export.get("path") and Path(str(export["path"])).resolve() == folder.resolve():
        return export
    return None


def verification(folder: Path, run_dir: Path | None, dry_run: bool) -> dict[str, Any]:
    """``by`` (what decided), ``ok`` (True, False, or None: not run yet in a dry run), ``checks``, ``failed``."""
    recorded = _recorded(folder, run_dir)
    if recorded is not None:
        return {"by": "recorded by thub train --export (result.json export)", "ok": bool(recorded.get("ok")),
                "checks": recorded.get("checks") or [], "failed": recorded.get("failed")}
    if dry_run:
        return {"by": "thub checkpoint verify (nothing loaded in --dry-run)", "ok": None,
                "checks": [], "failed": None}
    from thub.checkpoint.verify import verify

    try:
        report = verify(folder)
    except UsageError as exc:
        return {"by": "thub checkpoint verify", "ok": False, "checks": [],
                "failed": {"check": "layout", "ok": False, "message": str(exc)}}
    return {"by": "thub checkpoint verify", "ok": report["ok"], "checks": report["checks"], "failed": report["failed"]}


# --- the plan -------------------------------------------------------------------------------------

def _will_plot(run_dir: Path | None) -> bool:
    from importlib.util import find_spec

    from thub.checkpoint.card import loss_curve

    return run_dir is not None and find_spec("matplotlib") is not None and bool(loss_curve(run_dir))


def plan_push(directory: str, to: str, *, public: bool = False, force: bool = False, run: str | None = None,
              dry_run: bool = False) -> dict[str, Any]:
    """What :func:`push` sends where, with the card. Raises UsageError (exit 2) for a bad target or
    folder, and for a folder that has not passed verify (unless ``force``)."""
    from thub.checkpoint.card import PLOT_NAME, card_facts, render

    folder = Path(directory)
    if not folder.is_dir():
        raise UsageError(f"{directory}: {'no such folder' if not folder.exists() else 'not a folder'}")
    target = parse_target(to)
    if public and target.scheme != "hf":
        raise UsageError(f"--public: only an hf:// target has a visibility ({target.scheme}:// has none)")
    run_dir = find_run(folder, run)
    checked = verification(folder, run_dir, dry_run)
    if checked["ok"] is False and not force:
        failed = checked["failed"] or {}
        raise UsageError(f"{directory}: not pushed: it has not passed thub checkpoint verify ({checked['by']}: "
                         f"check {failed.get('check')} failed: {failed.get('message', 'see result.json export')}); "
                         "fix it, or pass --force to push it anyway")
    files, skipped = collect(folder)
    if not files:
        raise UsageError(f"{directory}: nothing to push (every file was left out: see --dry-run)")
    sent, manifest = _checksummed(folder, files, force)
    # the folder's own manifest is checked above, not sent: push writes one of exactly what it sends
    sent = [f for f in sent if f["path"] != MANIFEST]
    facts = card_facts(run_dir, checked)
    facts["files"] = sent
    plot = PLOT_NAME if _will_plot(run_dir) else None
    return {"source": str(folder), "to": target.shown, "kind": target.scheme, "target": target.location,
            "revision": target.revision, "private": (not public) if target.scheme == "hf" else None,
            "run_dir": str(run_dir) if run_dir else None, "verify": checked,
            "forced": bool(force and checked["ok"] is False),
            "files": sent, "manifest": manifest,
            "generated": ["README.md", MANIFEST, *([plot] if plot else [])], "skipped": skipped,
            "card": render(facts, plot), "card_facts": facts, "_target": target}


def _checksummed(folder: Path, files: list[str], force: bool) -> tuple[list[dict[str, Any]], bool | None]:
    """``{path, bytes, sha256}`` of each file to send, and whether the folder matched its
    ``thub_manifest.json`` (None: it has none). A folder thub wrote must still match its manifest
    (UsageError unless ``force``), whose sha256s are then the ones listed."""
    from thub.checkpoint.manifest import check_manifest, sha256_of

    checked = check_manifest(folder)
    if checked.ok is False and not force:
        raise UsageError(f"{folder}: not pushed: it no longer matches its {MANIFEST} ({checked.message}); "
                         "thub wrote it with these checksums and something changed it since: write it again, or "
                         "pass --force to push it as it is")
    known = {e["path"]: e["sha256"] for e in checked.files} if checked.ok else {}
    return [{"path": f, "bytes": sendable(folder, f).stat().st_size,
             "sha256": known.get(f) or sha256_of(sendable(folder, f))} for f in files], checked.ok


# --- the uploads ----------------------------------------------------------------------------------

def _push_hf(plan: dict[str, Any], extras: dict[str, bytes]) -> dict[str, Any]:
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


def _tracking_uri(target: Target, run_dir: Path | None) -> str:
    uri = target.options.get("tracking_uri") or os.environ.get("MLFLOW_TRACKING_URI")
    if not uri and run_dir is not None:
        from thub.checkpoint.layouts import run_parameters
        from thub.redact import real_values

        uri = real_values(run_parameters(run_dir) or {}, run_dir).get("mlflow_tracking_uri")
    if not uri:
        raise UsageError(f"--to {target.shown}: no MLflow tracking URI: add ?tracking_uri=URI, set "
                         "MLFLOW_TRACKING_URI, or push a run trained with mlflow_tracking_uri")
    return str(uri)


def _push_mlflow(plan: dict[str, Any], extras: dict[str, bytes]) -> dict[str, Any]:
    from mlflow import MlflowClient
    from mlflow.entities import Metric
    from mlflow.exceptions import MlflowException

    from thub.trackers.sink import ensure_experiment

    target: Target = plan["_target"]
    run_dir = Path(plan["run_dir"]) if plan["run_dir"] else None
    uri = _tracking_uri(target, run_dir)
    # before any MlflowClient opens the store: a new SQLite store made by one gets MLflow's default
    # artifact root, ./mlruns of whatever folder the push ran in, for its Default experiment
    experiment = ensure_experiment(uri, target.options.get("experiment") or MLFLOW_EXPERIMENT)
    client = MlflowClient(tracking_uri=uri, registry_uri=target.options.get("registry_uri") or uri)
    facts = plan["card_facts"]
    run = client.create_run(experiment, run_name=f"push {Path(plan['source']).name}",
                            tags={"thub.source": plan["source"], "thub.run_dir": plan["run_dir"] or "",
                                  "thub.algorithm": facts.get("algorithm") or "",
                                  "thub.backend": facts.get("backend") or ""})
    run_id = run.info.run_id
    try:
        if run_dir is not None:  # the run's parameters as thub's trackers log them (thub.<name>, with sources)
            from thub.runner.rundir import read_json
            from thub.trackers import run_metadata
            from thub.trackers.sink import log_metadata_mlflow

            log_metadata_mlflow(client, run_id, run_metadata(read_json(run_dir / "thub_run.json") or {}))
        now = int(time.time() * 1000)
        step = int((facts.get("final_metrics") or {}).get("step") or 0)
        metrics = [Metric(k, float(v), now, step) for k, v in (facts.get("final_metrics") or {}).items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "step"]
        if metrics:
            client.log_batch(run_id, metrics=metrics)
        with staged(Path(plan["source"]), plan["files"], extras) as staging:
            client.log_artifacts(run_id, str(staging), "model")
        client.set_terminated(run_id)
    except BaseException:
        client.set_terminated(run_id, status="FAILED")
        raise
    try:
        client.create_registered_model(target.location)
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    version = client.create_model_version(target.location, source=f"{run.info.artifact_uri}/model", run_id=run_id,
                                          tags={"thub.source": plan["source"]},
                                          description=f"pushed by thub checkpoint push from {plan['source']}")
    return {"revision": str(version.version), "url": f"models:/{target.location}/{version.version}",
            "mlflow_run_id": run_id}


def _push_fsspec(plan: dict[str, Any], extras: dict[str, bytes]) -> dict[str, Any]:
    import fsspec  # type: ignore[import-untyped]  # ships no py.typed

    target: Target = plan["_target"]
    try:
        fs = fsspec.filesystem(target.scheme)
    except ImportError as exc:
        package = {"s3": "s3fs", "gs": "gcsfs"}.get(target.scheme, target.scheme)
        raise UsageError(f"--to {target.shown}: {target.scheme}:// needs {package}, which is not installed: "
                         f"python -m pip install {package} ({exc})") from None
    root = target.location
    from thub.checkpoint import push_partial

    # a push of thub's cut off halfway (its marker there) is replaced; anything else in the target is refused
    push_partial.clear_unfinished(fs, root, target.shown, lambda m: print(f"thub: {m}", file=sys.stderr, flush=True))
    if fs.exists(root) and fs.isdir(root) and fs.ls(root, detail=False):
        raise UsageError(f"--to {target.shown}: already holds files; push to a new or empty path")
    folder = Path(plan["source"])
    local = target.scheme == "file"  # written here: the usual modes, a private file kept private (copy_local)
    push_partial.begin(fs, root, str(folder), [f["path"] for f in plan["files"]] + sorted(extras))
    for f in plan["files"]:
        parent = Path(f["path"]).parent.as_posix()
        fs.makedirs(root if parent == "." else f"{root}/{parent}", exist_ok=True)
        if local:
            copy_local(sendable(folder, f["path"]), Path(root) / f["path"])
        else:
            fs.put_file(str(sendable(folder, f["path"])), f"{root}/{f['path']}")
    for name in sorted(extras, key=lambda n: n == "README.md"):  # the card last: the push is whole when it is there
        if local:
            write_new(Path(root) / name, extras[name])
        else:
            fs.pipe_file(f"{root}/{name}", extras[name])
    push_partial.finish(fs, root)
    return {"revision": None, "url": target.shown}


def push(plan: dict[str, Any]) -> dict[str, Any]:
    """Send what :func:`plan_push` planned (the card written into the pushed folder). Returns the
    plan's public part with ``revision`` (the Hub commit, the MLflow model version; None for
    fsspec) and ``url``."""
    from thub.checkpoint.card import PLOT_NAME, write_plot

    extras = {"README.md": plan["card"].encode()}
    with tempfile.TemporaryDirectory(prefix="thub-card-") as scratch:
        if PLOT_NAME in plan["generated"] and plan["run_dir"]:
            png = write_plot(Path(plan["run_dir"]), Path(scratch) / PLOT_NAME)
            if png is not None:
                extras[PLOT_NAME] = png.read_bytes()
        # a manifest of exactly what is sent, the card included: the pushed folder verifies where it lands
        listed = [*plan["files"], *({"path": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
                                    for name, data in sorted(extras.items()))]
        extras[MANIFEST] = manifest_bytes(listed, "thub checkpoint push")
        sender = {"hf": _push_hf, "mlflow": _push_mlflow}.get(plan["kind"], _push_fsspec)
        try:
            done = sender(plan, extras)
        except ThubError:
            raise
        except ImportError as exc:
            raise UsageError(f"--to {plan['to']}: {exc.name or exc} is not installed: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - the library's error, named (the network, a refusal)
            raise ThubError(f"push to {plan['to']} failed: {type(exc).__name__}: {redact_text(str(exc))}") from None
    generated_sha256 = {name: hashlib.sha256(data).hexdigest() for name, data in extras.items()}
    return {**public_part(plan), "generated": sorted(extras), "generated_sha256": generated_sha256, **done}


def public_part(plan: dict[str, Any]) -> dict[str, Any]:
    """The plan without its internal entries (for JSON, the record, the event)."""
    return {k: v for k, v in plan.items() if not k.startswith("_")}


def record(done: dict[str, Any]) -> None:
    """Append the push to the run's ``result.json`` ``push`` list (written atomically)."""
    from thub.runner.rundir import read_json, write_json_atomic

    if not done.get("run_dir"):
        return
    path = Path(done["run_dir"]) / "result.json"
    result = read_json(path)
    if result is None:
        return
    entry = {"to": done["to"], "kind": done["kind"], "revision": done.get("revision"), "url": done.get("url"),
             "source": done["source"], "private": done.get("private"), "verified": done["verify"]["ok"],
             "files": [f["path"] for f in done["files"]] + list(done["generated"]), "at": time.time(),
             # what was sent, byte for byte: the folder's files and the generated card and plot
             "sha256": {**{f["path"]: f["sha256"] for f in done["files"]}, **(done.get("generated_sha256") or {})}}
    previous = result.get("push")
    pushes: list[Any] = previous if isinstance(previous, list) else []
    write_json_atomic(path, {**result, "push": [*pushes, redact(entry)]})


def notify(done: dict[str, Any]) -> None:
    """Fire the ``pushed`` run event (``thub_on_event``): data = the push (``to``, ``kind``,
    ``revision``, ``url``, ``files``, ``card`` (text), ``card_facts``)."""
    from thub.manager import get_registry
    from thub.specs import RunEvent

    facts = done.get("card_facts") or {}
    data = redact({k: v for k, v in done.items() if k != "card"})
    data["card"] = done.get("card")
    get_registry().fire(RunEvent("pushed", done.get("run_dir") or "", facts.get("algorithm") or "",
                                 facts.get("backend") or "", data))
