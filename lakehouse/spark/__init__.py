"""lakehouse's Spark adapter: sessions and the ``lakestream`` data source, above the facade (which takes a session
or an executor as an argument and never starts Spark itself).

    session.py  spark_session (no jars; registers the format), read_table, read_changes, watch_executors
    source.py   spark.read.format("lakestream"): a Python data source executing the read plan
    stream.py   spark.readStream.format("lakestream"): a table's net changes, micro-batch by micro-batch
    sink.py     df.write / df.writeStream .format("lakestream"): appends from the tasks, exactly once
    options.py  what they share about options (names checked, offset maps, flags)
    aggregate.py aggregate_changes: a Structured Streaming aggregate of a table's changes kept in another table

The task executor that runs tiering and compaction tasks on Spark is a backend of the core's executors
(`lakehouse.executor.spark`): it needs a session, not this package.
"""

from __future__ import annotations

# session first: it silences PySpark's pandas warning before pyspark is imported
from lakehouse.spark.session import filter_text, quiet_logs, read_changes, read_table, spark_session, watch_executors
from lakehouse.spark.source import register

__all__ = ["filter_text", "quiet_logs", "read_changes", "read_table", "register", "spark_session", "watch_executors"]
