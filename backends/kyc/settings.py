"""Tunables read from a model config's ``parameters`` into a frozen dataclass.

Defaults live in the dataclass only. Keys are the field names; a value is parsed
by the field's type. A lower-case key that is no field is a typo and fails
``initialize`` with a clear message; upper-case keys belong to Triton
(``EXECUTION_ENV_PATH``...) and are left alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar, get_type_hints

T = TypeVar("T")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


class SettingsError(ValueError):
    pass


def _parse(name: str, kind: type, text: str) -> Any:
    text = text.strip()
    try:
        if kind is bool:
            if text.lower() in _TRUE:
                return True
            if text.lower() in _FALSE:
                return False
            raise ValueError(text)
        return kind(text)
    except ValueError:
        raise SettingsError(
            f"parameter '{name}': cannot read {text!r} as {kind.__name__}"
        ) from None


def from_parameters(cls: type[T], parameters: Mapping[str, str]) -> T:
    """An instance of the dataclass ``cls`` with the fields given in ``parameters``."""
    fields = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(k for k in parameters if k not in fields and not k.isupper())
    if unknown:
        raise SettingsError(
            f"unknown parameter(s) {', '.join(unknown)}; known: {', '.join(sorted(fields))}"
        )
    hints = get_type_hints(cls)
    values = {k: _parse(k, hints[k], v) for k, v in parameters.items() if k in fields}
    return cls(**values)
