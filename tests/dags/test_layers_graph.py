"""dags/_layers_graph.py: the warehouse_layers DAG's parse-time scan of a project, held to `load_project`."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from layers import load_project
from tests.support.projects import make_project, model

DAGS = Path(__file__).resolve().parents[2] / "dags"
EXAMPLE = DAGS.parent / "examples" / "tpch"


def _load_graph_module():
    spec = importlib.util.spec_from_file_location("_layers_graph", DAGS / "_layers_graph.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


graph_module = _load_graph_module()


def assert_scan_matches_the_project(folder: Path) -> dict:
    project = load_project(folder)
    graph = graph_module.layers_graph(folder)
    assert graph == {name: sorted(m.inputs) for name, m in sorted(project.models.items())}
    assert graph_module.model_order(graph) == list(project.order)
    return graph


def test_the_example_project() -> None:
    graph = assert_scan_matches_the_project(EXAMPLE)
    assert graph == {
        "ads.revenue_by_nation_month": ["dwd.orders_enriched"],
        "dwd.orders_enriched": ["ods.customer", "ods.nation", "ods.orders"],
    }


@pytest.mark.subprocess
def test_the_scan_does_not_import_heavy_modules() -> None:
    import subprocess

    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import _layers_graph as g; g.layers_graph(sys.argv[2]); "
        "heavy = [m for m in ('sqlglot', 'pyarrow', 'lakehouse', 'airflow', 'pyspark') if m in sys.modules]; "
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code, str(DAGS), str(EXAMPLE)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_comments_strings_backticks_case_comma_joins_ctes_and_subqueries(tmp_path: Path) -> None:
    models = {
        # a comment and a string naming ods.r do not make it an input; backticks and case are Spark's
        "dwd.a": model(
            """
            /* reads ods.r? no */
            SELECT f_id, 'ods.r' AS s, "ods.r" AS t FROM `ODS`.`f` -- JOIN ods.r
            """
        ),
        # a comma join, a CTE and a subquery in WHERE
        "dwd.b": model(
            """
            WITH x AS (SELECT d_id FROM ods.d)
            SELECT f.f_id FROM ods.f AS f, x WHERE f.f_dim = x.d_id
              AND f.f_dim IN (SELECT r_id FROM Ods.R)
            """
        ),
        # reads models; a three-part column reference is not a second table
        "ads.c": model(
            """
            SELECT a.f_id FROM dwd.a AS a JOIN dwd . b ON a.f_id = dwd.b.f_id
            """
        ),
    }
    graph = assert_scan_matches_the_project(make_project(tmp_path, models))
    assert graph["dwd.a"] == ["ods.f"]
    assert graph["dwd.b"] == ["ods.d", "ods.f", "ods.r"]
    assert graph["ads.c"] == ["dwd.a", "dwd.b"]


def test_a_missing_project_and_a_cycle_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a warehouse-layers project .* LAKESTREAM_LAYERS_PROJECT"):
        graph_module.layers_graph(tmp_path)
    with pytest.raises(ValueError, match="cycle among dwd.a, dwd.b"):
        graph_module.model_order({"dwd.a": ["dwd.b"], "dwd.b": ["dwd.a"], "dwd.c": []})
