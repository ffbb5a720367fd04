"""The read path, counted: which modules a union read and a quality check pass through, how often they go back and
forth between them, and how many times one read computes the lake's offsets.

Nothing here is timed: the figures are counts from a profiler hook (`sys.setprofile`, threads included) over one
union read and one reconciliation of a small primary-key table with a log tail, on a local warehouse. Run it on two
checkouts to compare layouts (`git worktree add /tmp/before <commit>`, then `python /tmp/before/bench/read_path.py`):

    python bench/read_path.py [--json]

Figures per operation: *rooms*, the distinct project modules entered; *crossings*, the changes of module from one
call to the next among project functions (a read that keeps to one module per step crosses little); *offsets
computed*, the calls that derive the lake's offsets from metadata (``lake_offsets`` / ``offsets_in_snapshot``);
*lake loads*, the calls of ``load_lake_table``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa  # noqa: E402

from lakehouse import Lakehouse  # noqa: E402

PACKAGES = ("object_store", "lakehouse", "layers", "quality")
SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


class PathCounter:
    """Counts the project modules and functions one operation calls (every thread)."""

    def __init__(self) -> None:
        self.modules: list[str] = []
        self.functions: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __call__(self, frame, event, arg):  # noqa: ANN001 - sys.setprofile's signature
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith(PACKAGES):
            return
        with self._lock:
            if not self.modules or self.modules[-1] != module:
                self.modules.append(module)
            self.functions[frame.f_code.co_name] += 1

    def __enter__(self) -> PathCounter:
        threading.setprofile(self)
        sys.setprofile(self)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(None)
        threading.setprofile(None)

    def figures(self) -> dict[str, object]:
        return {
            "rooms": len(set(self.modules)),
            "crossings": max(0, len(self.modules) - 1),
            "offsets_parsed": self.functions["offsets_in_snapshot"],
            "lake_loads": self.functions["load_lake_table"],
            "modules": sorted(set(self.modules)),
            "pairs": [
                f"{a} <-> {b}: {n}"
                for (a, b), n in Counter(
                    tuple(sorted((x.rpartition(".")[2], y.rpartition(".")[2])))
                    for x, y in zip(self.modules, self.modules[1:], strict=False)
                ).most_common(4)
            ],
        }


def build(root: Path) -> Lakehouse:
    lh = Lakehouse.open(root.as_uri())
    lh.create_table("ods.t", SCHEMA, primary_key=["id"], buckets=4)
    log = lh.log("ods.t")
    for round_ in range(3):
        ids = pa.array(range(round_ * 50, round_ * 50 + 200), pa.int64())
        log.append(pa.table({"id": ids, "v": pa.array([f"r{round_}"] * len(ids))}), "upsert")
        lh.tier("ods.t")
    log.append(pa.table({"id": pa.array([1, 2, 3], pa.int64()), "v": pa.array(["tail"] * 3)}), "upsert")
    return lh


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    from quality.reconcile import reconcile  # noqa: PLC0415 - the quality package only for its operation

    with tempfile.TemporaryDirectory() as tmp:
        lh = build(Path(tmp))
        lh.union_read("ods.t")  # warm: first imports and caches are not the read path
        reconcile(lh, "ods.t")
        out = {}
        with PathCounter() as read:
            rows = lh.union_read("ods.t").num_rows
        out["union_read"] = {**read.figures(), "rows": rows}
        with PathCounter() as check:
            result = reconcile(lh, "ods.t")
        out["reconcile"] = {**check.figures(), "ok": not result.violations}
    if args.json:
        print(json.dumps(out))
        return
    for op, figures in out.items():
        print(
            f"{op:<11} rooms {figures['rooms']:>3}  crossings {figures['crossings']:>5}  "
            f"offsets parsed {figures['offsets_parsed']:>3}  lake loads {figures['lake_loads']:>2}"
        )
        print(f"{'':<11} most crossed: {'; '.join(figures['pairs'])}")
        print(f"{'':<11} modules: {', '.join(figures['modules'])}")


if __name__ == "__main__":
    main()
