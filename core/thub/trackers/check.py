"""Tracker problems found before a launch: a missing package, an unusable log directory or store,
an unreachable MLflow server, W&B online without an API key.

``thub train`` calls :func:`validate` after resolving (a problem is a usage error, exit 2, with the
fix; nothing is written), and ``thub doctor`` runs :func:`check` as ``core.trackers`` (on a run's
config file with ``--config``: the same :func:`problems`). A package
is looked for where the tracker is logged: in the backend's interpreter when its library logs
(a managed environment: that interpreter, in a subprocess), in thub's own when thub logs from the
parent. Nothing is imported here: packages are found with ``importlib.util.find_spec``.
"""

from __future__ import annotations

import base64
import netrc
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from thub.trackers import BY_NAME, TRACKER_PARAMS, TRACKERS, Tracker, enabled, route

if TYPE_CHECKING:
    from thub.config.resolve import ResolvedConfig
    from thub.specs import BackendSpec, CheckContext, CheckResult

HTTP_TIMEOUT = 5.0
_OFF = {"offline", "disabled", "dryrun"}


@dataclass(frozen=True)
class Problem:
    """One reason a tracker would fail, and the fix."""

    tracker: str
    summary: str
    fix: str


def _python(backend: BackendSpec | None, where: str) -> str | None:
    """The interpreter whose packages log the tracker (None: this one)."""
    return backend.python if backend is not None and where == "library" and backend.python else None


def _find(module: str, python: str | None) -> str | None:
    """The file of ``module`` (its ``__init__``) in ``python``'s environment, or None (the one
    check of another interpreter's modules: :func:`thub.selection.module_origin`)."""
    from thub.selection import module_origin

    return module_origin(module, python, timeout=20)


def _pip(python: str | None, install: str) -> str:
    return install if python is None else install.replace("pip install", f"{python} -m pip install", 1)


def _writable_dir(path: Path) -> str | None:
    """Why ``path`` cannot be a directory we write to, or None when it can (created or not)."""
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is not a directory"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} is not writable"
    return None


def _mlflow_problems(uri: str, python: str | None, environ: Mapping[str, str]) -> list[Problem]:
    parsed = urllib.parse.urlparse(uri)
    scheme = parsed.scheme.lower()
    if scheme in ("", "file"):
        path = Path(urllib.request.url2pathname(parsed.path) if scheme else uri).expanduser()
        why = _writable_dir(path)
        if why:
            return [Problem("mlflow", f"MLflow store {uri}: {why}", "choose a writable mlflow_tracking_uri")]
        origin = _find("mlflow", python)
        gated = False
        if origin and origin != "namespace":
            variables = Path(origin).parent / "environment_variables.py"
            gated = variables.is_file() and "MLFLOW_ALLOW_FILE_STORE" in variables.read_text(errors="replace")
        allowed = environ.get("MLFLOW_ALLOW_FILE_STORE", "").lower() in ("1", "true", "yes")
        if gated and not allowed:
            return [Problem(
                "mlflow", f"MLflow store {uri}: this MLflow refuses a file store unless MLFLOW_ALLOW_FILE_STORE=true",
                f"use a SQLite store: mlflow_tracking_uri: sqlite:///{(path.parent / 'mlflow.db').resolve()}\n"
                "# or keep the file store: export MLFLOW_ALLOW_FILE_STORE=true")]
        return []
    if scheme == "sqlite":
        location = parsed.path[1:] if parsed.path.startswith("/") else parsed.path
        problems = []
        if location and location != ":memory:":
            why = _writable_dir(Path(location).expanduser().parent)
            if why:
                problems.append(Problem("mlflow", f"MLflow store {uri}: {why}", "choose a writable sqlite:/// path"))
        missing = [m for m in ("sqlalchemy", "alembic") if _find(m, python) is None]
        if missing:
            problems.append(Problem("mlflow", f"MLflow store {uri} needs {' and '.join(missing)} (SQL stores)",
                                    _pip(python, "pip install " + " ".join(missing))))
        return problems
    if scheme in ("http", "https"):
        return _http_problems(uri, parsed, environ)
    return []  # databricks, uc, ...: reached with the platform's own credentials


