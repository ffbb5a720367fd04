"""A producer program that checkpoints as it streams and is killed with SIGKILL by its test (run as a script).

It sends chunk after chunk of rows with a random ``linger`` and ``batch_rows`` (so its batches depend on
timing), and every few chunks takes a `Producer.checkpoint` and stores it, with the number of the next chunk
(the source position), atomically in a JSON file: what a real job keeps in its own state store.
"""

from __future__ import annotations

import json
import os
import random
import sys

import pyarrow as pa

from lakehouse import Lakehouse
from lakehouse.log import ProducerCheckpoint


def chunk(table_name: str, i: int) -> pa.Table:
    """Chunk ``i`` of the source: 37 rows with ids i*1000 + j (the same rows every time it is read)."""
    ids = pa.array([i * 1000 + j for j in range(37)], pa.int64())
    return pa.table({"id": ids, "v": pa.array([f"c{i}" for _ in range(37)])})


def save(path: str, position: int, checkpoint: ProducerCheckpoint) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump({"position": position, "checkpoint": checkpoint.to_json()}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def run(url: str, options: dict, table: str, state: str, chunks: int, seed: int) -> int:
    """Stream chunks 0..chunks-1 from the stored position (resuming the stored checkpoint, if any)."""
    rng = random.Random(seed)
    lh = Lakehouse.open(url, **options)
    log = lh.log(table)
    if os.path.exists(state):
        with open(state) as f:
            saved = json.load(f)
        position, producer = saved["position"], log.producer(resume=saved["checkpoint"], linger=rng.uniform(0, 0.02))
    else:
        position = 0
        producer = log.producer(linger=rng.uniform(0, 0.02), batch_rows=rng.choice([50, 200, 1000]))
        save(state, 0, producer.checkpoint())
    for i in range(position, chunks):
        producer.send(chunk(table, i))
        if rng.random() < 0.2:
            save(state, i + 1, producer.checkpoint())
    producer.close()
    lh.close()
    return producer.rows_skipped


if __name__ == "__main__":
    url, options, table, state, chunks, seed = json.loads(sys.argv[1])
    print(json.dumps({"skipped": run(url, options, table, state, chunks, seed)}))
