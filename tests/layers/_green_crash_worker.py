"""Runs `layers.bluegreen.build_green` and kills itself with SIGKILL once the first green round's intent is
written (run as a module by tests/layers/test_bluegreen.py). It dies before any Spark work: no session starts."""

from __future__ import annotations

import sys

from lakehouse.lakehouse import Lakehouse
from layers.bluegreen import build_green
from layers.project import load_project
from layers.runner import Runner
from tests.support.crash import die


def main() -> None:
    url, root = sys.argv[1], sys.argv[2]
    Runner._hold_boundary = lambda self, name: die()  # noqa: SLF001
    build_green(Lakehouse.open(url), load_project(root), None)


if __name__ == "__main__":
    main()
