"""Membership expectations (``expect_column_values_to_be_in_set`` / ``..._not_be_in_set``) whose value set is a
``column_values`` reference, checked on Spark by a join instead of by GX: the referenced values are never
listed in the driver."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from quality.expectations.reads import reference_frame
from quality.expectations.results import SAMPLE_VALUES, Joined, violation_of
from quality.expectations.suites import Reference, Suite

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from lakehouse.lakehouse import Lakehouse

#: Expectations a ``column_values`` reference can be checked for by a Spark join (the kwargs they may have):
#: in the set (True) or not in it (False).
_MEMBERSHIP = {"expect_column_values_to_be_in_set": True, "expect_column_values_to_not_be_in_set": False}


_MEMBERSHIP_KWARGS = {"column", "value_set", "mostly", "result_format"}


def memberships(suite: Suite) -> dict[str, int]:
    """The suite parameters of ``column_values`` references that a membership expectation takes as its value
    set, and that expectation's index: on Spark these are checked by a join, the values never listed."""
    found = {}
    for i, e in enumerate(suite.gx_doc["expectations"]):
        kwargs = e.get("kwargs") or {}
        value_set = kwargs.get("value_set")
        if e["type"] not in _MEMBERSHIP or not isinstance(value_set, dict) or "$PARAMETER" not in value_set:
            continue
        [ref] = [r for r in suite.references if r.param == value_set["$PARAMETER"]]
        if ref.kind == "column_values" and set(kwargs) <= _MEMBERSHIP_KWARGS and isinstance(kwargs.get("column"), str):
            found[ref.param] = i
    return found


def values_of(data: pa.Table, suite: Suite, index: int) -> pa.Array:
    """The distinct non-null values of the column expectation ``index`` checks, in rows the driver holds."""
    import pyarrow.compute as pc

    return pc.unique(data.column(suite.expectations[index]["kwargs"]["column"]).drop_null())


def membership_result(
    lh: Lakehouse,
    spark: Any,
    frame: DataFrame,
    table: str,
    sid: int,
    suite: Suite,
    ref: Reference,
    index: int,
    upstream: Mapping[str, dict[int, int]],
) -> Joined:
    """Expectation ``index`` of ``suite`` (a membership whose value set is ``ref``) over the validated ``frame``:
    its column's non-null values joined with the referenced column's in Spark (an anti join for "in the set", a
    semi join for "not in it"); counts and at most `SAMPLE_VALUES` unexpected values reach the driver. Success as GX's:
    the share of expected values among the non-null ones at least ``mostly`` (default 1)."""
    from types import SimpleNamespace

    from pyspark.sql import functions as F

    expectation = suite.expectations[index]
    kwargs = dict(expectation.get("kwargs") or {})
    column = kwargs["column"]
    rows = frame.count()
    values = frame.select(F.col(column).alias("v")).where(F.col("v").isNotNull())
    known = reference_frame(lh, spark, ref.spec["table"], ref.spec["column"], upstream)
    known = known.select(F.col(ref.spec["column"]).alias("r")).where(F.col("r").isNotNull()).distinct()
    how = "left_anti" if _MEMBERSHIP[expectation["type"]] else "left_semi"  # the unexpected values
    bad = values.join(known, values["v"] == known["r"], how)
    total = values.count()
    unexpected = bad.count()
    sample = [r["v"] for r in bad.limit(SAMPLE_VALUES).collect()]
    mostly = kwargs.get("mostly")
    success = total == 0 or (total - unexpected) / total >= (1.0 if mostly is None else float(mostly))
    result = {
        "element_count": rows,
        "missing_count": rows - total,
        "unexpected_count": unexpected,
        "unexpected_percent": 100.0 * unexpected / total if total else None,
        "partial_unexpected_list": sample,
    }
    severity = str(expectation.get("severity") or "critical").lower()
    config = {"type": expectation["type"], "kwargs": kwargs, "meta": dict(expectation.get("meta") or {})}
    doc = {
        "success": success,
        "expectation_config": config,
        "result": result,
        "meta": {
            "lakestream": f"checked by a Spark join of {column} with {ref.spec['table']}.{ref.spec['column']} "
            "(the referenced values are not listed)"
        },
    }
    violation = None
    if not success:
        violation = violation_of(table, sid, SimpleNamespace(type=config["type"], kwargs=kwargs), result, None)
    return Joined(doc=doc, violation=violation, severity=severity)
