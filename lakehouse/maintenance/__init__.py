"""Maintenance: keep the lake fast and the log small without ever losing a record.

`compaction` bin-packs small data files into target-sized ones; `expiry` expires old snapshots (never
the current one nor the newest tiering snapshot) and deletes the files only they referenced;
`orphans` deletes files under a table's location that no snapshot references, after a grace period;
`retention` deletes log segments that are both tiered and older than the retention period. Expiry and
retention also keep what the caller pins for subscriptions (`lakehouse.subscriptions.pins`, passed as
arguments: these modules never read subscriptions). `maintain`
runs them in that order (compaction first, so expiry can free what it replaced; retention last).
"""

from dataclasses import dataclass, field
from typing import Any

from lakehouse.maintenance import compaction, expiry, orphans, retention
from lakehouse.maintenance.compaction import CompactionResult, compact
from lakehouse.maintenance.expiry import ExpiryResult, expire_snapshots
from lakehouse.maintenance.orphans import OrphanResult, remove_orphans
from lakehouse.maintenance.retention import RetentionResult, apply_log_retention


@dataclass
class MaintenanceReport:
    table: str
    compaction: CompactionResult
    expiry: ExpiryResult
    orphans: OrphanResult
    retention: RetentionResult
    #: one message per subscription of the table not advanced for longer than the idle age
    idle_subscriptions: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "compaction": self.compaction.to_dict(),
            "expiry": self.expiry.to_dict(),
            "orphans": self.orphans.to_dict(),
            "retention": self.retention.to_dict(),
            "idle_subscriptions": list(self.idle_subscriptions),
        }


__all__ = [
    "CompactionResult",
    "MaintenanceReport",
    "compaction",
    "expiry",
    "orphans",
    "retention",
    "ExpiryResult",
    "OrphanResult",
    "RetentionResult",
    "apply_log_retention",
    "compact",
    "expire_snapshots",
    "remove_orphans",
]
