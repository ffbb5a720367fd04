"""PySpark without jars: a session builder and a distributed read of lakestream tables.

Spark never touches S3 or Iceberg through the JVM here (no iceberg-spark-runtime, no hadoop-aws): the
driver plans with pyiceberg and the Python workers do all IO with pyarrow, through the ``lakestream``
Python data source (`lakehouse.spark.source`) that every session of `spark_session` has.

    spark = spark_session(master="local[2]")
    df = spark.read.format("lakestream").option("warehouse", url).load("ods.orders")   # one task per bucket
    df = read_table(spark, lh, "ods.orders", union=True)     # the same, on a Lakehouse's store
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from lakehouse.errors import ConfigError, InvalidArgument
from lakehouse.read.union import RowFilter

# PySpark 4.2 warns at import and at every Arrow UDF that it "does not yet fully support pandas >= 3.0.0" (pandas 3
# comes with Great Expectations); lakestream's Spark paths exchange Arrow batches, not pandas, and the warning
# filled every Airflow task log. Silenced for the processes that import this module (the jobs' drivers).
warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas", category=FutureWarning)

#: The part after ``spark.sql.execution.arrow.`` of the conf `spark_session` lowers (see there).
LOCAL_RELATION_THRESHOLD = "localRelationThreshold"
#: Masters Spark accepts (its check: "yarn", or starting with "spark", "k8s" or "local").
MASTER = re.compile(r"local(\[(\d+|\*)(,\s*\d+)?\])?|local-cluster\[.+\]|spark://.+|yarn|k8s://.+")

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakehouse.lakehouse import Lakehouse


def spark_session(
    master: str | None = None, *, app_name: str = "lakestream", scheduler_only: bool = False, **conf: str
) -> SparkSession:
    """A Spark session for lakestream jobs. Under spark-submit the master comes from spark-submit unless
    given. Sets the Python workers to this interpreter and Spark to loopback unless already set.

    A local master's driver JVM also runs the tasks' JVM side. ``scheduler_only`` says it does little else
    (tiering, maintenance: the work is in the Python workers): serial GC and the C1-only JIT then save most of
    its CPU. Otherwise (Spark SQL: layers, checks, the demo) it joins and aggregates: the full JIT (a GROUP BY
    runs about twice as fast) and G1, whose short pauses keep `layers.follow`'s rounds even (the parallel GC's
    full collections stalled single rounds for seconds; docs/guides/layers.md, "Spark sessions")."""
    if master and not MASTER.fullmatch(master):
        raise ConfigError(
            f"Spark master {master!r} is not one Spark accepts: use local, local[N], local[*], spark://host:port, "
            "yarn or k8s://https://host:port (or tier with --local, without Spark)"
        )
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.errors import PySparkException
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    defaults = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "8",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # Arrow tables given to createDataFrame (a layers round's restricted inputs) above 1 MiB become an RDD of
        # their batches, not a LocalRelation (Spark's default up to 48 MiB): a local relation's rows are
        # serialized into every task of every query (a round's aggregations ran several times slower) and filled
        # the driver's heap; below 1 MiB it keeps its statistics, so joins broadcast it
        f"spark.sql.execution.arrow.{LOCAL_RELATION_THRESHOLD}": str(1 << 20),
        "spark.python.worker.reuse": "true",
        "spark.python.daemon.module": "lakehouse.executor.spark_daemon",  # workers fork with imports done
    }
    if (master or "").startswith("local"):
        # Only when Python starts the JVM (under spark-submit its options come from spark-submit). A JVM that
        # only schedules (tasks do their work in Python workers) shares the cores with them: serial GC and
        # C1-only JIT halve its CPU (1.5 -> 0.6 CPU-s per 10 M-row tiering round).
        defaults["spark.driver.extraJavaOptions"] = (
            "-XX:+UseSerialGC -XX:TieredStopAtLevel=1" if scheduler_only else "-XX:+UseG1GC"
        )
    for key, value in {**defaults, **conf}.items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except PySparkException as exc:  # the JVM did not start: no Java, a master it refused, no memory
        raise ConfigError(
            f"could not start Spark (master {master or 'from spark-submit'}): {' '.join(str(exc).split())}. Check "
            "that Java 17 is installed (JAVA_HOME) and the master is reachable; Spark's own output above says more"
        ) from None
    quiet_logs(spark)
    watch_executors(spark)
    from lakehouse.spark.source import register

    register(spark)  # spark.read.format("lakestream"), with the settings' store
    return spark


#: The Spark conf that sets how long a job may wait with no executor before `watch_executors` cancels it.
EXECUTOR_WAIT_CONF = "spark.lakestream.executorWaitSeconds"
#: Its default on a cluster master (standalone, YARN, Kubernetes); local masters are never watched.
DEFAULT_EXECUTOR_WAIT = 300.0


def watch_executors(spark: SparkSession, wait: float | None = None, poll: float = 1.0) -> threading.Thread | None:
    """Cancel the running jobs, with a reason on stderr, once the application *lost* every executor it had and a
    job has waited ``wait`` seconds (default: the conf `EXECUTOR_WAIT_CONF`, else `DEFAULT_EXECUTOR_WAIT`; 0
    turns it off) without a single one.

    A standalone driver whose worker died waits for executors for good, saying only "Initial job has not
    accepted any resources" every 15 s: with this the action fails instead, so Airflow's retry can run it again
    once a worker is back (a worker back within the wait just takes over: the master gives the app new
    executors). An application that never had an executor is waiting its turn on a busy cluster, or for a
    worker to come back (a retry): it is left waiting (the task's timeout is the backstop). Local masters run
    tasks in the driver: not watched. Returns the daemon thread, or None when not watching."""
    sc = spark.sparkContext
    master = sc.master or ""
    if wait is None:
        raw = sc.getConf().get(EXECUTOR_WAIT_CONF, None)
        try:
            wait = float(raw) if raw not in (None, "") else DEFAULT_EXECUTOR_WAIT
        except ValueError:
            raise ConfigError(f"{EXECUTOR_WAIT_CONF}={raw!r} is not a number of seconds (0 turns it off)") from None
    if master.startswith("local") or wait <= 0:
        return None
    jsc = sc._jsc.sc()
    tracker = sc.statusTracker()

    def ever_had_executors() -> bool:
        # Spark's status store lists every executor the application had, lost ones too: an executor that came and
        # went between two polls (a worker killed a second after the first task) still counts
        summaries = jsc.statusStore().executorList(False)
        return any(summaries.apply(i).id() != "driver" for i in range(summaries.size()))

    def run() -> None:
        starved_since: float | None = None
        had_executors = False
        while not jsc.isStopped():
            try:
                executors = jsc.getExecutorIds().size()
                had_executors = had_executors or executors > 0 or (executors == 0 and ever_had_executors())
                starved = had_executors and executors == 0 and bool(tracker.getActiveJobsIds())
            except Exception:  # noqa: BLE001 (the context is stopping)
                return
            now = time.monotonic()
            starved_since = (starved_since or now) if starved else None
            if starved_since is not None and now - starved_since >= wait:
                print(
                    f"lakestream: no Spark executor for {wait:.0f}s while a job waited, after every executor was lost "
                    f"(master {master}: is a worker alive and registered? the master's web UI lists them); cancelling "
                    f"the running jobs (set {EXECUTOR_WAIT_CONF} to wait longer, 0 to wait for good)",
                    file=sys.stderr,
                    flush=True,
                )
                try:
                    sc.cancelAllJobs()
                except Exception:  # noqa: BLE001
                    return
                starved_since = None
            time.sleep(poll)

    thread = threading.Thread(target=run, name="lakestream-executor-watch", daemon=True)
    thread.start()
    return thread


#: Loggers whose WARN lines lakestream jobs print on every run and that say nothing wrong.
NOISY_LOGGERS = (
    "org.apache.spark.sql.execution.datasources.DataSourceManager",  # "replaced a previously registered" (register)
)


def quiet_logs(spark: SparkSession) -> None:
    """Spark's log at WARN, but `NOISY_LOGGERS` at ERROR. Not ERROR for all: when a standalone master has no
    worker left, the driver waits for executors for good and only a WARN from TaskSchedulerImpl ("Initial job has
    not accepted any resources; check your cluster UI to ensure that workers are registered and have sufficient
    resources") says why; lost executors and failed task attempts are WARNs too."""
    spark.sparkContext.setLogLevel("WARN")
    try:
        jvm = spark.sparkContext._jvm
        assert jvm is not None  # a driver's context has its JVM
        level = jvm.org.apache.logging.log4j.Level.ERROR
        for name in NOISY_LOGGERS:
            jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, level)
    except Exception:  # no log4j 2 core in the JVM: the noise stays, nothing else changes
        pass


def read_table(
    spark: SparkSession,
    lh: Lakehouse,
    name: str,
    *,
    union: bool = True,
    columns: Sequence[str] | None = None,
    row_filter: RowFilter = None,
    as_of: Mapping[int, int] | None = None,
    ref: str | None = None,
    snapshot_id: int | None = None,
) -> DataFrame:
    """A DataFrame over the table: the lake snapshot (plus the log tail, if ``union``; as of log offsets with
    ``as_of``, as `Lakehouse.union_read` and `Lakehouse.lake_read`), one Spark task per bucket:
    ``spark.read.format("lakestream")`` on ``lh``'s warehouse (whose store this binds, see
    `lakehouse.spark.source.register`). Spark plans (the snapshot, offsets and log ends are fixed) when the
    DataFrame is first analysed for an action. ``ref`` (e.g. ``"published"``): the lake at that tag or branch
    only, whatever ``union`` says (not with ``as_of``); ``snapshot_id``: the lake at that snapshot only, however
    late Spark plans (not with ``as_of`` or ``ref``)."""
    from lakehouse.spark.source import register

    register(spark, lh)
    reader = spark.read.format("lakestream").option("warehouse", lh.url).option("lake_only", str(not union).lower())
    if columns is not None:
        reader = reader.option("columns", ",".join(columns))
    if row_filter is not None:
        reader = reader.option("filter", filter_text(row_filter))
    if as_of is not None:
        reader = reader.option("as_of", _offsets_text(as_of))
    if ref is not None:
        reader = reader.option("ref", ref)
    if snapshot_id is not None:
        reader = reader.option("snapshot_id", str(int(snapshot_id)))
    # resolved through the table aliases here, once: the source reads this physical table
    return reader.option("physical", "true").load(str(lh.resolve(name)))


def read_changes(
    spark: SparkSession,
    lh: Lakehouse,
    name: str,
    start: Mapping[int, int],
    end: Mapping[int, int],
    *,
    columns: Sequence[str] | None = None,
    before_images: bool = False,
) -> DataFrame:
    """A DataFrame of the table's net changelog between the offset maps ``start`` and ``end`` (as
    `Lakehouse.changes`: ``columns`` plus the primary key, ``__bucket``, ``__offset``, ``__timestamp`` and
    ``_op``), read by Spark tasks, one per bucket with changes."""
    from lakehouse.spark.source import register

    register(spark, lh)
    reader = (
        spark.read.format("lakestream")
        .option("warehouse", lh.url)
        .option("changes", "true")
        .option("start", _offsets_text(start))
        .option("end", _offsets_text(end))
        .option("before_images", str(before_images).lower())
    )
    if columns is not None:
        reader = reader.option("columns", ",".join(columns))
    # resolved through the table aliases here, once: the source reads this physical table
    return reader.option("physical", "true").load(str(lh.resolve(name)))


def _offsets_text(offsets: Mapping[int, int]) -> str:
    return ",".join(f"{int(b)}:{int(o)}" for b, o in sorted(offsets.items()))


def filter_text(row_filter: RowFilter) -> str:
    """``row_filter`` in Iceberg's filter syntax (a string as given; a pyiceberg expression written out)."""
    from pyiceberg import expressions as ex

    if isinstance(row_filter, str):
        return row_filter
    ops: dict[type, str] = {
        ex.EqualTo: "=",
        ex.NotEqualTo: "!=",
        ex.LessThan: "<",
        ex.LessThanOrEqual: "<=",
        ex.GreaterThan: ">",
        ex.GreaterThanOrEqual: ">=",
    }

    def literal(value: Any) -> str:
        if isinstance(value, bool):
            return str(value).lower()
        if isinstance(value, str):
            return "'" + value.replace("'", "''") + "'"
        if isinstance(value, (int, float, Decimal)):
            return str(value)
        raise InvalidArgument(f"row_filter: cannot write the literal {value!r} as Iceberg filter text; give a string")

    def column(term: Any) -> str:
        return '"' + term.name.replace('"', '\\"') + '"'

    def text(e: Any) -> str:
        if isinstance(e, ex.AlwaysTrue):
            return "true"
        if isinstance(e, ex.AlwaysFalse):
            return "false"
        if isinstance(e, ex.And):
            return f"({text(e.left)} and {text(e.right)})"
        if isinstance(e, ex.Or):
            return f"({text(e.left)} or {text(e.right)})"
        if isinstance(e, ex.Not):
            return f"not ({text(e.child)})"
        if type(e) in ops:
            return f"{column(e.term)} {ops[type(e)]} {literal(e.literal.value)}"
        if isinstance(e, (ex.In, ex.NotIn)):
            values = ", ".join(sorted(literal(v.value) for v in e.literals))
            return f"{column(e.term)} {'not in' if isinstance(e, ex.NotIn) else 'in'} ({values})"
        if isinstance(e, ex.IsNull):
            return f"{column(e.term)} is null"
        if isinstance(e, ex.NotNull):
            return f"{column(e.term)} is not null"
        if isinstance(e, (ex.StartsWith, ex.NotStartsWith)):
            like = literal(e.literal.value + "%")
            return f"{column(e.term)} {'not like' if isinstance(e, ex.NotStartsWith) else 'like'} {like}"
        raise InvalidArgument(f"row_filter: cannot write {e!r} as Iceberg filter text; give the filter as a string")

    if not isinstance(row_filter, ex.BooleanExpression):
        raise InvalidArgument(f"row_filter must be a string or a pyiceberg expression, not {type(row_filter).__name__}")
    return text(row_filter)
