"""What the test suite shares: its tiers, hypothesis profiles, the crash harness and builders used by several modules.

Test modules import from here, never from each other (a split of the suite by file then drags nothing along).

- ``tiers``: the fast / process tiers, derived at collection, and the fast tier's guard against starting a process.
- ``profiles``: the hypothesis profiles (ci, dev, thorough) and ``examples(n)`` scaling every example count.
- ``crash``: the crash harness: ``die()`` (SIGKILL of this process at a worker's named point), ``kill(pid)`` (the
  driver's, from a Spark task), ``run_worker`` / ``start_worker`` (``python -m tests...._worker`` with the repo on
  PYTHONPATH), ``assert_killed`` and ``crash`` (run the worker, check it died of SIGKILL; the test then reruns).
- ``stores``: ``new_store_spec`` (a fresh store's url and options, local or SeaweedFS) and ``catalog_properties``.
- ``keyed_tables``: the keyed table ``ods.t`` (SCHEMA, USER, BUCKETS, NAME), ``batch``, ``build`` (six rounds of
  changes, tiered and compacted in between) and ``oracle`` (its reads as of offsets, from the log alone).
- ``rogue``: another writer's commits to a lake table: ``rogue_commit``, ``rewrite``, and ``live_files``.
- ``orders_tables``: an orders table (ORDERS, USER_COLS, ``orders``) and what tiering tests read back: ``rows``,
  ``log_records``, ``replay``, ``lake_state``, ``referenced_files``, ``data_files_in_store``.
- ``projects``: layers project folders: ``make_project``, ``model``, the star ``SOURCES``, the ``EXAMPLE`` project.
- ``example_ods``: the example project's warehouse: ODS, ALL, N_NATIONS / N_CUSTOMERS / N_ORDERS, ``load_ods``.
- ``alerting``: ``routing_for`` (an alert routing to a hooks server) and ``lost_rows`` (a failed reconciliation).
- ``spark_reads``: ``lakestream(spark, lh, **options)``, a Spark reader of the lakestream format.
"""
