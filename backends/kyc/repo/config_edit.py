"""Targeted edits of a ``config.pbtxt`` text, so its comments and layout survive.

Each edit replaces the span of one value and is verified by parsing both texts
and comparing the result with the parsed original changed the same way: an edit
that would change more than asked raises :class:`ConfigEditError` and nothing is
written by the caller.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kyc.repo.config import ConfigError, ModelConfig, parse_config


class ConfigEditError(ValueError):
    """config.pbtxt could not be edited as asked; it is left unchanged."""


_OPEN, _CLOSE, _QUOTES = "{[<", "}]>", "\"'"


@dataclass(frozen=True)
class _Span:
    start: int
    end: int


@dataclass(frozen=True)
class _Field:
    name: str
    span: _Span  # from the field name to past the value and a trailing ',' or ';'
    value: _Span


def _skip_blank(text: str, i: int, end: int) -> int:
    while i < end:
        if text[i].isspace():
            i += 1
        elif text[i] == "#":
            newline = text.find("\n", i, end)
            i = end if newline < 0 else newline + 1
        else:
            break
    return i


def _string_end(text: str, i: int, end: int) -> int:
    quote, i = text[i], i + 1
    while i < end and text[i] != quote:
        i += 2 if text[i] == "\\" else 1
    if i >= end:
        raise ConfigEditError("config.pbtxt: unterminated string")
    return i + 1


def _group_end(text: str, i: int, end: int) -> int:
    depth = 0
    while i < end:
        char = text[i]
        if char in _QUOTES:
            i = _string_end(text, i, end)
            continue
        if char == "#":
            i = _skip_blank(text, i, end)
            continue
        depth += (char in _OPEN) - (char in _CLOSE)
        i += 1
        if depth == 0:
            return i
    raise ConfigEditError("config.pbtxt: unbalanced brackets")


def _value_end(text: str, i: int, end: int) -> int:
    if i >= end:
        raise ConfigEditError("config.pbtxt: a field has no value")
    if text[i] in _OPEN:
        return _group_end(text, i, end)
    if text[i] in _QUOTES:
        i = _string_end(text, i, end)
        while (j := _skip_blank(text, i, end)) < end and text[j] in _QUOTES:
            i = _string_end(text, j, end)  # adjacent strings concatenate
        return i
    j = i
    while j < end and (text[j].isalnum() or text[j] in "_.-+"):
        j += 1
    if j == i:
        raise ConfigEditError(f"config.pbtxt: unexpected {text[i]!r} at offset {i}")
    return j


def _fields(text: str, start: int, end: int) -> list[_Field]:
    """The fields of one message body ``text[start:end]``."""
    found: list[_Field] = []
    i = _skip_blank(text, start, end)
    while i < end:
        j = i
        while j < end and (text[j].isalnum() or text[j] == "_"):
            j += 1
        if j == i:
            raise ConfigEditError(f"config.pbtxt: expected a field name at offset {i}")
        name = text[i:j]
        j = _skip_blank(text, j, end)
        if j < end and text[j] == ":":
            j = _skip_blank(text, j + 1, end)
        value_end = _value_end(text, j, end)
        k = _skip_blank(text, value_end, end)
        stop = k + 1 if k < end and text[k] in ",;" else value_end
        found.append(_Field(name, _Span(i, stop), _Span(j, value_end)))
        i = _skip_blank(text, stop, end)
    return found


def _items(text: str, span: _Span) -> list[_Span]:
    """Elements of the list ``text[span]`` (``[ a, b ]``)."""
    items, end = [], span.end - 1
    i = _skip_blank(text, span.start + 1, end)
    while i < end:
        stop = _value_end(text, i, end)
        items.append(_Span(i, stop))
        i = _skip_blank(text, stop, end)
        if i < end and text[i] == ",":
            i = _skip_blank(text, i + 1, end)
    return items


def _messages(text: str, fld: _Field) -> list[_Span]:
    """A message-valued field's message(s): one, or each of a list."""
    spans = _items(text, fld.value) if text[fld.value.start] == "[" else [fld.value]
    return [s for s in spans if text[s.start] in "{<"]


def _body(text: str, message: _Span) -> list[_Field]:
    return _fields(text, message.start + 1, message.end - 1)


