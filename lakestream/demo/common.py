"""What the demo's steps share: a step's record, the demo's result, and the check every step makes of its own
result (`DemoCheckFailed`: a bug)."""

from __future__ import annotations

from dataclasses import dataclass

from lakestream.errors import DemoCheckFailed

__all__ = ["DemoCheckFailed", "DemoResult", "Step", "check"]


@dataclass
class Step:
    name: str
    result: str
    seconds: float


@dataclass
class DemoResult:
    """What `run_demo` did: its steps, and where to read the orders table it built."""

    steps: list[Step]
    namespace: str
    #: the orders table's offsets per bucket: the log's end and the lake's (equal: the lake caught up)
    log_end: dict[int, int]
    lake_offsets: dict[int, int]
    metadata_location: str

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.steps)


def check(condition: bool, message: str) -> None:
    if not condition:
        raise DemoCheckFailed(message)
