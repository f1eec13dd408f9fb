"""Edits of a ``config.pbtxt`` text through Triton's own schema, its comments kept.

An edit parses the text into a ``ModelConfig`` (Triton's ``model_config.proto``, as
``tritonclient`` ships it), changes the message and writes it back with protobuf's
``text_format``. The written text is parsed again and must equal the original message
changed as asked, else :class:`ConfigEditError` is raised and the caller writes nothing.
An edit that changes nothing returns the text as it was, byte for byte.

Layout of a written text (:func:`format_config`). The top-level *elements* keep the
order they had: an element is one singular top-level field (``name: ...``,
``dynamic_batching { ... }``), one entry of a top-level map (``parameters``, told apart
by its key) or one message of a top-level repeated field (``input``, ``output``,
``model_warmup`` ..., by position), each item of a ``[ ... ]`` list counting as one. A
new element goes after the last one of its field, a new field at the end. An element is
written on one line when it fits in :data:`WIDTH` columns, else its fields one per line,
each again on one line when it fits; inside, fields come in schema order and map
entries sorted by key, as text_format writes them. Values are written by text_format
(``as_utf8``; repeated numbers short: ``dims: [112, 112, 3]``): ints and enums exactly,
strings as they were (``"1073741824"``, ``"0.363"`` are strings), floats in the
shortest form that reads back to the same float. A proto3 scalar at its default value
(``string_value: ""``, ``kind: CONTROL_SEQUENCE_START``, ``timeout_action: REJECT``)
is not written by text_format; here it is, wherever the original text wrote one at the
same field path (and at the paths an edit names in ``explicit``).

Comments. The text format has no comments, so they are carried over by position: the
original text is read with protobuf's own tokenizer (``text_format.Tokenizer`` with
``skip_comments=False``, which also says whether a comment trails a token on its line),
field by field against the schema, to find the top-level elements and the comments
around them:

- a run of full-line comments is written, at column 0, before the element that follows
  it: the file's leading block stays its header, a comment above one ``parameters``
  entry of a list stays above that entry;
- comments inside an element (in a nested block such as ``sequence_batching { ... }``)
  are written before that element;
- comments after the last item of a ``[ ... ]`` list are written after that item, and
  those after the last field at the end of the text;
- a trailing comment (``... }  # note``) stays at the end of its element's line when
  the element is written on one line, else it goes before the element;
- the comments of an element that an edit removes go with the next element written.

Not kept: blank lines; the indentation of comments and their place inside a nested
block; the spelling of the text (``[ ... ]`` lists of messages become repeated fields,
``value: {`` loses its optional colon, fields inside a block come in schema order and
map entries inside a block in key order).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from google.protobuf import text_encoding, text_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from kyc_tools.repo.config import ConfigError, ModelConfig, parse_config

WIDTH = 100  # an element is written on one line when it fits in this many columns

_QUOTES = ('"', "'")
_INTEGERS = frozenset({FieldDescriptor.CPPTYPE_INT32, FieldDescriptor.CPPTYPE_INT64,
                       FieldDescriptor.CPPTYPE_UINT32, FieldDescriptor.CPPTYPE_UINT64})


class ConfigEditError(ValueError):
    """config.pbtxt could not be edited as asked; it is left unchanged."""


# -- reading the layout of a text ------------------------------------------------------------

_Key = tuple[str, Any]  # (top-level field, map key | position | None for a singular field)
_Path = tuple[str, ...]  # field names from the top: ("sequence_batching", "oldest", ...)


@dataclass
class _Comments:
    before: list[str] = field(default_factory=list)
    trailing: list[str] = field(default_factory=list)
    after: list[str] = field(default_factory=list)


@dataclass
class _Layout:
    order: list[_Key] = field(default_factory=list)  # the elements as they came
    comments: dict[_Key, _Comments] = field(default_factory=dict)
    end: list[str] = field(default_factory=list)  # after the last element
    defaults: set[_Path] = field(default_factory=set)  # scalars written at their default


@cache
def _is_repeated(fd: FieldDescriptor) -> bool:
    flag = getattr(fd, "is_repeated", None)  # protobuf >= 5; label is deprecated there
    return fd.label == fd.LABEL_REPEATED if flag is None else bool(flag)


@cache
def _is_map(fd: FieldDescriptor) -> bool:
    return fd.message_type is not None and fd.message_type.GetOptions().map_entry


def _number(token: str) -> float | None:
    for parse in (lambda t: int(t, 0), float):
        try:
            return float(parse(token))
        except ValueError:
            pass
    return None


class _Scanner:
    """Reads a config text field by field as the parser does, with protobuf's tokenizer:
    its top-level elements, the comments around them, and the scalar fields it writes at
    their default value (which the text format would not write back)."""

    def __init__(self, text: str) -> None:
        self.tok = text_format.Tokenizer(text.splitlines(), skip_comments=False)
        self.layout = _Layout()
        self.pending: list[str] = []  # full-line comments waiting for the next element
        self.last: _Comments | None = None  # the element read last (trailing comments)
        self.positions: dict[str, int] = {}

    def scan(self) -> _Layout:
        tok = self.tok
        while not tok.AtEnd():
            if tok.token.startswith("#"):
                self._comment()
            elif not (tok.TryConsume(",") or tok.TryConsume(";")):
                fd = self._field_name(ModelConfig.DESCRIPTOR)
                if not tok.TryConsume("["):
                    self._element(fd)
                    continue
                self.last = None  # a comment trailing `name [` goes before the first item
                if self._list(lambda fd=fd: self._element(fd)) and self.last is not None:
                    self.last.after.extend(self.pending)  # after the list's last item
                    self.pending = []
        self.layout.end = self.pending
        return self.layout

    def _comment(self, inside: _Comments | None = None) -> None:
        trailing, text = self.tok.ConsumeCommentOrTrailingComment()
        text = text.strip()
        if inside is not None:
            (inside.trailing if trailing else inside.before).append(text)
        elif trailing and self.last is not None:
            self.last.trailing.append(text)
        else:
            self.pending.append(text)

    def _field_name(self, message: Descriptor) -> FieldDescriptor:
        tok = self.tok
        name = tok.ConsumeIdentifier()
        fd = message.fields_by_name.get(name)
        if fd is None:
            raise tok.ParseError(f"{message.name} has no field {name!r}")
        tok.TryConsume(":")
        return fd

    def _list(self, read: Callable[[], object], inside: _Comments | None = None) -> int:
        """Read the items of a ``[ ... ]`` list (its ``[`` consumed); how many."""
        tok, items = self.tok, 0
        while not tok.TryConsume("]"):
            if tok.AtEnd():
                raise tok.ParseError("unterminated list")
            if tok.token.startswith("#"):
                self._comment(inside)
            elif not tok.TryConsume(","):
                read()
                items += 1
        return items

    def _element(self, fd: FieldDescriptor) -> None:
        comments, self.pending = _Comments(before=self.pending), []
        ident = self._value(fd, (fd.name,), comments)
        if _is_map(fd):
            pass  # ident: the entry's key
        elif _is_repeated(fd) and fd.cpp_type == fd.CPPTYPE_MESSAGE:
            ident = self.positions.get(fd.name, 0)
            self.positions[fd.name] = ident + 1
        else:
            ident = None
        key = (fd.name, ident)
        known = self.layout.comments.get(key)
        if known is None:
            self.layout.order.append(key)
            self.layout.comments[key] = comments
        else:  # repeated scalars, or a map key or singular message given twice: one element
            known.before += comments.before
            known.trailing += comments.trailing
        self.last = self.layout.comments[key]

    def _value(self, fd: FieldDescriptor, path: _Path, comments: _Comments) -> Any:
        """Read one value of ``fd``: a message's ``key`` field (map entries), a scalar."""
        tok = self.tok
        if fd.cpp_type == fd.CPPTYPE_MESSAGE:
            close = "}" if tok.TryConsume("{") else ">"
            if close == ">":
                tok.Consume("<")
            return self._message(fd.message_type, path, comments, close)
        if tok.token.startswith(_QUOTES):
            raw = tok.ConsumeByteString()  # adjacent strings concatenate
            value, default = raw.decode("utf-8", "replace"), not raw
        else:
            value = tok.token
            tok.NextToken()
            if fd.cpp_type == fd.CPPTYPE_BOOL:
                default = value in ("false", "False", "f", "0")
            elif fd.cpp_type == fd.CPPTYPE_ENUM and value in fd.enum_type.values_by_name:
                default = fd.enum_type.values_by_name[value].number == 0
            else:
                default = _number(value) == 0
        if default and not _is_repeated(fd):
            self.layout.defaults.add(path)
        return value

    def _message(self, message: Descriptor, path: _Path, comments: _Comments, close: str) -> Any:
        tok, key = self.tok, None
        while not tok.TryConsume(close):
            if tok.AtEnd():
                raise tok.ParseError("unterminated message")
            if tok.token.startswith("#"):
                self._comment(comments)
            elif not (tok.TryConsume(",") or tok.TryConsume(";")):
                fd = self._field_name(message)
                sub = (*path, fd.name)
                if tok.TryConsume("["):
                    self._list(lambda fd=fd, sub=sub: self._value(fd, sub, comments), comments)
                else:
                    value = self._value(fd, sub, comments)
                    if fd.name == "key":
                        key = value
        return key


def _layout(text: str) -> _Layout:
    try:
        return _Scanner(text).scan()
    except text_format.ParseError as exc:
        raise ConfigEditError(f"config.pbtxt: {exc}") from exc


# -- writing ---------------------------------------------------------------------------------


@dataclass
class _Node:
    inline: str  # the whole field on one line
    head: str = ""  # "name {" of a message
    children: list[_Node] | None = None  # a message's fields


def _value_text(fd: FieldDescriptor, value: Any) -> str:
    """``value`` as text_format writes it (``as_utf8``), the common types without a printer."""
    if fd.type == fd.TYPE_STRING:
        return '"' + text_encoding.CEscape(value, as_utf8=True) + '"'
    if fd.cpp_type in _INTEGERS:
        return str(value)
    if fd.cpp_type == fd.CPPTYPE_BOOL:
        return "true" if value else "false"
    out = io.StringIO()
    text_format.PrintFieldValue(fd, value, out, as_utf8=True, as_one_line=True)
    return out.getvalue()


def _fields(message: Any, path: _Path, explicit: dict[_Path, set[str]]
            ) -> Iterator[tuple[FieldDescriptor, Any]]:
    """A message's fields as text_format prints them (maps sorted by key), with the
    ``explicit`` ones at their default value too; a list stands for a repeated primitive
    to write short (``dims: [1, 2]``)."""
    listed = message.ListFields()
    if path in explicit:
        present = {fd.name for fd, _ in listed}
        listed += [(fd, fd.default_value) for fd in message.DESCRIPTOR.fields
                   if fd.name in explicit[path] and fd.name not in present
                   and fd.containing_oneof is None and not _is_repeated(fd)
                   and fd.cpp_type != fd.CPPTYPE_MESSAGE]
        listed.sort(key=lambda item: item[0].number)
    for fd, value in listed:
        if _is_map(fd):
            entry = value.GetEntryClass()
            for key in sorted(value):
                yield fd, entry(key=key, value=value[key])
        elif _is_repeated(fd):
            if fd.cpp_type in (fd.CPPTYPE_MESSAGE, fd.CPPTYPE_STRING):
                yield from ((fd, v) for v in value)
            else:
                yield fd, list(value)
        else:
            yield fd, value


def _node(fd: FieldDescriptor, value: Any, path: _Path, explicit: dict[_Path, set[str]]
          ) -> _Node:
    if isinstance(value, list):
        return _Node(f"{fd.name}: [{', '.join(_value_text(fd, v) for v in value)}]")
    if fd.cpp_type != fd.CPPTYPE_MESSAGE:
        return _Node(f"{fd.name}: {_value_text(fd, value)}")
    children = [_node(sub, v, (*path, sub.name), explicit)
                for sub, v in _fields(value, path, explicit)]
    inline = " ".join([f"{fd.name} {{", *(c.inline for c in children), "}"])
    return _Node(inline, f"{fd.name} {{", children)


def _lines(node: _Node, indent: int, out: list[str]) -> None:
    """One line when it fits in WIDTH columns, else a message's fields one per line."""
    pad = " " * indent
    if node.children is None or indent + len(node.inline) <= WIDTH:
        out.append(pad + node.inline)
        return
    out.append(pad + node.head)
    for child in node.children:
        _lines(child, indent + 2, out)
    out.append(pad + "}")


def _elements(config: ModelConfig) -> dict[_Key, tuple[FieldDescriptor, Any]]:
    """The top-level elements of ``config`` in field order, keyed as :class:`_Scanner`
    keys them (map entries by key, sorted; repeated messages by position)."""
    found: dict[_Key, tuple[FieldDescriptor, Any]] = {}
    for fd, value in config.ListFields():
        if _is_map(fd):
            entry = value.GetEntryClass()
            for key in sorted(value):
                found[(fd.name, key)] = fd, entry(key=key, value=value[key])
        elif _is_repeated(fd) and fd.cpp_type == fd.CPPTYPE_MESSAGE:
            for position, item in enumerate(value):
                found[(fd.name, position)] = fd, item
        elif _is_repeated(fd):
            found[(fd.name, None)] = fd, list(value)
        else:
            found[(fd.name, None)] = fd, value
    return found


def format_config(config: ModelConfig, like: str = "", explicit: Iterable[str] = ()) -> str:
    """``config`` as pbtxt text, laid out like the text ``like`` and with its comments
    (see the module's docstring). Scalar fields that ``like`` writes at their default
    value, and the dotted field paths in ``explicit``
    (``"dynamic_batching.default_queue_policy.timeout_action"``), are written even at
    their default value."""
    layout = _layout(like) if like else _Layout()
    wanted: dict[_Path, set[str]] = {}
    for path in [*layout.defaults, *(tuple(p.split(".")) for p in explicit)]:
        wanted.setdefault(path[:-1], set()).add(path[-1])
    elements = _elements(config)
    out: list[str] = []

    def write(key: _Key, comments: _Comments) -> None:
        fd, value = elements.pop(key)
        items = value if isinstance(value, list) and fd.cpp_type == fd.CPPTYPE_STRING else [value]
        lines: list[str] = []
        for item in items:  # repeated strings: one line each, as text_format writes them
            _lines(_node(fd, item, (fd.name,), wanted), 0, lines)
        out.extend(comments.before)
        if comments.trailing and len(lines) == 1:
            lines[0] += "  " + " ".join(comments.trailing)
        else:
            out.extend(comments.trailing)
        out.extend(lines)
        out.extend(comments.after)

    last_of_field = {key[0]: i for i, key in enumerate(layout.order)}
    carried: list[str] = []  # comments of elements the edit removed
    for i, key in enumerate(layout.order):
        comments = layout.comments[key]
        if key in elements:
            write(key, _Comments(carried + comments.before, comments.trailing, comments.after))
            carried = []
        else:
            carried += comments.before + comments.trailing + comments.after
        if last_of_field[key[0]] == i:  # new elements of this field: after its last one
            for new in [k for k in elements if k[0] == key[0]]:
                write(new, _Comments(before=carried))
                carried = []
    out += carried + layout.end
    for new in list(elements):  # fields the text did not have, at the end
        write(new, _Comments())
    return "".join(line + "\n" for line in out)


# -- edits -----------------------------------------------------------------------------------


def _parsed(text: str) -> bytes:
    """``text`` parsed (:class:`ConfigError` if it does not), serialized."""
    return parse_config(text).SerializeToString(deterministic=True)


def edit_config(text: str, change: Callable[[ModelConfig], None], *,
                explicit: Iterable[str] = ()) -> str:
    """``text`` with ``change`` applied to its ``ModelConfig``, written back with its
    comments (:func:`format_config`, ``explicit`` as there); ``text`` itself when
    ``change`` changes nothing. What ``change`` raises goes to the caller."""
    try:
        original = _parsed(text)
    except ConfigError as exc:
        raise ConfigEditError(f"config.pbtxt: {exc}") from exc
    expected = ModelConfig.FromString(original)
    change(expected)
    if expected == ModelConfig.FromString(original):
        return text
    new = format_config(expected, like=text, explicit=explicit)
    try:
        ok = ModelConfig.FromString(_parsed(new)) == expected
    except ConfigError:
        ok = False
    if not ok:
        raise ConfigEditError("config.pbtxt: the edit changed more than asked; not written")
    return new


def set_output_dims(text: str, output: str, dims: Sequence[int]) -> str:
    """``text`` with the ``dims`` of the output named ``output`` replaced, nothing else."""

    def change(config: ModelConfig) -> None:
        tensor = next((t for t in config.output if t.name == output), None)
        if tensor is None:
            raise ConfigEditError(f"config.pbtxt: no output named {output!r}")
        del tensor.dims[:]
        tensor.dims.extend(dims)

    return edit_config(text, change)


def set_string_parameter(text: str, key: str, value: str) -> str:
    """``text`` with ``parameters { key: KEY value: { string_value: VALUE } }`` set."""

    def change(config: ModelConfig) -> None:
        config.parameters[key].string_value = value

    return edit_config(text, change)


def set_version_policy(text: str, versions: Sequence[int]) -> str:
    """``text`` with ``version_policy`` serving exactly ``versions``."""

    def change(config: ModelConfig) -> None:
        config.version_policy.Clear()
        config.version_policy.specific.SetInParent()  # present even when versions is empty
        config.version_policy.specific.versions.extend(sorted(versions))

    return edit_config(text, change)
