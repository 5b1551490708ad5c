"""Reading a user's YAML file safely: a size limit before parsing, repeated keys refused, and
errors that carry the file and line. Used for ``--config`` files and cluster profile files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from thub.errors import UsageError

#: Files larger than this are refused before the YAML parser sees them (a parameter or cluster
#: file is a few kB; PyYAML needs seconds and much memory for megabytes).
MAX_YAML_BYTES = 10 * 1024 * 1024


def duplicate_key(node: yaml.Node) -> tuple[str, int, int] | None:
    """The first key repeated in any mapping under ``node``: (key, first line, repeated line).

    PyYAML keeps the last value silently; a repeated key is almost always an edit mistake.
    """
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                line = key.start_mark.line + 1
                if key.value in seen:
                    return key.value, seen[key.value], line
                seen[key.value] = line
            found = duplicate_key(value)
            if found:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            found = duplicate_key(item)
            if found:
                return found
    return None


def load_yaml(path: str | Path, what: str = "config file") -> tuple[Any, yaml.Node | None]:
    """``(value, node)`` of the YAML file at ``path`` (``node``: its composed tree, for lines).

    Raises :class:`UsageError` (exit 2) naming the file (and line): unreadable, over
    :data:`MAX_YAML_BYTES`, not UTF-8, invalid YAML, or a key repeated in a mapping.
    """
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_YAML_BYTES:
            raise UsageError(f"{path}: {what} is {size / 1e6:.1f} MB; the limit is "
                             f"{MAX_YAML_BYTES // (1024 * 1024)} MB (a {what} is a few kB)")
        text = path.read_text()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read {what}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: cannot read {what}: not UTF-8 text ({exc.reason})") from None
    try:
        loader = yaml.SafeLoader(text)  # parsed once: the tree (for lines and keys), then its values
        try:
            node = loader.get_single_node()
            duplicate = duplicate_key(node) if node is not None else None
            if duplicate:
                key, first, again = duplicate
                raise UsageError(f"{path}:{again}: duplicate key {key!r} (first at line {first}); keep one")
            return (loader.construct_document(node) if node is not None else None), node
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        raise UsageError(f"{path}{line}: invalid YAML: {getattr(exc, 'problem', exc)}") from None