def _unquoted(text: str, span: _Span) -> str:
    raw = text[span.start : span.end]
    return raw[1:-1] if raw[:1] in _QUOTES else raw


def _find_entry(text: str, field_name: str, key_field: str, key: str) -> _Span | None:
    """The top-level ``field_name`` message whose ``key_field`` is ``key``."""
    for fld in _fields(text, 0, len(text)):
        if fld.name != field_name:
            continue
        for message in _messages(text, fld):
            if any(
                f.name == key_field and _unquoted(text, f.value) == key
                for f in _body(text, message)
            ):
                return message
    return None


def _splice(text: str, span: _Span, new: str) -> str:
    return text[: span.start] + new + text[span.end :]


def _append(text: str, line: str) -> str:
    return text + ("" if not text or text.endswith("\n") else "\n") + line + "\n"


def _verified(old: str, new: str, change: Callable[[ModelConfig], None]) -> str:
    try:
        expected = parse_config(old)
        change(expected)
        ok = parse_config(new) == expected
    except ConfigError as exc:
        raise ConfigEditError(f"config.pbtxt: {exc}") from exc
    if not ok:
        raise ConfigEditError("config.pbtxt: the edit changed more than asked; not written")
    return new


def _dims_text(text: str, value: _Span, dims: Sequence[int]) -> str:
    """New text for a ``dims`` value, keeping the original spacing where it can."""
    if text[value.start] == "[":
        items = _items(text, value)
        if len(items) == len(dims):
            out = text[value.start : value.end]
            for item, dim in reversed(list(zip(items, dims, strict=True))):
                offset = _Span(item.start - value.start, item.end - value.start)
                out = _splice(out, offset, str(dim))
            return out
    elif len(dims) == 1:
        return str(dims[0])
    return "[ " + ", ".join(map(str, dims)) + " ]"


def set_output_dims(text: str, output: str, dims: Sequence[int]) -> str:
    """``text`` with the ``dims`` of the output named ``output`` replaced, nothing else."""
    message = _find_entry(text, "output", "name", output)
    if message is None:
        raise ConfigEditError(f"config.pbtxt: no output named {output!r}")
    found = [f for f in _body(text, message) if f.name == "dims"]
    if not found:
        raise ConfigEditError(f"config.pbtxt: output {output!r} has no dims")
    new = text
    for extra in reversed(found[1:]):  # a repeated `dims: 128` form; drop all but the first
        new = _splice(new, extra.span, "")
    new = _splice(new, found[0].value, _dims_text(text, found[0].value, dims))

    def change(config: ModelConfig) -> None:
        tensor = next(t for t in config.output if t.name == output)
        del tensor.dims[:]
        tensor.dims.extend(dims)

    return _verified(text, new, change)


def set_string_parameter(text: str, key: str, value: str) -> str:
    """``text`` with ``parameters { key: KEY value: { string_value: VALUE } }`` set."""
    quoted = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    entry = _find_entry(text, "parameters", "key", key)
    if entry is None:
        new = _append(text, f'parameters {{ key: "{key}" value: {{ string_value: {quoted} }} }}')
    else:
        holder = next((f for f in _body(text, entry) if f.name == "value"), None)
        if holder is None or text[holder.value.start] not in "{<":
            raise ConfigEditError(f"config.pbtxt: parameter {key!r} has no value message")
        current = next((f for f in _body(text, holder.value) if f.name == "string_value"), None)
        if current is None:
            new = _splice(text, holder.value, f"{{ string_value: {quoted} }}")
        else:
            new = _splice(text, current.value, quoted)

    def change(config: ModelConfig) -> None:
        config.parameters[key].string_value = value

    return _verified(text, new, change)


def set_version_policy(text: str, versions: Sequence[int]) -> str:
    """``text`` with ``version_policy`` serving exactly ``versions``."""
    listed = ", ".join(str(v) for v in sorted(versions))
    line = f"version_policy: {{ specific: {{ versions: [ {listed} ] }} }}"
    found = [f for f in _fields(text, 0, len(text)) if f.name == "version_policy"]
    new = text
    for extra in reversed(found[1:]):
        new = _splice(new, extra.span, "")
    new = _splice(new, found[0].span, line) if found else _append(text, line)

    def change(config: ModelConfig) -> None:
        config.version_policy.Clear()
        config.version_policy.specific.versions.extend(sorted(versions))

    return _verified(text, new, change)
