"""Secrets are never shown or written where people read: one redaction for the whole of thub.

What counts as a secret:

* a value under a secret *name* (``HF_TOKEN``, ``WANDB_API_KEY``, ``hub_token``, ``password``),
  judged by whole words of the name, so ``max_tokens`` and ``TOKENIZERS_PARALLELISM`` are not;
* the credentials of a URI (``https://user:pw@host`` -> ``https://<redacted>@host``);
* a secret-named query or fragment value of a URI (``?token=abc``, ``&X-Amz-Signature=...``,
  ``#access_token=...``).

Used by ``--dry-run`` (plain and ``--json``), ``thub_run.json``, ``thub history show/diff``,
``thub env``, the trackers' metadata and the training child's output on its way into
``logs/train.log`` (:func:`output_secrets`, :mod:`thub.runner.logsink`).

A redacted parameter still has to reach the training child: the process that writes
``thub_run.json`` keeps the real values (:func:`record_values`) and hands them to its child in
the environment variable :data:`SECRETS_ENV` (:func:`child_environment`), never in a file; the
child (and a SLURM job, whose environment comes from ``sbatch``) gets them back with
:func:`real_values`. Only the standard library is imported.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REDACTED = "<redacted>"
#: The real values of redacted parameters, as JSON, in a run's child processes.
SECRETS_ENV = "THUB_RUN_SECRETS"

#: Whole words of a name that mark its value as a secret (``HF_TOKEN``, ``db_password``, ``sig``).
SECRET_WORDS = frozenset({
    "token", "secret", "secrets", "password", "passwd", "pwd", "credential", "credentials", "apikey", "auth",
    "signature", "sig", "privatekey", "accesskey",
})
#: Words that name a secret only as a name's last word: ``hub_token`` is one, a metric such as
#: ``mean_token_accuracy`` or ``token_count`` is not.
LAST_WORD_ONLY = frozenset({"token", "sig", "signature"})
#: Consecutive words that do (``WANDB_API_KEY``, ``apiKey``, ``aws_access_key_id``).
SECRET_PAIRS = frozenset({("api", "key"), ("private", "key"), ("access", "key"), ("account", "key"),
                          ("client", "key"), ("session", "key")})

# scheme://userinfo@ : everything up to the last @ before the host's path, query or fragment
_URI_CREDENTIALS = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s?#@]+(?:@[^/\s?#@]+)*@")
# ?name=value, &name=value, ;name=value, #name=value inside a URI's query or fragment
_QUERY_ITEM = re.compile(r"(?P<lead>[?&;#])(?P<name>[^=&;#\s/?]+)=(?P<value>[^&;#\s]*)")


def _words(name: str) -> list[str]:
    """``X-Amz-Signature`` -> [x, amz, signature]; ``apiKey`` -> [api, key]."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)  # camelCase words
    return [w for w in re.split(r"[^a-z0-9]+", spaced.lower()) if w]


def is_secret_name(name: str, *, loose: bool = False) -> bool:
    """Whether a value named ``name`` must never be shown, by whole words of the name.

    ``loose`` also counts a bare ``key``: right for environment variables (``OPENAI_KEY``) and
    URI query items (``?key=...``), wrong for configuration keys (verl's ``prompt_key``).
    """
    words = _words(name)
    joined = re.sub(r"[^a-z0-9]+", "", name.lower())
    anywhere = SECRET_WORDS - LAST_WORD_ONLY
    if anywhere & {*words, joined} or (loose and "key" in words):
        return True
    if words and (words[-1] in SECRET_WORDS or joined in SECRET_WORDS):
        return True
    return any(pair in SECRET_PAIRS for pair in zip(words, words[1:]))


def redact_text(text: str) -> str:
    """``text`` with URI credentials and secret-named query values replaced by ``<redacted>``."""
    if "://" in text:
        text = _URI_CREDENTIALS.sub(lambda m: f"{m.group('scheme')}{REDACTED}@", text)
    if "=" in text and any(c in text for c in "?&;#"):
        text = _QUERY_ITEM.sub(
            lambda m: f"{m.group('lead')}{m.group('name')}={REDACTED}"
            if is_secret_name(m.group("name"), loose=True) and m.group("value") else m.group(0),
            text,
        )
    return text


