"""What ``thub checkpoint push`` sends from a model folder, and what it leaves out (each named with why).

Left out (:func:`collect`):

- a symbolic link whose target resolves outside the folder, to a file or to a folder (never followed: a
  link ``notes.txt -> /etc/shadow`` would otherwise be published byte for byte), a broken link, and a link
  to a folder inside it (not walked: its files are sent from where they are); a link to a file inside the
  folder is sent as that file;
- what is not a regular file (a FIFO would block the read, a device is no model file);
- the trainer's resume state (:func:`thub.checkpoint.export.is_training_state`), hidden folders;
- any file that looks like a secret (:func:`secret_finding`): a credentials file by its name, or by its
  content: a private key (PEM, OpenSSH, PGP, PuTTY: a ``deploy_key`` with no suffix, a key in the middle
  of a notes file), a known token shape (Hugging Face, AWS key ids, GitHub, Google API keys, OpenAI-style,
  Slack), the value of a secret environment variable, URI credentials or a secret query value, a
  credential-like value under a secret name (``aws_secret_access_key = ...``); judged with
  :mod:`thub.redact`. The reason names the line, never the value;
- ``README.md`` and the loss plot, replaced by thub's card.

The transports read only the files collected, each through :func:`sendable` (the file as resolved when it
is sent, refused if a link was swapped to point outside since), or through :func:`staged` (a temporary
folder of links to those files beside the generated ones): none walks the folder itself.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from thub.errors import ThubError
from thub.redact import is_secret_name, output_secrets, redact_text

#: file names that hold credentials whatever their content
SECRET_FILES = frozenset({".env", ".netrc", ".git-credentials", "credentials", "credentials.json", ".pypirc",
                          ".npmrc", "id_rsa", "id_dsa", "id_ed25519", "id_ecdsa", ".htpasswd"})
SECRET_SUFFIXES = (".pem", ".key", ".p12", ".pfx", ".keytab", ".ppk", ".jks", ".keystore")
#: weight/binary files: never read for secrets (their bytes are numbers)
BINARY_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".model", ".npy", ".npz", ".msgpack", ".h5",
                   ".ckpt", ".distcp", ".png", ".jpg", ".onnx")
#: token shapes of well-known services: Hugging Face, AWS access key ids (long-term AKIA, temporary ASIA),
#: GitHub (classic ghp_/gho_/ghu_/ghs_/ghr_, fine-grained github_pat_), Google API keys, OpenAI-style, Slack
TOKEN_SHAPES = re.compile(r"\b(hf_[A-Za-z0-9]{30,}|(?:AKIA|ASIA)[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{30,}|"
                          r"github_pat_[A-Za-z0-9_]{40,}|AIza[0-9A-Za-z_-]{35}|"
                          r"sk-[A-Za-z0-9_-]{20,}|xox[abprs]-[A-Za-z0-9-]{10,})\b")
#: the first line of a private key: PEM (PKCS#1 ``RSA``/``EC``/``DSA``, PKCS#8, ``ENCRYPTED``), OpenSSH,
#: PGP (``PRIVATE KEY BLOCK``), PuTTY; also inside JSON (a GCP service account's ``"private_key"``)
PRIVATE_KEY = re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|PuTTY-User-Key-File-\d+:")
# NAME = VALUE, NAME: VALUE, "NAME": "VALUE" with a credential-like value (not "<pad>", "<|im_end|>")
_ASSIGNMENT = re.compile(r"""["']?([A-Za-z_][A-Za-z0-9_.-]*)["']?\s*[:=]\s*["']?([A-Za-z0-9_\-+/=.]{8,})""")
#: a file is read this many bytes at a time; a "line" longer than :data:`LONG_LINE` is checked in pieces
#: that overlap by :data:`OVERLAP` (a token across a cut is still seen whole)
BLOCK = 1 << 20
LONG_LINE = 4 << 20
OVERLAP = 4096
#: a tokenizer's vocabulary: any string can be a token (``?token=``, ``://user@``), so only secret values
#: themselves (an environment secret's value, a known token shape, a private key) count there, never names
VOCABULARY_FILES = frozenset({"tokenizer.json", "vocab.json", "vocab.txt", "merges.txt", "added_tokens.json"})


def _lines(path: Path) -> Iterator[bytes]:
    """The lines of ``path`` as bytes, read a block at a time (a file of any size in bounded memory)."""
    with path.open("rb") as handle:
        pending = b""
        while block := handle.read(BLOCK):
            pending += block
            *lines, pending = pending.split(b"\n")
            yield from lines
            while len(pending) > LONG_LINE:  # no newline in sight: check it in overlapping pieces
                yield pending[:LONG_LINE]
                pending = pending[LONG_LINE - OVERLAP:]
        if pending:
            yield pending


def _line_finding(line: str, literals: list[str], names: bool) -> str | None:
    """What secret ``line`` holds (never the value), or None; ``names``: judge secret-named values too."""
    if any(literal in line for literal in literals):
        return "the value of a secret environment variable"
    if PRIVATE_KEY.search(line):
        return "a private key"
    if TOKEN_SHAPES.search(line):
        return "an access token"
    if not names:
        return None
    if redact_text(line) != line:
        return "URI credentials or a secret query value"
    for match in _ASSIGNMENT.finditer(line):
        value = match.group(2)
        if is_secret_name(match.group(1)) and re.search(r"\d", value) and re.search(r"[A-Za-z]", value):
            return f"a value named {match.group(1)}"
    return None


def secret_finding(path: Path, literals: list[str] | None = None) -> str | None:
    """Why ``path`` must not be uploaded as a secret (never the value itself), or None.

    A text file is read line by line, whatever its size. A file that is not UTF-8 is still read for
    secret values, private keys and token shapes (a key in a file with one Latin-1 byte is a key), but
    not for secret-named values, which binary bytes can imitate."""
    name = path.name.lower()
    if name in SECRET_FILES or name.startswith(".env") or name.endswith(SECRET_SUFFIXES):
        return f"a credentials file by its name ({path.name})"
    if name.endswith(BINARY_SUFFIXES):
        return None
    literals = output_secrets() if literals is None else literals
    names = name not in VOCABULARY_FILES
    try:
        for number, raw in enumerate(_lines(path), 1):
            try:
                line = raw.decode("utf-8")
                judged = names
            except UnicodeDecodeError:
                line, judged = raw.decode("latin-1"), False
            found = _line_finding(line, literals, judged)
            if found:
                return f"line {number} holds {found}"
    except OSError:
        return None  # unreadable here: nothing of it can be sent either (the upload reads it the same way)
    return None


def _inside(target: Path, root: Path) -> bool:
    return target == root or target.is_relative_to(root)


def _entries(folder: Path) -> Iterator[tuple[Path, str]]:
    """Every entry under ``folder`` with its relative POSIX path, links not followed and hidden folders not
    entered (tool state such as ``.cache/huggingface`` or ``.git``, not the model)."""
    for directory, folders, files in os.walk(folder, followlinks=False):
        base = Path(directory)
        for name in [n for n in folders if n.startswith(".")]:
            folders.remove(name)
        # os.walk lists a link to a folder among the folders (not entered without followlinks): name it
        for name in [*[n for n in folders if (base / n).is_symlink()], *files]:
            yield base / name, (base / name).relative_to(folder).as_posix()


def _link_finding(path: Path, root: Path, folder: Path) -> str | None:
    """Why the link ``path`` is not sent (never followed out of ``root``), or None: it is a file inside."""
    target = Path(os.path.realpath(path))
    if not target.exists():
        return f"a broken symbolic link (to {os.readlink(path)}): nothing to send"
    kind = "folder" if target.is_dir() else "file"
    if not _inside(target, root):
        return f"a symbolic link to a {kind} outside {folder} ({target}): not followed"
    if target.is_dir():
        return "a symbolic link to a folder inside it: not walked (its files are sent from where they are)"
    return None


def collect(folder: Path) -> tuple[list[str], list[dict[str, str]]]:
    """The files under ``folder`` to send (relative POSIX paths, sorted) and those left out, each with why."""
    from thub.checkpoint.card import PLOT_NAME
    from thub.checkpoint.export import is_training_state

    root = folder.resolve()
    literals = output_secrets()
    send: list[str] = []
    skipped: list[dict[str, str]] = []
    for path, rel in sorted(_entries(folder), key=lambda entry: entry[1]):
        why = _link_finding(path, root, folder) if path.is_symlink() else None
        if why is None and not path.is_file():
            why = "not a regular file (a FIFO, socket or device): not read"
        if why is None and is_training_state(path.name):
            why = "training state (optimizer, scheduler, RNG or trainer state): not needed to serve the model"
        if why is None:
            secret = secret_finding(path, literals)
            why = f"looks like a secret: {secret}" if secret else None
        if why is None and rel in ("README.md", PLOT_NAME):
            why = "replaced by thub's model card"
        if why is None:
            send.append(rel)
        else:
            skipped.append({"path": rel, "why": why})
    return send, skipped


def sendable(folder: Path, rel: str) -> Path:
    """The real path of the collected file ``rel`` of ``folder``, resolved now: the transports read this,
    never ``folder / rel`` itself. A ThubError when it no longer resolves to a regular file inside
    ``folder`` (a link swapped since :func:`collect`): nothing of it is sent."""
    real = Path(os.path.realpath(folder / rel))
    if not _inside(real, folder.resolve()) or not real.is_file():
        what = "not a regular file" if _inside(real, folder.resolve()) else f"outside {folder}"
        raise ThubError(f"{folder / rel}: changed since it was checked: it now resolves to {real}, {what}; "
                        "not sent")
    return real


@contextmanager
def staged(folder: Path, files: list[dict[str, Any]], extras: dict[str, bytes]) -> Iterator[Path]:
    """A temporary folder holding exactly what is sent: a link to each collected file (:func:`sendable`,
    nothing copied) at its path, and ``extras`` (the card) written beside them; for the transports that
    send a folder whole (huggingface_hub's upload_folder, MLflow's log_artifacts). ``folder`` is not written
    into."""
    with tempfile.TemporaryDirectory(prefix="thub-push-") as scratch:
        staging = Path(scratch)
        for entry in files:
            (staging / entry["path"]).parent.mkdir(parents=True, exist_ok=True)
            (staging / entry["path"]).symlink_to(sendable(folder, entry["path"]))
        for name, data in extras.items():
            (staging / name).write_bytes(data)
        yield staging


def copy_local(source: Path, destination: Path) -> None:
    """Copy ``source`` to the new file ``destination`` (a file:// push): written with the usual mode (0666
    less the umask), but no wider for group or others than the source lets them read (a private file stays
    private)."""
    mode = 0o666
    source_mode = source.stat().st_mode
    if not source_mode & stat.S_IRGRP:
        mode &= ~0o070
    if not source_mode & stat.S_IROTH:
        mode &= ~0o007
    with source.open("rb") as handle, _create(destination, mode) as out:
        shutil.copyfileobj(handle, out, BLOCK)


def write_new(destination: Path, data: bytes) -> None:
    """Write ``data`` to the new file ``destination`` with the usual mode (0666 less the umask)."""
    with _create(destination, 0o666) as out:
        out.write(data)


def _create(destination: Path, mode: int) -> BinaryIO:
    # O_EXCL: never through a link planted at the target, never over a file already there
    fd = os.open(destination, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), mode)
    return os.fdopen(fd, "wb")
