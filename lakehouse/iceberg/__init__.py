"""The Iceberg side of a table: the catalog on the object store (`catalog`, `fileio`, `lake_table`, `contention`),
how a table lies in Iceberg (`layout`), which log offsets its snapshots hold and the tiering fence (`offsets`),
loading a table's lake table (`load`), data and delete files (`datafiles`, `position_deletes`), the snapshots
a commit produces (`commits`), and metadata pinned to one snapshot (`pinned`)."""
