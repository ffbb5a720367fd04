"""`LakeFileIO`: pyiceberg's `PyArrowFileIO`, whose writes to S3 go through lakestream's object store.

An Iceberg append writes three small files before its commit (data file, manifest, manifest list), and a
retried commit writes the last two again, all inside the window between reading the table's state and
the pointer CAS. pyarrow's S3 output stream costs a small file several times what one boto3 PutObject
does (BENCHMARKS.md, the catalog). `LakeFileIO` writes ``s3://`` locations
with `object_store.ObjectStore.open_writer`: one PUT up to 8 MiB, a multipart upload above (memory
stays bounded), nothing visible if the writer fails. ``create(overwrite=False)`` is atomic
(``If-None-Match: *``) where pyarrow checks and then writes. Reads, deletes and other schemes are
pyarrow's, unchanged, so scans and everything else keep working as with `PyArrowFileIO`.

Any pyiceberg user can choose it by configuration::

    load_catalog("x", **{"py-io-impl": "lakehouse.iceberg.fileio.LakeFileIO", "s3.endpoint": ..., ...})

`lakehouse.iceberg.catalog.ObjectStoreCatalog` uses it for its tables unless ``py-io-impl`` is set. Writes
use the properties in `STORE_OPTION_PROPERTIES` (endpoint, region, static credentials; else boto3's
credential chain); pyiceberg's other S3 properties (``s3.role-arn``, ``s3.proxy-uri``, ...) reach only
the pyarrow reads, so set ``py-io-impl`` to ``pyiceberg.io.pyarrow.PyArrowFileIO`` if writes need them.
"""

from __future__ import annotations

import threading
from typing import Any
from urllib.parse import urlparse

from pyiceberg.io import InputFile, OutputFile, OutputStream
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.typedef import EMPTY_DICT, Properties

from object_store import MiB, NotFound, ObjectStore, PreconditionFailed, open_store, validate_key
from object_store.multipart import ObjectWriter

#: Our store's options and the pyiceberg FileIO properties that carry the same values.
STORE_OPTION_PROPERTIES = {
    "endpoint_url": "s3.endpoint",
    "region": "s3.region",
    "access_key_id": "s3.access-key-id",
    "secret_access_key": "s3.secret-access-key",
    "session_token": "s3.session-token",
}

S3_SCHEMES = ("s3", "s3a", "s3n")
#: Files up to one part are one PUT; larger ones a multipart upload of parts this size.
PART_SIZE = 8 * MiB


class LakeFileIO(PyArrowFileIO):
    """`PyArrowFileIO` whose ``new_output`` for ``s3://`` locations writes through an `ObjectStore`."""

    def __init__(self, properties: Properties = EMPTY_DICT) -> None:
        super().__init__(properties)
        self._stores: dict[str, ObjectStore] = {}
        self._stores_lock = threading.Lock()

    # pyiceberg narrows PyArrowFileIO.new_output to PyArrowFile; FileIO's contract, which callers rely on, is OutputFile
    def new_output(self, location: str) -> OutputFile:  # type: ignore[override]
        parsed = urlparse(location)
        if parsed.scheme not in S3_SCHEMES:
            return super().new_output(location)
        return StoreOutputFile(location, self._store(parsed.netloc), parsed.path.lstrip("/"), self)

    def _store(self, bucket: str) -> ObjectStore:
        with self._stores_lock:
            store = self._stores.get(bucket)
            if store is None:
                options = {ours: self.properties.get(theirs) for ours, theirs in STORE_OPTION_PROPERTIES.items()}
                store = self._stores[bucket] = open_store(f"s3://{bucket}", **options)
            return store

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.pop("_stores", None)
        state.pop("_stores_lock", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._stores = {}
        self._stores_lock = threading.Lock()


class StoreOutputFile(OutputFile):
    """An ``s3://`` location written through an `ObjectStore`; read back through the FileIO (pyarrow)."""

    def __init__(self, location: str, store: ObjectStore, key: str, io: LakeFileIO) -> None:
        super().__init__(location)
        self._store, self._key, self._io = store, key, io
        self._written: int | None = None

    def __len__(self) -> int:
        """The size of what this file wrote (pyiceberg asks after each data file and manifest), else a HEAD."""
        if self._written is not None:
            return self._written
        try:
            return self._store.head(self._key).size
        except NotFound:  # pyiceberg's contract, as PyArrowFile keeps it
            raise FileNotFoundError(f"Cannot get file info, file not found: {self.location}") from None

    def exists(self) -> bool:
        return self._store.exists(self._key)

    def to_input_file(self) -> InputFile:
        return self._io.new_input(self.location)

    def create(self, overwrite: bool = False) -> OutputStream:
        """A stream whose object appears when it is closed: replacing one, or only if none exists.

        With ``overwrite=False`` the check is atomic and happens at close: `FileExistsError` then, and the
        existing object is left as it was.
        """
        return StoreOutputStream(self, if_none_match=not overwrite)


class StoreOutputStream(ObjectWriter):
    """pyiceberg's `OutputStream` (and a file object pyarrow writes Parquet into): an `ObjectWriter` whose
    lost create-only race is pyiceberg's `FileExistsError`."""

    def __init__(self, file: StoreOutputFile, *, if_none_match: bool) -> None:
        validate_key(file._key)
        super().__init__(
            file._store, file._key, if_none_match=if_none_match, metadata={}, part_size=PART_SIZE, max_concurrency=4
        )
        self._file = file

    def close(self) -> None:
        if self.closed:
            return
        try:
            super().close()
        except PreconditionFailed:
            raise FileExistsError(f"Cannot create file, already exists: {self._file.location}") from None
        self._file._written = self.tell()
