"""kyc.document.ctc_length: the likeliest CTC reading of a known length."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from kyc.document.ctc_length import ctc_fixed_length
from kyc.document.lines import class_mask, ctc_greedy

ALPHABET = list("AB<")
CLASS = {"-": 0, "A": 1, "B": 2, "<": 3}


def steps(path: str, p: float = 0.9) -> np.ndarray:
    """Probabilities whose every step gives ``p`` to the class ``path`` names there."""
    probs = np.full((len(path), 4), (1 - p) / 3)
    for t, char in enumerate(path):
        probs[t, CLASS[char]] = p
    return probs


def collapse(path: tuple[int, ...]) -> tuple[int, ...]:
    out, previous = [], None
    for c in path:
        if c and c != previous:
            out.append(c)
        previous = c
    return tuple(out)


def best_by_brute_force(probs: np.ndarray, length: int, classes: tuple[int, ...]):
    """The highest path log-probability among paths spelling ``length`` characters."""
    best = None
    for path in itertools.product((0, *classes), repeat=len(probs)):
        if len(collapse(path)) == length:
            score = float(sum(np.log(probs[t, c]) for t, c in enumerate(path)))
            best = score if best is None else max(best, score)
    return best


def path_score(probs: np.ndarray, text: str, allowed: tuple[int, ...]) -> float:
    """The best path log-probability of ``text`` (standard CTC alignment, by brute force)."""
    target = tuple(CLASS[c] for c in text)
    return max(float(sum(np.log(probs[t, c]) for t, c in enumerate(path)))
               for path in itertools.product((0, *allowed), repeat=len(probs))
               if collapse(path) == target)


@pytest.mark.parametrize("seed", range(60))
def test_it_finds_the_likeliest_path_of_that_length(seed):
    rng = np.random.default_rng(seed)
    length, count = int(rng.integers(1, 5)), int(rng.integers(1, 7))
    probs = rng.dirichlet(np.ones(4), size=count)
    best = best_by_brute_force(probs, length, (1, 2, 3))
    got = ctc_fixed_length(probs, ALPHABET, length)
    if best is None:
        assert got is None
        return
    text, confidence = got
    assert len(text) == length and 0 < confidence <= 1
    assert path_score(probs, text, (1, 2, 3)) == pytest.approx(best)


def test_a_run_of_fillers_read_short_comes_back_at_its_length():
    probs = steps("A-<<<<<B")
    probs[3, 0] = 0.3  # weak blanks inside the run: where another filler can start
    probs[5, 0] = 0.3
    assert ctc_greedy(probs, ALPHABET)[0] == "A<B"
    assert ctc_fixed_length(probs, ALPHABET, 5)[0] == "A<<<B"


def test_only_allowed_classes_are_written_and_too_few_steps_give_no_reading():
    probs = steps("AB<")
    only = class_mask(ALPHABET, "B<")
    text, _ = ctc_fixed_length(probs, ALPHABET, 2, only)
    assert set(text) <= set("B<")
    assert ctc_fixed_length(probs, ALPHABET, 4) is None
    assert ctc_fixed_length(steps("<<"), ALPHABET, 2, class_mask(ALPHABET, "<")) is None
