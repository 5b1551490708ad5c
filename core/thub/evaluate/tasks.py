"""``--tasks T1,T2``: each a harness's named task or a local task file the evaluator reads."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from thub.errors import UsageError, did_you_mean_path
from thub.evaluate import EvalTask

#: what a named task may be called: results are filed as RUN_DIR/eval/<name>.json
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


def _looks_like_a_path(value: str, task_files: tuple[str, ...]) -> bool:
    return (os.sep in value or "/" in value or value.startswith(("~", "."))
            or any(value.endswith(suffix) for suffix in task_files))


def split(values: str | Iterable[str]) -> list[str]:
    """``"a,b"`` or ``["a", "b,c"]`` -> ``["a", "b", "c"]`` (blanks dropped, order kept, each once)."""
    items = [values] if isinstance(values, str) else list(values)
    names = [part.strip() for item in items for part in item.split(",")]
    return list(dict.fromkeys(name for name in names if name))


def resolve_tasks(values: str | Iterable[str], task_files: tuple[str, ...]) -> tuple[EvalTask, ...]:
    """The :class:`EvalTask` s of ``--tasks``. A file with one of ``task_files``' suffixes is a local
    task (named by its stem, its absolute path); anything else that names no file is the harness's
    task. Raises UsageError (exit 2) for a missing file that looks like a path, a file the
    evaluator does not read, or two tasks filed under one name."""
    names = split(values)
    if not names:
        raise UsageError("--tasks: give at least one task (a harness task name or a local task file)")
    tasks: list[EvalTask] = []
    for value in names:
        path = Path(os.path.expanduser(value))
        if path.is_file():
            if path.suffix not in task_files:
                raise UsageError(f"--tasks {value}: a {path.suffix or 'suffix-less'} file is no task file this "
                                 f"evaluator reads (it reads {', '.join(task_files)})")
            tasks.append(EvalTask(name=path.stem, path=str(path.resolve())))
        elif path.is_dir():
            raise UsageError(f"--tasks {value}: a folder, not a task file ({', '.join(task_files)})")
        elif _looks_like_a_path(value, task_files):
            raise UsageError(f"--tasks {value}: no such task file{did_you_mean_path(value)}")
        elif not _NAME.match(value):
            raise UsageError(f"--tasks {value!r}: not a task name (letters, digits, '_', '-', '.') nor a task file")
        else:
            tasks.append(EvalTask(name=value))
    seen: dict[str, EvalTask] = {}
    for task in tasks:
        if task.name in seen:
            raise UsageError(f"--tasks: {seen[task.name].path or task.name} and {task.path or task.name} would both "
                             f"be filed as {task.name}.json: rename one")
        seen[task.name] = task
    return tuple(tasks)
