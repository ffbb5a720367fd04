"""A layers project over an evolved source (`lakehouse.table.evolution`): a model reading a dropped or renamed column
fails at ``layers validate`` naming it; a ``SELECT *`` model's table gets an added column at the next deploy."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from lakehouse import Lakehouse
from lakestream.cli.layers import layers_app
from layers import load_project
from layers.deployer import Deployer
from layers.errors import DeployMismatch, ModelSqlError
from tests.support.projects import make_project, model

BEFORE = """
sources:
  ods.s:
    columns: {k: int64, a: int64, b: string}
    primary_key: [k]
    buckets: 2
"""
AFTER = """
sources:
  ods.s:
    columns: {k: int64, a2: int64, c: string}
    primary_key: [k]
    buckets: 2
"""
MODELS = {"dwd.all": model("SELECT * FROM ods.s", "[k]"), "dwd.ab": model("SELECT k, a, b FROM ods.s", "[k]")}


def deployer(lh: Lakehouse, root) -> Deployer:
    return Deployer(lh, load_project(root), lambda: pytest.fail("no Spark needed"))


def test_select_star_models_get_the_added_column_and_readers_of_renamed_ones_fail_validate(tmp_path) -> None:
    lh = Lakehouse.open((tmp_path / "wh").as_uri())
    root = make_project(tmp_path / "p1", MODELS, BEFORE)
    assert sorted(deployer(lh, root).deploy()) == ["dwd.ab", "dwd.all", "ods.s"]

    lh.alter_table("ods.s", rename="a:a2", drop_columns="b", add_columns="c:string")
    with pytest.raises(DeployMismatch, match=r"ods.s: sources.yml .* lakestream table alter"):
        deployer(lh, root).deploy()  # the declaration is behind the table: said, nothing changed

    root = make_project(tmp_path / "p2", MODELS, AFTER)  # the declaration follows the alter
    with pytest.raises(ModelSqlError, match=r"Column 'a' could not be resolved") as caught:
        load_project(root)
    assert "dwd.ab" in str(caught.value)
    result = CliRunner().invoke(layers_app, ["validate", "--project", str(root)])
    assert result.exit_code == 1 and "'a'" in result.output

    star = {"dwd.all": MODELS["dwd.all"]}
    added = AFTER.replace("a2: int64, c: string", "a: int64, b: string, c: string")
    lh2 = Lakehouse.open((tmp_path / "wh2").as_uri())
    deployer(lh2, make_project(tmp_path / "p3", star, BEFORE)).deploy()
    lh2.alter_table("ods.s", add_columns="c:string")
    assert deployer(lh2, make_project(tmp_path / "p4", star, added)).deploy() == []
    assert lh2.table("dwd.all").schema.names == ["k", "a", "b", "c"]  # the next deploy added it
    assert lh2.table("dwd.all").schema_version == 1
