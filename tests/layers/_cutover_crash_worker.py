"""Runs `layers.bluegreen.cutover` and kills itself with SIGKILL at POINT (run as a module by
tests/layers/test_bluegreen.py): ``before_switch`` (the green tables tiered, the aliases not yet swapped) or
``after_switch`` (right after the aliases' compare-and-swap, before the deployment record and the build record's
removal). No Spark: the cutover is metadata and small tiering rounds."""

from __future__ import annotations

import sys

from lakehouse.lakehouse import Lakehouse
from layers import bluegreen
from layers.project import load_project
from tests.support.crash import die


def main() -> None:
    url, root, point = sys.argv[1], sys.argv[2], sys.argv[3]
    swap = bluegreen.write_aliases

    def write_aliases(*args, **kwargs):
        if point == "before_switch":
            die()
        swap(*args, **kwargs)
        if point == "after_switch":
            die()

    bluegreen.write_aliases = write_aliases
    bluegreen.cutover(Lakehouse.open(url, alias_cache_seconds=0), load_project(root))
    sys.exit(3)  # not killed: the point was never reached


if __name__ == "__main__":
    main()
