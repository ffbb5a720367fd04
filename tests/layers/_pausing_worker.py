"""Runs `Runner.run_once` of one model in a process of its own and pauses it inside its round, just before its
appends, until a file appears (run as a module by tests/layers/test_model_lifecycle.py): the live runner another
process must not take the round from."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from lakehouse.lakehouse import Lakehouse
from layers.project import load_project
from layers.runner import Runner

if __name__ == "__main__":
    url, project, model, inside, gate = json.loads(sys.argv[1])

    class Pausing(Runner):
        def _append(self, record, upserts, deletes):
            Path(inside).write_text(str(record.number))
            while not Path(gate).exists():
                time.sleep(0.05)
            return super()._append(record, upserts, deletes)

    reports = Pausing(Lakehouse.open(url), load_project(project), spark_master="local[1]").run_once([model])
    print(json.dumps([r.to_json() for r in reports]), flush=True)
