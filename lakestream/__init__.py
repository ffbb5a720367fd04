"""lakestream, the application: the `lakestream` command (`lakestream.cli`) and ``make demo``
(`lakestream.demo`), assembled from the packages below it (object_store < lakehouse < lakehouse.spark < layers <
quality; see docs/architecture.md)."""
