"""The one loader of YAML/JSON document files (``schedctl job create|apply -f``, ``dag apply -f``).

A file may come from anyone, so reading it is bounded in every dimension before any of it is
used, and every way it can be wrong ends in one ``DocumentError`` with a one-line message:

- size: at most ``Limits.max_bytes`` are read (default 64 MiB; ``$SCHEDCTL_MAX_FILE_BYTES`` or
  ``schedctl ... --max-file-size``), so a huge file or an endless stdin cannot fill memory;
- text: the bytes must be UTF-8 (a BOM is allowed); the message names the first bad byte;
- nesting: at most ``max_depth`` levels of lists and mappings (deeper input used to exhaust the
  parser's recursion);
- nodes: at most ``max_nodes`` values, counting each alias as the nodes it stands for, so a
  "billion laughs" file of a few hundred bytes is refused while it is parsed instead of growing
  without bound later; an alias to a node that contains it (a cycle) is refused too;
- values PyYAML cannot build (a 5,000-digit integer, a 13th month) are errors, not tracebacks.

Documents come back flattened and labelled for messages: one document, a list of them, or several
YAML documents in one file. Turning each into a job or DAG is the caller's (``build_all``).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.events import AliasEvent, MappingStartEvent, SequenceStartEvent

from .errors import ValidationError, brief, clip

__all__ = ["DocumentError", "Limits", "MAX_BYTES_ENV", "parse_size", "read_input", "load_documents",
           "build_all"]

MAX_BYTES_ENV = "SCHEDCTL_MAX_FILE_BYTES"
DEFAULT_MAX_BYTES = 64 << 20

T = TypeVar("T")


class DocumentError(ValidationError):
    """A document file that cannot be used: unreadable, too large, not UTF-8, not YAML/JSON, over
    a nesting or alias limit, or holding a document that is not a valid job/DAG. The message is
    one line that starts with where the problem is."""


@dataclass(slots=True, frozen=True)
class Limits:
    """Bounds on one input file. The defaults fit any sensible job file (50,000 jobs of 20 keys)."""

    max_bytes: int = DEFAULT_MAX_BYTES
    max_depth: int = 64
    max_nodes: int = 1_000_000

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Limits:
        """The defaults, with ``max_bytes`` from ``$SCHEDCTL_MAX_FILE_BYTES`` when it is set."""
        text = (os.environ if environ is None else environ).get(MAX_BYTES_ENV, "").strip()
        if not text:
            return cls()
        try:
            return cls(max_bytes=parse_size(text))
        except ValueError as err:
            raise DocumentError(f"${MAX_BYTES_ENV}: {err}") from None


_SIZE = re.compile(r"(\d{1,15})\s*(|b|k|kb|kib|m|mb|mib|g|gb|gib)", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_size(text: str) -> int:
    """Bytes from ``"65536"``, ``"512KiB"``, ``"64M"``, ``"1GiB"`` (binary units); ValueError else."""
    match = _SIZE.fullmatch(text.strip())
    if not match or int(match[1]) == 0:
        raise ValueError(f"not a size like 65536, 512KiB or 64MiB: {brief(text)}")
    return int(match[1]) * _SIZE_UNITS[match[2][:1].lower()]


def read_input(path: str, limits: Limits) -> tuple[bytes, str]:
    """The bytes of ``path`` (``"-"``: stdin), refusing more than ``limits.max_bytes``, and the
    name to give the input in messages."""
    where = _where(path)
    try:
        if path == "-":
            stream = getattr(sys.stdin, "buffer", None)
            data = stream.read(limits.max_bytes + 1) if stream is not None else \
                sys.stdin.read(limits.max_bytes + 1).encode("utf-8", "surrogateescape")
        else:
            with Path(path).open("rb") as f:
                data = f.read(limits.max_bytes + 1)
    except OSError as err:
        raise DocumentError(f"cannot read {clip(path)}: {err.strerror or err}") from None
    if len(data) > limits.max_bytes:
        raise DocumentError(
            f"{where}: larger than {limits.max_bytes} bytes; raise the limit with --max-file-size or"
            f" ${MAX_BYTES_ENV} if this file is meant to be that large")
    return data, where


def load_documents(data: bytes, where: str, limits: Limits = Limits()) -> list[tuple[str, Any]]:
    """Every document in ``data`` as (label for messages, value), lists flattened and empty
    documents dropped. Raises ``DocumentError`` for anything that is not bounded YAML/JSON."""
    if len(data) > limits.max_bytes:
        raise DocumentError(f"{where}: larger than {limits.max_bytes} bytes")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise DocumentError(f"{where}: not UTF-8 text (byte 0x{data[err.start]:02x} at offset {err.start});"
                            " save the file as UTF-8") from None
    loader = None
    try:
        loader = _BoundedLoader(text, limits)      # its reader checks every character already
        documents = []
        while loader.check_data():
            documents.append(loader.get_data())
    except _LimitExceeded as err:
        raise DocumentError(f"{where}: {err}") from None
    except yaml.YAMLError as err:
        raise DocumentError(f"{where}: not valid YAML or JSON: {_yaml_problem(err)}") from None
    except (ValueError, ArithmeticError, LookupError, TypeError) as err:
        # a scalar PyYAML resolves but cannot build: 5,000 digits, month 13, an empty "!!int"
        raise DocumentError(f"{where}: not valid YAML or JSON: {clip(' '.join(str(err).split()))}") from None
    finally:
        if loader is not None:
            loader.dispose()
    documents = [doc for doc in documents if doc is not None]
    located: list[tuple[str, Any]] = []
    for n, doc in enumerate(documents, 1):
        label = f"{where}: document {n}" if len(documents) > 1 else where
        if isinstance(doc, list):
            located += [(f"{label}, item {i}", item) for i, item in enumerate(doc, 1)]
        else:
            located.append((label, doc))
    return located


def build_all(located: list[tuple[str, Any]], build: Callable[[Any], T]) -> list[T]:
    """``build`` applied to every document; a ``ValidationError`` comes back as a
    ``DocumentError`` that names the document (``jobs.yaml: document 2: ...``)."""
    out = []
    for label, doc in located:
        try:
            out.append(build(doc))
        except DocumentError:
            raise
        except ValidationError as err:
            raise DocumentError(f"{label}: {err.message}") from None
    return out


def _where(path: str) -> str:
    return "stdin" if path == "-" else clip(path)


_SURROGATE = re.compile("[\ud800-\udfff]")


class _LimitExceeded(Exception):
    """Input over one of the ``Limits`` (turned into a ``DocumentError`` by the caller)."""


_EventParser: Any = None     # libyaml's event parser: a loop over a heap stack, no recursion, ~5x faster
try:
    from yaml._yaml import CParser as _EventParser
except ImportError:   # pragma: no cover - PyYAML built without libyaml
    pass


def _loader_bases() -> tuple[type, ...]:
    """The loader's parts: the composer is always PyYAML's Python one (it is where the bounds
    are counted); the events come from libyaml when PyYAML has it, else from Python."""
    if _EventParser is None:
        return (yaml.SafeLoader,)
    return (yaml.composer.Composer, _EventParser, yaml.constructor.SafeConstructor, yaml.resolver.Resolver)


class _BoundedLoader(*_loader_bases()):  # type: ignore[misc]
    """A safe loader that counts, while composing, how deep the input nests and how many nodes
    it stands for once every alias is expanded; it stops at ``Limits`` instead of recursing or
    handing a structure with billions of shared references to code that walks it. Composing
    stays in Python (``compose_node`` below) even when libyaml parses the events."""

    def __init__(self, text: str, limits: Limits) -> None:
        if _EventParser is None:
            yaml.SafeLoader.__init__(self, text)
        else:
            _EventParser.__init__(self, text)
            yaml.composer.Composer.__init__(self)
            yaml.constructor.SafeConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)
        self.limits = limits
        self.depth = 0
        self.nodes = 0                           # expanded nodes so far, in this file
        self.expanded: dict[int, int] = {}       # id(node) -> its expanded size, once composed
        self.keep: list[yaml.Node | None] = []   # keeps those ids alive and unique

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(AliasEvent):
            event = self.peek_event()
            node = super().compose_node(parent, index)
            size = self.expanded.get(id(node))
            if size is None:
                raise ComposerError(None, None, f"alias *{event.anchor} refers to a node that contains it",
                                    event.start_mark)
            self._count(size, "alias")
            return node
        nesting = self.check_event(SequenceStartEvent, MappingStartEvent)
        if nesting:
            self.depth += 1
            if self.depth > self.limits.max_depth:
                raise _LimitExceeded(f"nested more than {self.limits.max_depth} levels deep{_at(self)}")
        before = self.nodes
        self._count(1, "node")
        node = super().compose_node(parent, index)
        if nesting:
            self.depth -= 1
        self.expanded[id(node)] = self.nodes - before
        self.keep.append(node)
        return node

    def construct_scalar(self, node: yaml.ScalarNode | yaml.MappingNode) -> Any:
        value = super().construct_scalar(node)
        if isinstance(value, str) and _SURROGATE.search(value):   # "\ud800" escapes: not text
            raise ConstructorError(None, None, "a lone UTF-16 surrogate escape is not text", node.start_mark)
        return value

    def _count(self, size: int, what: str) -> None:
        self.nodes += size
        if self.nodes > self.limits.max_nodes:
            cause = ("its aliases expand to" if what == "alias" else "it holds")
            raise _LimitExceeded(f"{cause} more than {self.limits.max_nodes} values (alias expansion is "
                                 f"bounded to refuse 'billion laughs' input){_at(self)}")


def _at(loader: yaml.SafeLoader) -> str:
    try:
        mark = loader.peek_event().start_mark if loader.check_event() else None
    except Exception:  # noqa: BLE001 - a position is a nicety; never fail while reporting
        mark = None
    return f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""


def _yaml_problem(err: yaml.YAMLError) -> str:
    """One line out of PyYAML's multi-line message: what is wrong and where."""
    if isinstance(err, yaml.MarkedYAMLError):
        text = " ".join(p for p in (err.context, err.problem) if p) or "invalid"
        mark = err.problem_mark or err.context_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        return clip(" ".join(text.split())) + where
    return clip(" ".join(str(err).split()))