def _http_problems(uri: str, parsed: urllib.parse.ParseResult, environ: Mapping[str, str]) -> list[Problem]:
    """Whether the MLflow server answers ``/health``. Credentials in the URI (``user:pw@host``)
    are sent as HTTP basic auth, as MLflow's client sends them (``requests`` takes them from the
    URL), else ``MLFLOW_TRACKING_USERNAME``/``PASSWORD``; they are never part of the host name."""
    from thub.redact import redact_text

    shown = redact_text(uri)
    host = parsed.hostname or ""
    netloc = (f"[{host}]" if ":" in host else host) + (f":{parsed.port}" if parsed.port else "")
    plain = urllib.parse.urlunparse(parsed._replace(netloc=netloc, query="", fragment=""))
    request = urllib.request.Request(plain.rstrip("/") + "/health")
    if parsed.username is not None:
        user, password = urllib.parse.unquote(parsed.username), urllib.parse.unquote(parsed.password or "")
    else:
        user, password = environ.get("MLFLOW_TRACKING_USERNAME", ""), environ.get("MLFLOW_TRACKING_PASSWORD", "")
    sent = bool(user or password)
    if sent:
        request.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
    try:
        urllib.request.urlopen(request, timeout=HTTP_TIMEOUT).close()
    except urllib.error.HTTPError as exc:
        if sent and exc.code in (401, 403):
            return [Problem("mlflow", f"MLflow server {shown} refused the credentials (HTTP {exc.code})",
                            "fix the user and password in mlflow_tracking_uri (or MLFLOW_TRACKING_USERNAME/"
                            "MLFLOW_TRACKING_PASSWORD)")]
        # it answered: reachable (without credentials, authentication is the server's business)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = redact_text(str(getattr(exc, "reason", exc)))
        return [Problem("mlflow", f"MLflow server {shown} is unreachable: {reason}",
                        "start it (mlflow server --host 0.0.0.0 --port 5000) or fix mlflow_tracking_uri")]
    return []


def _wandb_key(environ: Mapping[str, str]) -> bool:
    if environ.get("WANDB_API_KEY"):
        return True
    host = urllib.parse.urlparse(environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname or ""
    path = environ.get("NETRC") or os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".netrc")
    try:
        return netrc.netrc(path).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def problems(params: Mapping[str, Any], backend: BackendSpec | None, algorithm: str | None,
             environ: Mapping[str, str] | None = None) -> list[Problem]:
    """Everything that would make an enabled tracker fail for a run with ``params``."""
    environ = os.environ if environ is None else environ
    found: list[Problem] = []
    for tracker in enabled(params):
        where = _where(backend, algorithm, tracker)
        python = _python(backend, where)
        if _find(tracker.module, python) is None:
            place = f"the {backend.name} environment ({python})" if python and backend else "this environment"
            found.append(Problem(tracker.name, f"{tracker.title} is on ({tracker.key}) but the {tracker.module} "
                                 f"package is not installed in {place}", _pip(python, tracker.install)))
            continue
        if tracker.name == "tensorboard":
            why = _writable_dir(Path(str(params["tensorboard_log_dir"])).expanduser())
            if why:
                found.append(Problem("tensorboard", f"tensorboard_log_dir: {why}", "choose a writable directory"))
        elif tracker.name == "mlflow":
            found.extend(_mlflow_problems(str(params["mlflow_tracking_uri"]), python, environ))
        elif environ.get("WANDB_MODE", "").lower() not in _OFF and not _wandb_key(environ):
            found.append(Problem("wandb", "W&B would log online, but no API key is set (WANDB_API_KEY or ~/.netrc)",
                                 "wandb login   # or: export WANDB_API_KEY=...\n"
                                 "# or log locally without an account: export WANDB_MODE=offline"))
    return found


