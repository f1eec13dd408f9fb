"""The ``mrz_rec`` contract: what an MRZ line recogniser answers, whatever its version.

``IMAGES`` uint8 ``[N, 48, W, 3]``: MRZ line crops as the reader prepares them
(squeezed to ``mrz_squeeze`` of their width at height 48, padded with grey 127) ->
``PROBS`` float32 ``[N, T, 38]``: per time step, the probability of the CTC blank
(class 0) and of each character of :data:`MRZ_ALPHABET` (classes 1..37). ``T`` is
``W`` over the version's stride (8 for version 1, 4 for version 2); the reader takes
the stride from the answer's shape. A row may sum to less than 1: version 1 is the
general recogniser with its other classes left out (the rest is its belief that the
character is not an MRZ character).
"""

from __future__ import annotations

MRZ_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789<"
MRZ_CLASS_COUNT = 1 + len(MRZ_ALPHABET)  # the CTC blank first
