"""``thub checkpoint push DIR --to URI``: publish a verified model folder with its model card.

Targets (:func:`parse_target`): a URI of a registered storage scheme (``thub_register_storage``,
:mod:`thub.checkpoint.storage`; ``thub plugins`` lists them). thub's own come from the built-in plugin
``thub_builtins.storage``: ``hf://ORG/NAME[@BRANCH]`` (the Hugging Face Hub, ``thub_builtins.storage_hf``),
``mlflow://MODEL_NAME[?tracking_uri=URI&registry_uri=URI&experiment=NAME]`` (MLflow's model registry,
``thub_builtins.storage_mlflow``), and ``s3://BUCKET/PREFIX``, ``gs://BUCKET/PREFIX``, ``file:///PATH``
through the generic fsspec push (:mod:`thub.checkpoint.push_fsspec`): the target must be new or empty;
the card is written last. Each scheme's spec names the function that sends (``StorageSpec.push``).

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
import tempfile
import time
from pathlib import Path
from typing import Any

from thub.checkpoint.collect import (  # noqa: F401 - collect and secret_finding are this module's API too
    collect,
    secret_finding,
    sendable,
)
from thub.checkpoint.manifest import MANIFEST, manifest_bytes
from thub.checkpoint.storage import Target, parse_uri, visible_schemes
from thub.errors import ThubError, UsageError
from thub.redact import redact, redact_text


def parse_target(uri: str) -> Target:
    """``--to URI`` as a :class:`~thub.checkpoint.storage.Target` (:func:`thub.checkpoint.storage.parse_uri`,
    the one parser of storage URIs); UsageError (exit 2) naming the registered shapes."""
    try:
        return parse_uri(uri, "push")
    except UsageError as exc:
        raise UsageError(f"--to {redact_text(uri)}: {exc}") from None


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
    if public and not (target.spec and target.spec.visibility):
        raise UsageError(f"--public: only an {visible_schemes()} target has a visibility "
                         f"({target.scheme}:// has none)")
    run_dir = find_run(folder, run)
    files, skipped = collect(folder)
    if not files:
        raise UsageError(f"{directory}: nothing to push (every file was left out: see --dry-run)")
    # first: a folder changed since thub wrote it is named as that, before verify loads anything
    sent, manifest = _checksummed(folder, files, force)
    checked = verification(folder, run_dir, dry_run)
    if checked["ok"] is False and not force:
        failed = checked["failed"] or {}
        raise UsageError(f"{directory}: not pushed: it has not passed thub checkpoint verify ({checked['by']}: "
                         f"check {failed.get('check')} failed: {failed.get('message', 'see result.json export')}); "
                         "fix it, or pass --force to push it anyway")
    # the folder's own manifest is checked above, not sent: push writes one of exactly what it sends
    sent = [f for f in sent if f["path"] != MANIFEST]
    facts = card_facts(run_dir, checked)
    facts["files"] = sent
    plot = PLOT_NAME if _will_plot(run_dir) else None
    return {"source": str(folder), "to": target.shown, "kind": target.scheme, "target": target.location,
            "revision": target.revision, "private": (not public) if target.spec and target.spec.visibility else None,
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


# --- the upload -----------------------------------------------------------------------------------

def sender_of(target: Target) -> Any:
    """The function that sends to ``target``: its scheme's ``StorageSpec.push`` (imported now), else
    the generic fsspec push (:func:`thub.checkpoint.push_fsspec.push_fsspec`)."""
    from thub.specs import load_object

    spec = target.spec
    if spec is not None and spec.push:
        return load_object(spec.push)
    from thub.checkpoint.push_fsspec import push_fsspec

    return push_fsspec


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
        sender = sender_of(plan["_target"])
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
