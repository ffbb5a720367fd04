"""A table's definition: its name, schema, keys and buckets (`definition`), how the schema evolves (`evolution`),
Iceberg's bucket function the log buckets by (`bucketing`), and the aliases a name may resolve through (`aliases`)."""
