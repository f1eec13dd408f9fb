"""Requests in flight together (the server's dynamic batcher gathers them), with progress.

One request per image: a bad image is its own request's error, never its batch's.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

IN_FLIGHT = 8  # the face and OCR models' max_batch_size: one full batch in flight


def progress(items: Iterable[T], total: int, what: str) -> Iterable[T]:
    """tqdm's bar on stderr when it is installed (the ``bench`` extra) and the run is long
    enough to want one; the plain iterable otherwise."""
    try:
        from tqdm import tqdm
    except ImportError:
        return items
    return tqdm(items, total=total, desc=what, unit="", file=sys.stderr, leave=False,
                disable=total < 16 or not sys.stderr.isatty())


def each(work: Callable[[T], R], items: Sequence[T], what: str,
         in_flight: int = IN_FLIGHT) -> list[R | Exception]:
    """``work(item)`` for every item, ``in_flight`` at a time, in the items' order; an
    item whose work raised gets its exception in its place."""

    def safe(item: T) -> R | Exception:
        try:
            return work(item)
        except Exception as exc:  # that item's own failure, reported by the caller
            return exc

    with ThreadPoolExecutor(max_workers=in_flight) as pool:
        return list(progress(pool.map(safe, items), len(items), what))


def array_input(name: str, array: Any, datatype: str) -> Any:
    import tritonclient.grpc as grpcclient

    tensor = grpcclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


def error_text(exc: Exception) -> str:
    """The server's message of a failed request (tritonclient's ``message()``)."""
    message = getattr(exc, "message", None)
    text = message() if callable(message) else str(exc)
    return " ".join(str(text).split())[:300]
