"""The best CTC reading of a line with a known number of characters.

Greedy CTC decoding (:func:`kyc.document.lines.ctc_greedy`) takes the likeliest class
of each time step; two equal characters in a row need a blank step between them, so a
long run of MRZ fillers read from a squeezed crop, where the recogniser gives a run of
'<' steps with too few blanks, comes out several fillers short (measured: TD1 lines of
30 read as 22, issue 37). An MRZ line's length is known (30, 36 or 44). Here a Viterbi
search over the same probabilities finds the likeliest path that spells exactly that
many characters: it can only take classes the recogniser gave each step, with their
own probabilities, so it never writes a character the recogniser did not offer; where
no path of that length exists (too few steps) there is no reading.

States after each step: ``blank[k]``, ``k`` characters written and the last step blank
(or nothing yet); ``char[k, c]``, ``k`` written and the last step class ``c``. A new
character comes after a blank, or after a step of another class; staying on ``c`` adds
no character.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

NEG = -1e30
FLOOR = 1e-12  # probability floor before the logarithm


def ctc_fixed_length(probs: np.ndarray, alphabet: Sequence[str], length: int,
                     allowed: np.ndarray | None = None) -> tuple[str, float] | None:
    """The likeliest reading of ``probs`` (``[T, C]``, class 0 = blank) with exactly
    ``length`` characters of ``allowed`` (a mask over classes; the blank always), and
    its confidence (the mean probability of the steps that wrote a character); None
    when no path has that length."""
    classes = np.flatnonzero(allowed[1:]) + 1 if allowed is not None \
        else np.arange(1, probs.shape[1])
    steps = probs.shape[0]
    if length < 1 or steps < length:
        return None
    logp = np.log(np.maximum(probs, FLOOR))
    blank_lp, char_lp = logp[:, 0], logp[:, classes]  # [T], [T, K]
    n, k_classes = length + 1, len(classes)
    blank = np.full(n, NEG)
    char = np.full((n, k_classes), NEG)
    blank[0], char[1] = blank_lp[0], char_lp[0]
    # Back pointers per step: how each state was reached.
    blank_from = np.zeros((steps, n), np.int32)  # -1: from blank, else the class index
    char_from = np.zeros((steps, n, k_classes), np.int32)  # -2 stay, -1 blank, else class
    for t in range(1, steps):
        blank, char = _step(blank, char, blank_lp[t], char_lp[t], blank_from[t], char_from[t])
    end_char = int(np.argmax(char[length]))
    if max(blank[length], char[length, end_char]) <= NEG / 2:
        return None
    state = -1 if blank[length] >= char[length, end_char] else end_char
    written = _backtrack(blank_from, char_from, length, state)
    picked = [(t, classes[c]) for t, c in written]
    text = "".join(alphabet[cls - 1] for _, cls in picked)
    confidence = float(np.mean([probs[t, cls] for t, cls in picked]))
    return text, confidence


def _step(blank: np.ndarray, char: np.ndarray, blank_lp: float, char_lp: np.ndarray,
          blank_from: np.ndarray, char_from: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One time step of the search, writing the back pointers in place."""
    best_c = np.argmax(char, axis=1)  # [n]
    best = char[np.arange(len(char)), best_c]
    new_blank = np.maximum(blank, best) + blank_lp
    blank_from[:] = np.where(blank >= best, -1, best_c)
    # The best previous state of another class, for each (k - 1, c): the row's best, or
    # its second best where the best is c itself.
    second = np.partition(char, -2, axis=1)[:, -2] if char.shape[1] > 1 \
        else np.full(len(char), NEG)
    other = np.where(np.arange(char.shape[1])[None, :] == best_c[:, None],
                     second[:, None], best[:, None])  # [n, K]
    other_from = np.where(np.arange(char.shape[1])[None, :] == best_c[:, None],
                          _second_index(char, best_c)[:, None], best_c[:, None])
    new_char = np.full_like(char, NEG)
    from_blank, from_other = blank[:-1, None], other[:-1]
    enter = np.maximum(from_blank, from_other)
    stay = char[1:]
    new_char[1:] = np.maximum(stay, enter) + char_lp[None, :]
    char_from[0] = -2
    char_from[1:] = np.where(stay >= enter, -2,
                             np.where(from_blank >= from_other, -1, other_from[:-1]))
    return new_blank, new_char


def _second_index(char: np.ndarray, best_c: np.ndarray) -> np.ndarray:
    masked = char.copy()
    masked[np.arange(len(char)), best_c] = -np.inf
    return np.argmax(masked, axis=1)


def _backtrack(blank_from: np.ndarray, char_from: np.ndarray, length: int,
               state: int) -> list[tuple[int, int]]:
    """(step, class index) of each character written, in order."""
    written: list[tuple[int, int]] = []
    k = length
    for t in range(len(blank_from) - 1, 0, -1):
        if state == -1:
            state = int(blank_from[t, k])
            continue
        came = int(char_from[t, k, state])
        if came == -2:
            continue
        written.append((t, state))
        k -= 1
        state = came
    if state >= 0:
        written.append((0, state))
    return written[::-1]
