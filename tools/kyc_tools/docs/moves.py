"""docs/liveness-moves.md, from the one declaration of the liveness moves
(kyc.liveness.challenge: MEASURES, MOVES, GUIDANCE)."""

from __future__ import annotations

from kyc.liveness.challenge import GUIDANCE, MEASURES, MOVES
from kyc_tools.docs import header, table


def moves_page() -> str:
    """The page: the measures, each move on its measure with its words, the guidance."""
    measures = [(f"`{m.name}`", m.what) for m in MEASURES.values()]
    moves = [(f"`{m.name}`", f"`{m.measure.name}`", "+" if m.sign > 0 else "-",
              f'"{m.instruction}"', f'"{m.more}"') for m in MOVES.values()]
    guidance = [(f"`{key}`", f'"{text}"') for key, text in GUIDANCE.items()]
    return (
        "# Liveness moves\n\n"
        + header("moves", "backends/kyc/liveness/challenge.py")
        + "\nThe moves a liveness challenge asks, each a direction on a measure of the frame, "
        "and the\nwords the person reads (STATUS `guidance`, `instruction`). A move is "
        "counted when its\nmeasure passes `amplitude_deg` from the session's baseline in "
        "its direction for\n`min_hold_frames` frames, and left within `centre_deg`. "
        "`liveness_sequence`'s `moves` parameter\npicks which of them challenges draw "
        "(at least `min_turns` of each challenge on `yaw`: the\nrelief check reads head "
        "turns). The moves asked must be made in that order; up to `forgiven_moves` other\n"
        "moves on the way (a nod while a turn is asked, a move made again) and anything "
        "after\nthe last one are forgiven ([liveness.md](liveness.md#what-counts-as-a-move)). "
        "To add a move or a\nmeasure: [vocabularies.md](vocabularies.md).\n\n"
        "## Measures\n\n"
        + table(("measure", "what it reads"), measures)
        + "\n## Moves\n\n"
        + table(("move", "measure", "direction", "instruction", "when on the way"), moves)
        + "\n## Guidance\n\n"
        "Every other line a person may read during a session, besides the moves' own:\n\n"
        + table(("key", "words"), guidance)
    )
