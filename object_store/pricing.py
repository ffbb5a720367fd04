"""What a `Usage` costs at a price list: AWS S3 Standard's list prices by default.

>>> from object_store.pricing import PriceList
>>> PriceList().price(usage).total        # dollars

Configured through `lakehouse.settings` (``LAKESTREAM_PRICE_...`` or the YAML file's ``prices:``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from object_store.errors import InvalidArgument
from object_store.usage import READ_CLASS, WRITE_CLASS, Usage

GB = 1024**3


@dataclass(frozen=True)
class PriceList:
    """Dollars per request class, per GB stored a month and per GB transferred.

    Defaults: AWS S3 Standard list prices (us-east-1): PUT, COPY, POST and LIST $0.005 per 1,000; GET and the
    other read requests $0.0004 per 1,000; DELETE free; storage $0.023 per GB-month; data transfer in free, out
    within the region free (set ``transfer_out_per_gb`` for reads from outside the region, e.g. 0.09)."""

    write_per_1000: float = 0.005
    read_per_1000: float = 0.0004
    storage_per_gb_month: float = 0.023
    transfer_in_per_gb: float = 0.0
    transfer_out_per_gb: float = 0.0

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise InvalidArgument(f"price {name} must be a number of dollars >= 0, got {value!r}")

    def price(self, usage: Usage) -> Cost:
        """What ``usage``'s requests and transfer cost (storage is priced by `storage`, per period)."""
        return Cost(
            write_requests=usage.write_requests * self.write_per_1000 / 1000,
            read_requests=usage.read_requests * self.read_per_1000 / 1000,
            transfer=(
                usage.bytes_sent / GB * self.transfer_in_per_gb + usage.bytes_received / GB * self.transfer_out_per_gb
            ),
        )

    def storage(self, stored_bytes: int, months: float = 1.0) -> float:
        """Dollars for keeping ``stored_bytes`` for ``months``."""
        return stored_bytes / GB * months * self.storage_per_gb_month

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


@dataclass(frozen=True)
class Cost:
    """Dollars of a usage, by what they pay for."""

    write_requests: float = 0.0
    read_requests: float = 0.0
    transfer: float = 0.0

    @property
    def total(self) -> float:
        return self.write_requests + self.read_requests + self.transfer

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "total": self.total}


__all__ = ["GB", "READ_CLASS", "WRITE_CLASS", "Cost", "PriceList"]