def redact(value: Any, name: str = "") -> Any:
    """``value`` fit to be shown: strings through :func:`redact_text`, lists and mappings item by
    item; a non-empty string or number under a secret name (``name``, or a mapping's key) is
    replaced, and so is each item of a list under one."""
    secret = bool(name) and is_secret_name(name)
    if isinstance(value, Mapping):
        return {k: redact(v, str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact(v, name if secret else "") for v in value)
    if secret and value not in (None, "") and not isinstance(value, bool):
        return REDACTED
    if isinstance(value, str):
        return redact_text(value)
    return value


def redact_entries(entries: Mapping[str, Any]) -> dict[str, Any]:
    """``{name: {"value": v, "source": s}}`` (``thub_run.json``, the dry-run plan) with each
    value redacted under its parameter's name and the rest of each entry as :func:`redact`."""
    shown: dict[str, Any] = {}
    for name, entry in entries.items():
        if isinstance(entry, Mapping) and "value" in entry:
            shown[name] = {**redact(dict(entry)), "value": redact(entry["value"], name)}
        else:
            shown[name] = redact(entry, name)
    return shown


def redact_value(name: str, value: Any) -> Any:
    """``value`` fit to be shown or logged under ``name`` (the trackers' spelling of :func:`redact`)."""
    return redact(value, name)


# --- redacted parameters that still reach the child --------------------------------------------

_KEPT: dict[str, dict[str, Any]] = {}  # run directory -> real values, in the process that wrote the record


def _key(run_dir: str | Path) -> str:
    return os.path.realpath(run_dir)


def record_values(values: Mapping[str, Any], run_dir: str | Path) -> dict[str, Any]:
    """``values`` as ``thub_run.json`` stores them (redacted); this process keeps the real ones
    for ``run_dir`` so that :func:`child_environment` and :func:`real_values` can restore them."""
    shown = {name: redact(value, name) for name, value in values.items()}
    secrets = {name: values[name] for name in values if shown[name] != values[name]}
    if secrets:
        _KEPT[_key(run_dir)] = secrets
    else:
        _KEPT.pop(_key(run_dir), None)
    return shown


def child_environment(run_dir: str | Path, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variable that carries ``run_dir``'s redacted parameters to a child process (or to a
    SLURM job through ``sbatch``): ``{}`` when it has none. An inherited value is passed on."""
    environ = os.environ if environ is None else environ
    secrets = _KEPT.get(_key(run_dir))
    if secrets:
        return {SECRETS_ENV: json.dumps(secrets)}
    return {SECRETS_ENV: environ[SECRETS_ENV]} if SECRETS_ENV in environ else {}


def real_values(values: Mapping[str, Any], run_dir: str | Path | None = None,
                environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The parameters of ``thub_run.json`` with their redacted values restored: from this
    process (it wrote the record) or from :data:`SECRETS_ENV`. A value is restored only where
    the record holds exactly its redaction, so a stale or foreign variable changes nothing."""
    environ = os.environ if environ is None else environ
    secrets = _KEPT.get(_key(run_dir)) if run_dir is not None else None
    if secrets is None:
        try:
            secrets = json.loads(environ.get(SECRETS_ENV) or "{}")
        except json.JSONDecodeError:
            secrets = {}
    restored = dict(values)
    for name, real in (secrets if isinstance(secrets, dict) else {}).items():
        if name in restored and restored[name] == redact(real, name):
            restored[name] = real
    return restored


# --- the child's output (logs/train.log) ---------------------------------------------------------

#: Shorter values are not searched for in output: "1" or "true" would redact half the log.
MIN_LITERAL = 8


def output_secrets(environ: Mapping[str, str] | None = None) -> list[str]:
    """The literal secret values a run's output must not show, longest first: the redacted
    parameters the child receives (:data:`SECRETS_ENV`, where the whole value is the secret) and
    the values of secret-named environment variables (``HF_TOKEN``, ``WANDB_API_KEY``)."""
    environ = os.environ if environ is None else environ
    found = {value for name, value in environ.items() if name != SECRETS_ENV and is_secret_name(name, loose=True)}
    try:
        secrets = json.loads(environ.get(SECRETS_ENV) or "{}")
    except json.JSONDecodeError:
        secrets = {}
    for name, value in (secrets if isinstance(secrets, dict) else {}).items():
        if isinstance(value, str) and redact(value, name) == REDACTED:
            found.add(value)
    return sorted((v for v in found if len(v) >= MIN_LITERAL), key=len, reverse=True)


def redact_output(text: str, literals: list[str]) -> str:
    """A piece of a program's output fit for a log: :func:`redact_text`, and each of ``literals``
    (:func:`output_secrets`) replaced wherever it appears."""
    for literal in literals:
        if literal in text:
            text = text.replace(literal, REDACTED)
    return redact_text(text)
