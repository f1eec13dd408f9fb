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

import functools
from collections.abc import Callable, Sequence

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
    rows = np.arange(len(char))
    order = np.argsort(char, axis=1, kind="stable")  # each row's classes, best last
    best_c = order[:, -1]
    best = char[rows, best_c]
    new_blank = np.maximum(blank, best) + blank_lp
    blank_from[:] = np.where(blank >= best, -1, best_c)
    # The best previous state of another class, for each (k - 1, c): the row's best, or
    # its second best where the best is c itself.
    second_c = order[:, -2] if char.shape[1] > 1 else best_c
    second = char[rows, second_c] if char.shape[1] > 1 else np.full(len(char), NEG)
    is_best = np.arange(char.shape[1])[None, :] == best_c[:, None]
    other = np.where(is_best, second[:, None], best[:, None])  # [n, K]
    other_from = np.where(is_best, second_c[:, None], best_c[:, None])
    new_char = np.full_like(char, NEG)
    from_blank, from_other = blank[:-1, None], other[:-1]
    enter = np.maximum(from_blank, from_other)
    stay = char[1:]
    new_char[1:] = np.maximum(stay, enter) + char_lp[None, :]
    char_from[0] = -2
    char_from[1:] = np.where(stay >= enter, -2,
                             np.where(from_blank >= from_other, -1, other_from[:-1]))
    return new_blank, new_char


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


# A character's options: the classes the recogniser gave at least this probability over
# the steps that wrote it (the written one always first).
OPTION_FLOOR = 0.02
Options = tuple[tuple[tuple[str, float], ...], ...]  # per character: (char, prob), best first
# A line's options, worked out when first asked for (only a failing check asks).
LazyOptions = Callable[[], "Options | None"]


def lazy_options(probs: np.ndarray, alphabet: Sequence[str], text: str,
                 allowed: np.ndarray | None = None) -> LazyOptions:
    """:func:`character_options` of these arguments, computed once, on the first call."""
    return functools.cache(functools.partial(character_options, probs, alphabet, text, allowed))


def character_options(probs: np.ndarray, alphabet: Sequence[str], text: str,
                      allowed: np.ndarray | None = None) -> Options | None:
    """For each character of ``text`` (a reading of ``probs``), the classes the recogniser
    offered over the steps that wrote it (its forced CTC alignment: from the step of its
    first frame to the next character's), each with the highest probability it had
    there, at least :data:`OPTION_FLOOR`, within ``allowed``; the written character
    first. None when ``text`` cannot be aligned (too few steps)."""
    index = {char: k + 1 for k, char in enumerate(alphabet)}
    if any(char not in index for char in text):
        return None
    labels = [index[char] for char in text]
    starts = ctc_align(probs, labels)
    if starts is None:
        return None
    mask = np.ones(probs.shape[1], bool) if allowed is None else allowed.copy()
    mask[0] = False
    bounds = [*starts, probs.shape[0]]
    options = []
    for k, label in enumerate(labels):
        span = probs[bounds[k]:max(bounds[k + 1], bounds[k] + 1)].max(axis=0)
        span = np.where(mask, span, 0.0)
        offered = np.flatnonzero(span >= OPTION_FLOOR)
        others = [int(c) for c in offered[np.argsort(-span[offered])] if c != label]
        options.append(((alphabet[label - 1], float(span[label])),
                        *((alphabet[c - 1], float(span[c])) for c in others)))
    return tuple(options)


def ctc_align(probs: np.ndarray, labels: Sequence[int]) -> list[int] | None:
    """The first step of each label on the likeliest CTC path spelling ``labels``
    (the standard forced alignment over blank-interleaved states); None if none fits."""
    logp = np.log(np.maximum(probs, FLOOR))
    states = [0]
    for label in labels:
        states += [label, 0]
    states_a = np.array(states)
    count, steps = len(states), probs.shape[0]
    score = np.full(count, NEG)
    score[0] = logp[0, 0]
    if count > 1:
        score[1] = logp[0, states[1]]
    back = np.zeros((steps, count), np.int8)  # 0 stay, 1 from s-1, 2 from s-2
    skip_ok = np.array([s >= 2 and states[s] != 0 and states[s] != states[s - 2]
                        for s in range(count)])
    for t in range(1, steps):
        one = np.concatenate([[NEG], score[:-1]])
        two = np.where(skip_ok, np.concatenate([[NEG, NEG], score[:-2]]), NEG)
        moves = np.stack([score, one, two])
        back[t] = np.argmax(moves, axis=0)
        score = moves.max(axis=0) + logp[t, states_a]
    end = count - 1 if count == 1 or score[-1] >= score[-2] else count - 2
    if score[end] <= NEG / 2:
        return None
    starts = [0] * len(labels)
    state = end
    for t in range(steps - 1, -1, -1):
        came = state - int(back[t, state]) if t else state
        if state % 2 == 1 and (t == 0 or came != state):
            starts[state // 2] = t
        state = came
    return starts
