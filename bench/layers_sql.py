"""More SQL kept incrementally (issue 43): rounds of models beyond the inner join, against their full recompute.

A project of ``examples/tpch``'s sources and five models over them:

* ``dwd.orders_inner``: orders JOIN customer JOIN nation (``keyed``; the reference the issue measured);
* ``dwd.orders_left``: the same with LEFT JOINs (``keyed`` since a LEFT JOIN to a table on its whole key is
  many-to-one; before: ``recompute``);
* ``dwd.orders_ranked``: ``row_number() OVER (PARTITION BY o_custkey ORDER BY o_orderdate, o_orderkey)`` and a
  customer's total (``window``: the changed orders' customers, before and after, recomputed; before:
  ``recompute``);
* ``ads.customer_days``: ``SELECT DISTINCT o_custkey, o_orderdate`` (``regroup`` of its columns; before:
  ``recompute``);
* ``ads.orders_by_status``: a GROUP BY with ``count(*)`` and ``sum`` (``retract``), for scale.

The ODS (``--orders`` N orders, N/10 customers, 25 nations; bench/layers.py's generators, fixed seed) is appended
and tiered, a first ``run_once`` builds every model in full, then 1 % of the orders change (bench/layers.py's
``change``: updates, a third moving customer, deletes, new keys) and 1 % of the customers (renamed, half moving
nation). Timed per model: its incremental round (``run_once([model])``, in the driver unless the round passes the
budget) against ``rebuild(model)`` at the same state (the whole SQL recomputed and diffed: what every round cost a
model planned ``recompute``). Every rebuild must change nothing (the incremental state equals the recompute).
Runs at N and at 5N (``--sizes``).

    .venv/bin/python bench/layers_sql.py [--quick] [--sizes 20000,100000] [--only local|s3] [--out FILE]

File:// warehouse in a temporary directory; Spark local[2], one session. Prints Markdown.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
warnings.filterwarnings("ignore", category=FutureWarning, module="pyspark")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from tiering import machine, order_key  # noqa: E402

from lakehouse import Lakehouse  # noqa: E402
from layers.project import load_project  # noqa: E402
from layers.runner import Runner  # noqa: E402

# bench/layers.py's data and changes (loaded by path: its module name is the `layers` package's)
_spec = importlib.util.spec_from_file_location("bench_layers", ROOT / "bench" / "layers.py")
bench_layers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_layers)  # type: ignore[union-attr]

MODELS = {
    "dwd.orders_inner": """-- primary_key: [o_orderkey]
-- buckets: 4
SELECT o.o_orderkey, o.o_totalprice, o.o_orderdate, c.c_name, n.n_name
FROM ods.orders AS o JOIN ods.customer AS c ON o.o_custkey = c.c_custkey
JOIN ods.nation AS n ON c.c_nationkey = n.n_nationkey""",
    "dwd.orders_left": """-- primary_key: [o_orderkey]
-- buckets: 4
SELECT o.o_orderkey, o.o_totalprice, o.o_orderdate, c.c_name, n.n_name
FROM ods.orders AS o LEFT JOIN ods.customer AS c ON o.o_custkey = c.c_custkey
LEFT JOIN ods.nation AS n ON c.c_nationkey = n.n_nationkey""",
    "dwd.orders_ranked": """-- primary_key: [o_orderkey]
-- buckets: 4
SELECT o_orderkey, o_custkey, o_orderdate,
  row_number() OVER (PARTITION BY o_custkey ORDER BY o_orderdate, o_orderkey) AS nth_order,
  sum(o_totalprice) OVER (PARTITION BY o_custkey) AS customer_total
FROM ods.orders""",
    "ads.customer_days": """-- primary_key: [o_custkey, o_orderdate]
-- bucket_key: o_custkey
-- buckets: 4
SELECT DISTINCT o_custkey, o_orderdate FROM ods.orders""",
    "ads.orders_by_status": """-- primary_key: [o_orderstatus]
