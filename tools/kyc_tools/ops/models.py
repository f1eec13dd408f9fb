"""The served models as monitoring sees them: which are ensembles, which run under
the sequence batcher, and each one's queue budget."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kyc_tools.repo.config import load_config
from kyc_tools.repo.graph.build import build_graph
from kyc_tools.repo.graph.derive import step_map

CONFIG = "config.pbtxt"


@dataclass(frozen=True)
class ServedModel:
    name: str
    ensemble: bool  # platform "ensemble": its queue time is not its steps' (Triton reports ~0)
    sequence: bool  # sequence batching: its queue includes a client's own pacing of frames
    queue_budget_us: float | None  # kyc.budgets.StepMap.queue_cap_us: 30% of its step's budget

    @property
    def batched(self) -> bool:
        """A stateless model whose queue time says whether its instances keep up."""
        return not (self.ensemble or self.sequence)


def served_models(repository: Path) -> list[ServedModel]:
    """Every model of ``repository`` (a folder with a ``config.pbtxt``), by name."""
    models = []
    budgets = step_map(build_graph(repository)) if repository.is_dir() else None
    for config_path in sorted(repository.glob(f"*/{CONFIG}")):
        config = load_config(config_path)
        name = config.name or config_path.parent.name
        models.append(ServedModel(
            name=name,
            ensemble=config.platform == "ensemble",
            sequence=config.HasField("sequence_batching"),
            queue_budget_us=budgets.queue_cap_us(name) if budgets else None,
        ))
    if not models:
        raise ValueError(f"no model in {repository}")
    return models
