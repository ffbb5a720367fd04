"""An append to a "commits" log killed with SIGKILL at a named point (run as ``python -m``; see tests/support/crash.py).

Points: ``after-data`` (the data object is written, its commit record not), ``after-commit`` (the record landed,
the caller never heard), ``none`` (runs to its end). The append is always the same rows under producer ``w``,
sequence 0; it prints ``already`` when the log recognised an earlier attempt.
"""

from __future__ import annotations

import sys

import pyarrow as pa

from lakehouse import Lakehouse
from lakehouse.log import chain
from tests.support.crash import die


def main(url: str, point: str) -> None:
    real = chain.Chain.commit

    def commit(self, make):  # noqa: ANN001, ANN202 - the method it wraps
        if point == "after-data":
            die()
        out = real(self, make)
        if point == "after-commit":
            die()
        return out

    chain.Chain.commit = commit  # type: ignore[method-assign]
    log = Lakehouse.open(url).log("ods.orders")
    keys = list(range(100))
    rows = pa.table({"o_orderkey": pa.array(keys, pa.int64()), "o_comment": pa.array([f"c{k}" for k in keys])})
    result = log.append(rows, "upsert", producer_id="w", sequence=0)
    print("already" if result.already_appended else "appended", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:3])