-- buckets: 1
SELECT o_orderstatus, count(*) AS n, sum(o_totalprice) AS total FROM ods.orders GROUP BY o_orderstatus""",
}
ODS = ("ods.nation", "ods.customer", "ods.orders")


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def project_dir(root: Path) -> Path:
    (root / "models").mkdir(parents=True)
    shutil.copy(ROOT / "examples" / "tpch" / "sources.yml", root / "sources.yml")
    for name, sql in MODELS.items():
        (root / "models" / f"{name}.sql").write_text(sql + "\n")
    return root


def measure(tmp: Path, n_orders: int, spark, project) -> list[dict]:
    lh = Lakehouse.open((tmp / f"wh-{n_orders}").as_uri())
    layers = Runner(lh, project, spark)
    layers.deploy()
    n_customers = max(100, n_orders // 10)
    rng = np.random.default_rng(25)
    bench_layers.append_all(lh, "ods.nation", bench_layers.nations())
    bench_layers.append_all(lh, "ods.customer", bench_layers.customers(np.arange(1, n_customers + 1), rng))
    bench_layers.append_all(lh, "ods.orders", bench_layers.orders(order_key(np.arange(n_orders)), rng, n_customers))
    bench_layers.tier_all(lh, ODS)
    t0 = time.perf_counter()
    layers.run_once()
    say(f"{n_orders:,} orders: first (full) round of {len(MODELS)} models in {time.perf_counter() - t0:.1f} s")
    changed = n_orders // 100
    bench_layers.change(lh, n_orders, changed, n_customers, max(1, n_customers // 100))
    rows = []
    for name in MODELS:
        (report,) = layers.run_once([name])
        rebuilt = layers.rebuild(name)
        assert (rebuilt.upserts, rebuilt.deletes) == (0, 0), f"{name}: incremental != recompute: {rebuilt}"
        rows.append(
            {
                "orders": n_orders,
                "model": name,
                "strategy": report.strategy,
                "round_s": report.seconds,
                "rebuild_s": rebuilt.seconds,
                "changes": report.input_changes,
                "affected": report.affected,
                "upserts": report.upserts,
                "deletes": report.deletes,
            }
        )
        say(f"{name}: {report.strategy} round {report.seconds:.2f} s, rebuild {rebuilt.seconds:.2f} s")
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="one small size (5,000 orders): a smoke run")
    p.add_argument("--sizes", default="20000,100000", help="orders, comma-separated (default N = 20,000 and 5N)")
    p.add_argument("--only", choices=["local", "s3"], help="local: the run; s3: nothing (file:// only)")
    p.add_argument("--out", type=Path, help="also write the Markdown here")
    args = p.parse_args()
    if args.only == "s3":
        print("bench/layers_sql.py: no S3 run (the figures are compute, not storage); nothing to do for --only s3")
        return
    sizes = [5_000] if args.quick else [int(s) for s in args.sizes.split(",")]

    from lakehouse.spark import spark_session

    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    spark = spark_session("local[2]")
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="lakestream-bench-layers-sql-") as name:
        tmp = Path(name)
        project = load_project(project_dir(tmp / "project"))
        for n in sizes:
            rows += measure(tmp, n, spark, project)
    out = [
        f"## More SQL kept incrementally (`bench/layers_sql.py`, {time.strftime('%Y-%m-%d')})",
        "",
        f"`{' '.join(['bench/layers_sql.py', *sys.argv[1:]])}`, started {started}. "
        f"{machine(('pyarrow', 'pyspark', 'sqlglot'))}",
        "",
        "| orders | model | strategy | input changes | affected | upserts / deletes | incremental round | full "
        "recompute (rebuild) | recompute / round |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        out.append(
            f"| {r['orders']:,} | `{r['model']}` | `{r['strategy']}` | {r['changes']:,} | {r['affected']:,} | "
            f"{r['upserts']:,} / {r['deletes']:,} | {r['round_s']:.2f} s | {r['rebuild_s']:.2f} s | "
            f"{r['rebuild_s'] / r['round_s']:.1f}x |"
        )
    text = "\n".join(out) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
