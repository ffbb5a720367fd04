"""The native stack (no Docker; docs/guides/deploy.md): services.py starts, stops and reports its services
(``python -m stack up|down|status``: ``make stack|stack-down|stack-status``); airflow_api.py and scenario.py drive
it as a user does (the end-to-end test, the benchmark). Not an installed package: run from the repository."""
