"""`quality.expectations` is a package of one job per module; the names it had as one module are still its own."""

from __future__ import annotations

import quality.expectations as qx
from quality.expectations import membership, reads, results, suites


def test_the_module_s_names_are_the_package_s_parts() -> None:
    assert qx.load_suite is suites.load_suite and qx.load_suites is suites.load_suites
    assert qx.parse_suite is suites.parse_suite and qx.check_suite is suites.check_suite
    assert qx.Suite is suites.Suite and qx.Reference is suites.Reference and qx.LAKE_COLUMNS is suites.LAKE_COLUMNS
    assert qx.upstream_positions is reads.upstream_positions and qx._sample is reads.sample_rows
    assert qx.DOCS_PREFIX == results.DOCS_PREFIX and qx._LIST_LIMIT == results.LIST_LIMIT
    assert {"run_suite", "run_suites", "driver_budget", "VALUE_LIST_FLOOR"} <= set(qx.__all__)
    assert membership.memberships is qx.memberships
