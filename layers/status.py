"""Where each model of a project stands (`lakestream layers status`): its position and lag in each input, its
last round, and what keeps its next round from running."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakehouse.errors import SubscriptionNotFound, TableNotFound
from layers.rounds import RoundReport, consumer_of, read_report

if TYPE_CHECKING:
    from lakehouse.lakehouse import Lakehouse
    from layers.project import Project
    from layers.strategy import ModelPlan

__all__ = ["ModelStatus", "model_statuses"]

Positions = dict[str, dict[int, int]]


@dataclass(frozen=True)
class ModelStatus:
    """Where a model stands: per input its subscription's position and lag, and its last round. ``problem``:
    what keeps its next round from running, if anything is known to (its table no longer matches its SQL, an
    input's declaration no longer matches its table, a missing table)."""

    model: str
    strategy: str
    positions: Positions
    lag_records: dict[str, int]
    lag_seconds: float | None
    last_round: RoundReport | None
    problem: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "strategy": self.strategy,
            "positions": {t: {str(b): o for b, o in p.items()} for t, p in self.positions.items()},
            "lag_records": self.lag_records,
            "lag_seconds": self.lag_seconds,
            "last_round": self.last_round.to_json() if self.last_round else None,
            "problem": self.problem,
        }


def model_statuses(
    lh: Lakehouse, project: Project, plans: dict[str, ModelPlan], problem: Callable[[str], str | None]
) -> list[ModelStatus]:
    """Each model's position per input, its lag (records and seconds) and its last round's report."""
    out = []
    for name in project.order:
        positions: Positions = {}
        lag_records: dict[str, int] = {}
        seconds: list[float] = []
        for table in project.models[name].inputs:
            try:
                sub = lh.subscription(table, consumer_of(name), create=False)
            except (SubscriptionNotFound, TableNotFound):
                continue
            positions[table] = sub.position
            lag = sub.lag()
            lag_records[table] = sum(b.records for b in lag.values())
            seconds.extend(b.seconds for b in lag.values() if b.records and b.seconds is not None)
        out.append(
            ModelStatus(
                name,
                plans[name].strategy,
                positions,
                lag_records,
                max(seconds) if seconds else None,
                read_report(lh.store, name),
                problem(name),
            )
        )
    return out
