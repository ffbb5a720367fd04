"""`lakestream`: a Spark reader of the lakestream format on a `Lakehouse` (registered on the session), with its
options: ``lakestream(spark, lh).load(table)``."""

from __future__ import annotations

from lakehouse import Lakehouse
from lakehouse.spark.source import register


def lakestream(spark, lh: Lakehouse, **options):
    register(spark, lh)
    reader = spark.read.format("lakestream").option("warehouse", lh.url)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader
