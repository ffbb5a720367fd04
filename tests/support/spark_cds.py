"""A class-data-sharing archive of Spark's classes, so that every Spark driver the suite starts loads them mapped.

Most Spark JVMs a test run starts live seconds on small data (a `dag.test()`'s spark-submit, a crash worker, the
demo), and loading and verifying Spark's classes is a large part of their CPU. Java's dynamic class-data sharing
(JDK 13+) dumps the classes one session loaded into an archive (``-XX:ArchiveClassesAtExit``); later JVMs with the
same class path map it (``-XX:SharedArchiveFile``) instead of loading the classes again. A JVM whose class path or
Java differs from the archive's ignores it and loads classes as usual: the archive can make a JVM faster, never
wrong. `make install` dumps it once (``python -m tests.support.spark_cds PATH``); tests/conftest.py passes it to
every Spark driver through ``SPARK_SUBMIT_OPTS`` when the file exists.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: Where `make install` puts it: inside the virtualenv, so a new environment dumps its own.
DEFAULT_ARCHIVE = Path(sys.prefix) / "spark-classes.jsa"
#: The JIT flag the suite's drivers run with (tests/conftest.py); the archive is dumped under it.
JIT = "-XX:TieredStopAtLevel=1"

#: A session that touches what the suite's drivers use: SQL with a shuffle, a join and a window, Arrow both ways,
#: a Python UDF over Arrow batches (mapInArrow) and lakestream's data source registered.
_WARM_UP = """
import pyarrow as pa
from lakehouse.spark.session import spark_session
spark = spark_session(master="local[2]", app_name="cds-warm-up")
rows = pa.table({"k": list(range(100)), "v": [str(i) for i in range(100)]})
df = spark.createDataFrame(rows)
df.join(df.groupBy("k").count(), "k").count()
spark.sql("SELECT k, row_number() OVER (PARTITION BY k % 3 ORDER BY k) AS r FROM VALUES (1), (2) AS t(k)").collect()
df.mapInArrow(lambda batches: batches, df.schema).toArrow()
spark.stop()
"""


def dump(archive: Path) -> bool:
    """Dump the archive (replacing an older one); True if it was written."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_SUBMIT_OPTS": f"{JIT} -XX:ArchiveClassesAtExit={partial}",
    }
    done = subprocess.run([sys.executable, "-c", _WARM_UP], env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0 or not partial.exists():
        print(f"no Spark class archive (the suite runs without it): {done.stderr.strip()[-500:]}", file=sys.stderr)
        partial.unlink(missing_ok=True)
        return False
    partial.replace(archive)
    return True


def driver_options(archive: Path = DEFAULT_ARCHIVE) -> str:
    """The options of the suite's Spark drivers: the JIT flag, and the archive when there is one."""
    return f"{JIT} -XX:SharedArchiveFile={archive}" if archive.is_file() else JIT


if __name__ == "__main__":
    sys.exit(0 if dump(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_ARCHIVE) else 1)
