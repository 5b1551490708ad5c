"""Reading a user's YAML file safely: a size limit before parsing, repeated keys and alias bombs
refused, and errors that carry the file and line. Used for ``--config`` files and cluster profile files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from thub.errors import UsageError

#: Files larger than this are refused before the YAML parser sees them (a parameter or cluster
#: file is a few kB; PyYAML needs seconds and much memory for megabytes).
MAX_YAML_BYTES = 10 * 1024 * 1024


#: The most values a file may expand to through its aliases (``&a`` ... ``*a``): a few aliases
#: are fine, but nine levels of nine make 387 million values from 400 bytes (a YAML "billion
#: laughs"), which a dry run would print and every layer would copy.
MAX_YAML_VALUES = 1_000_000
#: The deepest a file's mappings and sequences may nest (a parameter file needs a handful of
#: levels; PyYAML's parser recurses per level and fails with a RecursionError near 300).
MAX_YAML_NESTING = 100
_OPEN = (yaml.BlockMappingStartToken, yaml.BlockSequenceStartToken, yaml.FlowMappingStartToken,
         yaml.FlowSequenceStartToken)
_CLOSE = (yaml.BlockEndToken, yaml.FlowMappingEndToken, yaml.FlowSequenceEndToken)


def _children(node: yaml.Node) -> list[yaml.Node]:
    """The nodes directly under ``node`` (a mapping's keys and values, a sequence's items)."""
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _repeated_key(node: yaml.Node) -> tuple[str, int, int] | None:
    """A key repeated in the mapping ``node`` itself: (key, first line, repeated line)."""
    seen: dict[str, int] = {}
    for key, _value in node.value if isinstance(node, yaml.MappingNode) else ():
        if isinstance(key, yaml.ScalarNode):
            line = key.start_mark.line + 1
            if key.value in seen:
                return key.value, seen[key.value], line
            seen[key.value] = line
    return None


def check_tree(root: yaml.Node, where: str, what: str = "config file") -> None:
    """Refuse a repeated key in any mapping under ``root`` (PyYAML keeps the last value silently;
    a repeated key is almost always an edit mistake), a recursive alias, a tree whose aliases
    expand it to more than :data:`MAX_YAML_VALUES` values, and one nested deeper than
    :data:`MAX_YAML_NESTING`.

    One walk, without recursion, that visits each node once, however many aliases point at it
    (the expanded size of a node is memoised). ``where`` names the file in the errors.
    """
    expanded: dict[int, int] = {}  # node id -> values it expands to (itself included)
    on_path: set[int] = set()  # the nodes being expanded: meeting one again is a loop
    stack: list[tuple[yaml.Node, list[yaml.Node] | None, int]] = [(root, None, 1)]
    while stack:
        node, kids, depth = stack.pop()
        key = id(node)
        if kids is not None:  # every child is done: this node's size is known
            on_path.discard(key)
            size = expanded[key] = 1 + sum(expanded[id(kid)] for kid in kids)
            if size > MAX_YAML_VALUES:
                raise UsageError(f"{where}:{node.start_mark.line + 1}: aliases expand this {what} to more than "
                                 f"{MAX_YAML_VALUES:,} values (a YAML alias bomb?); write the values out")
            continue
        if key in expanded:
            continue  # another alias of a node already walked
        if key in on_path:
            raise UsageError(f"{where}:{node.start_mark.line + 1}: a recursive alias (the value contains "
                             "itself); write the value out")
        repeated = _repeated_key(node)
        if repeated:
            name, first, again = repeated
            raise UsageError(f"{where}:{again}: duplicate key {name!r} (first at line {first}); keep one")
        children = _children(node)
        if children and depth >= MAX_YAML_NESTING:
            raise UsageError(_too_deep(where, node.start_mark.line + 1))
        on_path.add(key)
        stack.append((node, children, depth))
        stack.extend((kid, None, depth + 1) for kid in reversed(children))  # document order: the first problem first


def _too_deep(where: str, line: int) -> str:
    return f"{where}:{line}: nested too deeply (more than {MAX_YAML_NESTING} levels of mappings and sequences)"


def _nesting_line(text: str) -> int:
    """The line where ``text`` first nests deeper than :data:`MAX_YAML_NESTING`, found with
    PyYAML's scanner (which does not recurse), for a file its parser could not follow."""
    depth, deepest, line = 0, 0, 1
    for token in yaml.scan(text, Loader=yaml.SafeLoader):
        if isinstance(token, _OPEN):
            depth += 1
            if depth > deepest:
                deepest, line = depth, token.start_mark.line + 1
            if depth > MAX_YAML_NESTING:
                break
        elif isinstance(token, _CLOSE):
            depth -= 1
    return line


def load_yaml(path: str | Path, what: str = "config file") -> tuple[Any, yaml.Node | None]:
    """``(value, node)`` of the YAML file at ``path`` (``node``: its composed tree, for lines).

    Raises :class:`UsageError` (exit 2) naming the file (and line): unreadable, over
    :data:`MAX_YAML_BYTES`, not UTF-8, invalid YAML, a key repeated in a mapping, a
    recursive alias, aliases that expand it past :data:`MAX_YAML_VALUES` or nesting deeper than
    :data:`MAX_YAML_NESTING` (:func:`check_tree`).
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
            if node is not None:
                check_tree(node, str(path), what)  # before any value is built from it
            return (loader.construct_document(node) if node is not None else None), node
        finally:
            loader.dispose()
    except RecursionError:
        raise UsageError(_too_deep(str(path), _nesting_line(text))) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        raise UsageError(f"{path}{line}: invalid YAML: {getattr(exc, 'problem', exc)}") from None
