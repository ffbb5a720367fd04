"""OpenLineage for the warehouse_layers tasks: `ModelSubmitOperator`, the SparkSubmitOperator of one model, tells
Airflow's OpenLineage provider what the task reads and writes: the model's input tables, its own table, and on
that table the model's column lineage (`layers.lineage`), so a lineage backend (Marquez, DataHub, ...) shows the
tables and their columns (dags/README.md, docs/guides/layers.md "Column lineage").

Not a DAG: Airflow parses it (it mentions DAGs), finds none, and moves on. At module level only the Spark provider
is imported. The OpenLineage provider and client, ``layers`` and ``lakehouse`` are imported when the provider's
listener asks a task for its lineage, which it does only on a worker where OpenLineage is configured (a
transport): parsing a DAG file never pays for them, and without a transport nothing here runs.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator


class ModelSubmitOperator(SparkSubmitOperator):
    """``spark-submit jobs/run_layers.py --project P --model M``: a round of model ``model`` of the project in
    folder ``project``, reporting to OpenLineage the model's inputs and its table with its columns' lineage
    (`model_lineage`), when the task starts and when it completes."""

    def __init__(self, *, project: str, model: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # Named apart from SparkSubmitOperator's own attributes.
        self.layers_project = project
        self.layers_model = model

    def get_openlineage_facets_on_start(self):
        return model_lineage(self.layers_project, self.layers_model)

    def get_openlineage_facets_on_complete(self, task_instance):
        # The same on completion: what a model reads and writes, column by column, is its SQL's, not the round's.
        return model_lineage(self.layers_project, self.layers_model)


def model_lineage(project: str, model: str, namespace: str | None = None):
    """The OpenLineage `OperatorLineage` of a round of ``model`` of the project in folder ``project``: an input
    dataset per table it reads, its table as the output dataset, each with a ``schema`` facet (the columns, and
    their Arrow types where the project declares or infers them), the output with the model's ``columnLineage``
    facet (`layers.lineage.openlineage_facet`).

    Datasets are named by their table (``namespace.table``) in OpenLineage namespace ``namespace``, by default the
    warehouse URL of the worker's settings (``LAKESTREAM_WAREHOUSE`` / ``LAKESTREAM_CONFIG``, as the job reads
    them), so the tables of one warehouse are the same datasets whichever DAG or job reports them.

    Raises:
        LakestreamError: the project does not load, or ``model`` is none of its models (the provider logs it as a
            warning and reports the task without lineage; the task itself is unaffected).
    """
    # Imported here: see the module's docstring.
    from airflow.providers.openlineage.extractors import OperatorLineage
    from openlineage.client.event_v2 import Dataset
    from openlineage.client.facet_v2 import column_lineage_dataset, schema_dataset

    from lakehouse.settings import load_settings
    from layers import load_project
    from layers.lineage import column_lineage, openlineage_facet

    loaded = load_project(project)
    namespace = namespace or load_settings().warehouse
    lineage = column_lineage(loaded)
    name = lineage.model(model).model  # the model's own spelling (case ignored, as the job ignores it)

    def schema(table: str) -> schema_dataset.SchemaDatasetFacet:
        arrow = loaded.schema_of(table)
        columns = (
            [(f.name, str(f.type)) for f in arrow]
            if arrow is not None
            else [(c, None) for c in loaded.models[table].column_names]  # types inferred only at deploy
        )
        return schema_dataset.SchemaDatasetFacet(
            fields=[
                schema_dataset.SchemaDatasetFacetFields(name=c, type=t, ordinal_position=i)
                for i, (c, t) in enumerate(columns, 1)
            ]
        )

    def input_field(field: dict) -> column_lineage_dataset.InputField:
        return column_lineage_dataset.InputField(
            namespace=field["namespace"],
            name=field["name"],
            field=field["field"],
            transformations=[column_lineage_dataset.Transformation(**t) for t in field["transformations"]],
        )

    facet = openlineage_facet(lineage, name, namespace=namespace)
    columns = column_lineage_dataset.ColumnLineageDatasetFacet(
        fields={
            column: column_lineage_dataset.Fields(inputFields=[input_field(f) for f in lineage_of["inputFields"]])
            for column, lineage_of in facet["fields"].items()
        },
        dataset=[input_field(f) for f in facet["dataset"]],
    )
    return OperatorLineage(
        inputs=[
            Dataset(namespace=namespace, name=table, facets={"schema": schema(table)})
            for table in loaded.models[name].inputs
        ],
        outputs=[Dataset(namespace=namespace, name=name, facets={"schema": schema(name), "columnLineage": columns})],
    )