def _where(backend: BackendSpec | None, algorithm: str | None, tracker: Tracker) -> str:
    if backend is None:
        return "thub"
    if algorithm is not None:
        return route(backend, algorithm, tracker)
    return "library" if any(route(backend, a, tracker) == "library" for a in backend.algorithms) else "thub"


def validate(resolved: ResolvedConfig) -> None:
    """Refuse a launch whose trackers would fail (UsageError, exit 2), naming each fix."""
    from thub.errors import UsageError

    found = problems(resolved.values(), resolved.backend, resolved.algorithm.name)
    if found:
        lines = []
        for problem in found:
            lines.append(f"  {problem.summary}")
            lines.extend(f"    fix: {line}" if i == 0 else f"         {line}"
                         for i, line in enumerate(problem.fix.splitlines()))
        raise UsageError("experiment tracker not ready (details: `thub doctor --backend "
                         f"{resolved.backend.name} core.trackers`):\n" + "\n".join(lines))


def env_params(environ: Mapping[str, str]) -> dict[str, str]:
    """Tracker parameters set as ``THUB_<NAME>`` variables (what ``thub doctor`` can see)."""
    return {name: environ[f"THUB_{name.upper()}"] for name in sorted(TRACKER_PARAMS)
            if environ.get(f"THUB_{name.upper()}")}


def _config_params(context: CheckContext, backend: BackendSpec | None
                   ) -> tuple[dict[str, Any], BackendSpec | None, str | None]:
    """The parameters of ``thub doctor --config FILE``, its backend and algorithm: resolved as
    ``thub train`` resolves them when the file names its algorithm, else the file's tracker
    parameters over ``THUB_*`` variables (the routes then hold for every algorithm of the backend)."""
    from thub.config.resolve import read_config_file, resolve
    from thub.errors import UsageError
    from thub.manager import get_registry

    assert context.config is not None
    values = read_config_file(context.config).values
    if values.get("algorithm"):
        try:
            resolved = resolve(get_registry(), str(values["algorithm"]), backend=context.backend,
                               config_file=context.config, environ=context.env)
            return resolved.values(), resolved.backend, resolved.algorithm.name
        except UsageError:
            pass  # another parameter is wrong (`thub train` names it); the trackers are still checked
    params = {**env_params(context.env), **{k: v for k, v in values.items() if k in TRACKER_PARAMS and v}}
    params["ckpt_output_dir"] = str(values.get("ckpt_output_dir") or context.output_dir or ".")
    return params, backend, None


def check(context: CheckContext) -> CheckResult:
    """``core.trackers``: the tracker packages here and whether the trackers a run turns on would
    work, with the same checks as ``thub train``: those of the config file (``thub doctor
    --config FILE``), else those turned on by ``THUB_*`` variables."""
    from thub.selection import installed_version
    from thub.specs import CheckResult

    backend = None
    if context.backend:
        from thub.manager import get_registry

        backend = get_registry().backends.get(context.backend)
    algorithm = None
    if context.config:
        params, backend, algorithm = _config_params(context, backend)
    else:
        params = {**env_params(context.env), "ckpt_output_dir": context.output_dir or "."}
    details = []
    for tracker in TRACKERS:
        where = _where(backend, algorithm, tracker)
        python = _python(backend, where)
        version = next((f"{d} {v}" for d in tracker.distributions if (v := installed_version(d))), None)
        state = (f"{version}" if version else "not installed") if python is None else (
            "installed" if _find(tracker.module, python) else "not installed") + f" in {python}"
        via = f"{backend.name}'s library" if backend and where == "library" else "thub (parent process)"
        details.append(f"{tracker.title}: {state}; logged by {via}")
    found = problems(params, backend, algorithm, context.env)
    if found:
        return CheckResult("fail", "; ".join(p.summary for p in found), tuple(details),
                           fix="\n".join(p.fix for p in found), docs="docs/trackers.md")
    on = [BY_NAME[t.name].title for t in enabled(params)]
    source = "the config file" if context.config else "THUB_* variables"
    summary = f"{', '.join(on)} ready" if on else f"no tracker turned on by {source}"
    return CheckResult("ok", summary, tuple(details))
