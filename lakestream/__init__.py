"""lakestream, the application: the `lakestream` command (`lakestream.cli`) and ``make demo``
(`lakestream.demo`), assembled from the packages below it (object_store < lakehouse < lakehouse.spark < layers <
quality; see docs/architecture.md)."""

from object_store.moved import keep_old_paths

# Until the next release: the streaming aggregate is a feature of the Spark adapter, not of the application.
keep_old_paths({"lakestream.streams": "lakehouse.spark.aggregate"})
