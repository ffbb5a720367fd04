"""pyiceberg's shared thread pool, made to carry the caller's context (usage scopes, `object_store.usage`).

pyiceberg writes a commit's manifests and reads manifests on one process-wide pool
(`pyiceberg.utils.concurrent.ExecutorFactory`); its threads would count their requests in no operation's scope.
`carry_context` swaps that pool for a `ContextThreadPoolExecutor` of the same size, once per process; an
`ObjectStoreCatalog` calls it when it is made.
"""

from __future__ import annotations

import os
import threading

from pyiceberg.utils.concurrent import ExecutorFactory

from object_store.usage import ContextThreadPoolExecutor

_LOCK = threading.Lock()


def carry_context() -> None:
    """Make pyiceberg's shared pool run each task in its submitter's context (idempotent; a forked child's pool
    is pyiceberg's own again until this is called in it)."""
    pid = os.getpid()
    with _LOCK:
        current = ExecutorFactory._instance
        if ExecutorFactory._instance_pid == pid and isinstance(current, ContextThreadPoolExecutor):
            return
        # the pool it replaces finishes what it runs and is collected; nothing is cancelled
        ExecutorFactory._instance = ContextThreadPoolExecutor(max_workers=ExecutorFactory.max_workers())
        ExecutorFactory._instance_pid = pid
