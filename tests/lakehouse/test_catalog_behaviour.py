"""One pyiceberg Catalog behaviour suite, run on three catalogs side by side with the same assertions.

Issue: "A pyiceberg user must be able to swap `SqlCatalog` for `ObjectStoreCatalog` by configuration and
notice nothing but that there is no database to run." So the reference is pyiceberg 0.12's own `SqlCatalog`
on SQLite, and `ObjectStoreCatalog` on file:// and on a real S3 server (SeaweedFS) must do what it does:
the same results, the same exception types, the same messages. The idioms are ported from pyiceberg's
``tests/catalog/test_catalog_behaviors.py`` (its consolidated InMemoryCatalog/SqlCatalog suite) and
``tests/conftest.py`` (``fixed_test_table_identifier`` and friends).

Messages are SqlCatalog's text exactly. Where SqlCatalog renders an identifier less faithfully than the
dotted name (the ``repr`` of the tuple it was given, or a bare table name), the full dotted name is accepted
too: that is the only latitude, and the identifier must still appear as SqlCatalog spells it.

This module is about pyiceberg's Catalog API only. The stricter rule for names that our own
``Lakehouse.create_table`` accepts (``[A-Za-z_][A-Za-z0-9_]*``, one namespace level) is not tested here.

Findings about the reference, checked on the installed pyiceberg 0.12:

* No "self identifier" stripping: ``"lake.ns.t"`` on a catalog named ``lake`` is table ``t`` in the
  two-level namespace ``lake.ns`` (pyiceberg dropped the catalog-name prefix long before 0.12). The
  self-identifier idiom of pyiceberg's tests is addressing a table by ``table.name()``.
* A ``#`` or ``?`` in a table's namespace or name breaks SqlCatalog on file:// (pyiceberg parses the
  location as a URI, so the rest is a fragment or a query): such names appear here only as namespaces.
* Namespaces are hierarchical and parents are implicit: creating ``a.b`` makes ``a`` exist and be listed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.typedef import Identifier
from pyiceberg.types import IntegerType, LongType

from tests.support.stores import catalog_properties, new_store_spec

CATALOG_NAME = "lake"

#: Table identifiers of every shape. The "self-string" one is a dotted string whose first part is the
#: catalog's name: pyiceberg 0.12 treats it as namespace ("lake", "ns"), nothing special.
TABLES: dict[str, str | Identifier] = {
    "simple": ("ns", "t"),
    "nested": ("com", "organization", "department", "my_table"),
    "hyphen": ("my_ns-1", "my-table"),
    "space": ("my ns", "my table"),
    "unicode": ("销售", "订单"),
    "slash": ("a/b", "c/d"),
    "percent": ("50%", "t%"),
    "backslash": ("a\\b", "x\\y"),
    "punctuation": ("n!@$&'()*+,;=~", 't:[]{}^`|"<>'),
    "self-string": f"{CATALOG_NAME}.ns.t",
}

#: Namespaces of every shape: the tables' namespaces, and those only namespaces can have (see above).
NAMESPACES: dict[str, Identifier] = {
    **{key: Catalog.namespace_from(ident) for key, ident in TABLES.items()},
    "deep": ("l1", "l2", "l3", "l4", "l5"),
    "hash": ("#x",),
    "hash-nested": ("#x", "y?z"),
}

ARROW_SCHEMA = pa.schema([pa.field("foo", pa.string()), pa.field("bar", pa.int32())])
ROWS = pa.table({"foo": ["a", None, "z"], "bar": pa.array([1, 2, None], pa.int32())}, schema=ARROW_SCHEMA)

EMPTY_SEGMENT = "Namespace identifier contains an empty segment or a segment with only whitespace"
EMPTY_NAMESPACE = "Empty namespace identifier"


# ---- the catalogs ----------------------------------------------------------------------------------


#: The catalogs, by test id: the reference and ours on both backends.
CATALOGS = {"SqlCatalog-sqlite": "sql", "ObjectStoreCatalog-file": "local", "ObjectStoreCatalog-s3": "s3"}
#: The identifier shapes run on S3 too. Every shape runs on the reference and on file://; on S3 the plain one and
#: the two that stress how a name becomes an object key (UTF-8 beyond ASCII, every URL-reserved character). The key
#: mapping of every shape on S3 is held by test_catalog.py::test_identifiers_other_catalogs_accept_map_onto_keys_
#: inside_the_warehouse[s3]; running the whole suite once per shape on S3 took ~7 of its 8 minutes.
S3_SHAPES = ("simple", "unicode", "punctuation")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Each test on every catalog, times every identifier or namespace shape it takes (on S3: `S3_SHAPES`)."""
    if "any_catalog" not in metafunc.fixturenames:
        return
    shaped = next((name for name in ("ident", "namespace") if name in metafunc.fixturenames), None)
    if shaped is None:
        metafunc.parametrize("any_catalog", list(CATALOGS.values()), ids=list(CATALOGS), indirect=True)
        return
    shapes = TABLES if shaped == "ident" else NAMESPACES
    params = [
        pytest.param(catalog, value, id=f"{catalog_id}-{key}")
        for catalog_id, catalog in CATALOGS.items()
        for key, value in shapes.items()
        if catalog != "s3" or key in S3_SHAPES
    ]
    metafunc.parametrize(["any_catalog", shaped], params, indirect=["any_catalog"])


@pytest.fixture
def any_catalog(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Catalog]:
    """A fresh, empty catalog named "lake": pyiceberg's SqlCatalog on SQLite (the reference), or ours,
    loaded by configuration alone, on a file:// or an S3 (SeaweedFS) warehouse."""
    if request.param == "sql":
        cat: Catalog = SqlCatalog(CATALOG_NAME, uri=f"sqlite:///{tmp_path}/cat.db", warehouse=tmp_path.as_uri())
    else:
        cat = load_catalog(CATALOG_NAME, **catalog_properties(*new_store_spec(request.param, tmp_path, request)))
    try:
        yield cat
    finally:
        cat.close()


# ---- helpers ---------------------------------------------------------------------------------------


def as_tuple(identifier: str | Identifier) -> Identifier:
    return Catalog.identifier_to_tuple(identifier)


def dotted(identifier: str | Identifier) -> str:
    return ".".join(as_tuple(identifier))


def raises(exc_type: type[BaseException], *messages: str):
    """pytest.raises(exc_type) whose str(exc) is exactly one of ``messages``."""
    return pytest.raises(exc_type, match="^(?:" + "|".join(re.escape(m) for m in messages) + ")$")


def warehouse(cat: Catalog) -> str:
    return cat.properties["warehouse"].rstrip("/")


def with_namespace(cat: Catalog, identifier: str | Identifier) -> Identifier:
    """Create the namespace of a table identifier; return the identifier as a tuple."""
    cat.create_namespace(Catalog.namespace_from(identifier))
    return as_tuple(identifier)


def default_location(cat: Catalog, name: Identifier) -> str:
    """Where a table's files go by default: ``<warehouse>/<namespace>/<table>``. The one place the catalogs
    differ on purpose: ours percent-encodes what would make a new key segment or cut a location short
    (``% / \\ # ?``, and '.' in a table name; `lakehouse.table.definition.encode_catalog_part`), so that ("a/b", "c/d")
    cannot land in the folder of table ("a", "b") of namespace ("a",) nor a name escape the warehouse;
    SqlCatalog puts the names there as they are."""
    if isinstance(cat, SqlCatalog):
        return f"{warehouse(cat)}/{dotted(name[:-1])}/{name[-1]}"
    from lakehouse.table.definition import encode_catalog_part

    return f"{warehouse(cat)}/{'.'.join(encode_catalog_part(p) for p in name[:-1])}/{encode_catalog_part(name[-1])}"


def exists(cat: Catalog, location: str) -> bool:
    return cat._load_file_io(location=location).new_input(location).exists()


def sibling(identifier: Identifier, suffix: str = "_alt") -> Identifier:
    """Another table in another namespace at the same depth (pyiceberg's ``another_*_identifier``)."""
    return (*identifier[:-2], identifier[-2] + suffix, identifier[-1] + suffix)


def arrow_rows(table) -> list[dict]:
    """The rows of an Iceberg table (or of an Arrow table), in a stable order."""
    data = table if isinstance(table, pa.Table) else table.scan().to_arrow()
    return sorted(data.to_pylist(), key=lambda row: (row["foo"] is None, row["foo"] or ""))


# ---- namespaces ------------------------------------------------------------------------------------


def test_create_namespace(any_catalog: Catalog, namespace: Identifier) -> None:
    properties = {"comment": "orders of the shop", "owner": "data-eng"}
    assert not any_catalog.namespace_exists(namespace)
    any_catalog.create_namespace(namespace, properties)
    assert any_catalog.namespace_exists(namespace)
    assert any_catalog.list_namespaces() == [namespace[:1]]
    assert any_catalog.load_namespace_properties(namespace) == properties


def test_create_namespace_without_properties(any_catalog: Catalog, namespace: Identifier) -> None:
    """pyiceberg's JDBC-style catalogs record a namespace created without properties as {"exists": "true"}."""
    any_catalog.create_namespace(namespace)
    assert any_catalog.load_namespace_properties(namespace) == {"exists": "true"}


def test_create_namespace_twice(any_catalog: Catalog, namespace: Identifier) -> None:
    any_catalog.create_namespace(namespace, {"k": "v"})
    with raises(
        NamespaceAlreadyExistsError,
        f"Namespace {namespace} already exists",
        f"Namespace {dotted(namespace)} already exists",
    ):
        any_catalog.create_namespace(namespace)
    with raises(NamespaceAlreadyExistsError, f"Namespace {dotted(namespace)} already exists"):
        any_catalog.create_namespace(dotted(namespace))
    assert any_catalog.load_namespace_properties(namespace) == {"k": "v"}


def test_create_namespace_if_not_exists(any_catalog: Catalog, namespace: Identifier) -> None:
    any_catalog.create_namespace_if_not_exists(namespace, {"k": "v"})
    any_catalog.create_namespace_if_not_exists(namespace, {"k": "other"})
    assert any_catalog.load_namespace_properties(namespace) == {"k": "v"}


def test_dotted_string_and_tuple_name_the_same_namespace(any_catalog: Catalog, namespace: Identifier) -> None:
    any_catalog.create_namespace(dotted(namespace))
    assert any_catalog.namespace_exists(namespace)
    assert any_catalog.namespace_exists(dotted(namespace))
    assert any_catalog.load_namespace_properties(namespace) == any_catalog.load_namespace_properties(dotted(namespace))


def test_namespace_exists_for_every_parent_and_not_for_lookalikes(any_catalog: Catalog, namespace: Identifier) -> None:
    """Parents are implicit (pyiceberg's test_namespace_exists: "`db2` exists because `db2.ns1` exists"), and
    no pattern matching leaks in ('_' and '%' are LIKE wildcards in SqlCatalog's queries)."""
    any_catalog.create_namespace(namespace)
    for depth in range(1, len(namespace) + 1):
        assert any_catalog.namespace_exists(namespace[:depth])
    last = namespace[-1]
    for lookalike in (last + "x", last[:-1] or "q", "_" * len(last), "%", last + "_", last + "%"):
        assert not any_catalog.namespace_exists((*namespace[:-1], lookalike))
    assert not any_catalog.namespace_exists((*namespace, "child"))


def test_list_namespaces_at_every_depth(any_catalog: Catalog, namespace: Identifier) -> None:
    any_catalog.create_namespace(namespace)
    any_catalog.create_namespace("other")
    assert sorted(any_catalog.list_namespaces()) == sorted([namespace[:1], ("other",)])
    for depth in range(1, len(namespace)):
        assert any_catalog.list_namespaces(namespace[:depth]) == [namespace[: depth + 1]]
    assert any_catalog.list_namespaces(namespace) == []
    assert any_catalog.list_namespaces("other") == []


def test_list_namespaces_does_not_match_patterns(any_catalog: Catalog) -> None:
    """pyiceberg's test_list_namespaces_fuzzy_match, with the wildcard characters of LIKE in the names."""
    for ns in ["db.ns1", "db.ns1.ns2", "db.ns2", "db.ns1X.ns3", "db_.ns1.ns2", "db2.ns1.ns2", "db%.x", "dbx"]:
        any_catalog.create_namespace(ns)
    assert sorted(any_catalog.list_namespaces()) == [("db",), ("db%",), ("db2",), ("db_",), ("dbx",)]
    assert sorted(any_catalog.list_namespaces("db")) == [("db", "ns1"), ("db", "ns1X"), ("db", "ns2")]
    assert any_catalog.list_namespaces("db.ns1") == [("db", "ns1", "ns2")]
    assert any_catalog.list_namespaces("db_.ns1") == [("db_", "ns1", "ns2")]
    assert any_catalog.list_namespaces("db%") == [("db%", "x")]


def test_list_children_of_a_missing_namespace(any_catalog: Catalog, namespace: Identifier) -> None:
    any_catalog.create_namespace("other")
    with raises(
        NoSuchNamespaceError, f"Namespace does not exist: {namespace}", f"Namespace does not exist: {dotted(namespace)}"
    ):
        any_catalog.list_namespaces(namespace)
    with raises(NoSuchNamespaceError, f"Namespace does not exist: {dotted(namespace)}"):
        any_catalog.list_namespaces(dotted(namespace))


def test_parent_namespaces_are_implicit(any_catalog: Catalog) -> None:
    """Creating com.organization.department makes com and com.organization exist (with no properties of
    their own), listed, and impossible to create again."""
    any_catalog.create_namespace(("com", "organization", "department"))
    assert any_catalog.namespace_exists("com")
    assert any_catalog.namespace_exists(("com", "organization"))
    assert any_catalog.list_namespaces() == [("com",)]
    assert any_catalog.load_namespace_properties("com") == {}
    assert any_catalog.load_namespace_properties(("com", "organization")) == {}
    with raises(NamespaceAlreadyExistsError, "Namespace com already exists"):
        any_catalog.create_namespace("com")


def test_load_properties_of_a_missing_namespace(any_catalog: Catalog, namespace: Identifier) -> None:
    with raises(NoSuchNamespaceError, f"Namespace {dotted(namespace)} does not exists"):
        any_catalog.load_namespace_properties(namespace)


def test_update_namespace_properties(any_catalog: Catalog, namespace: Identifier) -> None:
    """The PropertiesUpdateSummary: what was removed, what was set, which removals named nothing."""
    any_catalog.create_namespace(namespace, {"comment": "old", "p1": "1", "p2": "2", "p3": "3"})
    summary = any_catalog.update_namespace_properties(
        namespace, removals={"p1", "p2", "not-there"}, updates={"comment": "new", "p4": "4"}
    )
    assert sorted(summary.removed) == ["p1", "p2"]
    assert sorted(summary.updated) == ["comment", "p4"]
    assert summary.missing == ["not-there"]
    assert any_catalog.load_namespace_properties(namespace) == {"comment": "new", "p3": "3", "p4": "4"}

    summary = any_catalog.update_namespace_properties(namespace, updates={"p5": "5"})
    assert (summary.removed, summary.updated, summary.missing) == ([], ["p5"], [])
    summary = any_catalog.update_namespace_properties(namespace, removals={"p3"})
    assert (summary.removed, summary.updated, summary.missing) == (["p3"], [], [])
    assert any_catalog.load_namespace_properties(namespace) == {"comment": "new", "p4": "4", "p5": "5"}


def test_update_namespace_properties_with_an_overlap(any_catalog: Catalog) -> None:
    any_catalog.create_namespace("ns", {"a": "1"})
    with raises(ValueError, "Updates and deletes have an overlap: {'a'}"):
        any_catalog.update_namespace_properties("ns", removals={"a"}, updates={"a": "2"})
    assert any_catalog.load_namespace_properties("ns") == {"a": "1"}


def test_update_properties_of_a_missing_namespace(any_catalog: Catalog, namespace: Identifier) -> None:
    with raises(NoSuchNamespaceError, f"Namespace {dotted(namespace)} does not exists"):
        any_catalog.update_namespace_properties(namespace, updates={"k": "v"})


def test_drop_namespace(any_catalog: Catalog, namespace: Identifier) -> None:
    any_catalog.create_namespace(namespace, {"k": "v"})
    any_catalog.create_namespace("other")
    any_catalog.drop_namespace(namespace)
    assert not any_catalog.namespace_exists(namespace)
    assert any_catalog.list_namespaces() == [("other",)]
    any_catalog.create_namespace(namespace)  # the name is free again, without the old properties
    assert any_catalog.load_namespace_properties(namespace) == {"exists": "true"}


def test_drop_a_missing_namespace(any_catalog: Catalog, namespace: Identifier) -> None:
    with raises(
        NoSuchNamespaceError, f"Namespace does not exist: {namespace}", f"Namespace does not exist: {dotted(namespace)}"
    ):
        any_catalog.drop_namespace(namespace)
    with raises(NoSuchNamespaceError, f"Namespace does not exist: {dotted(namespace)}"):
        any_catalog.drop_namespace(dotted(namespace))


def test_drop_a_namespace_that_has_only_child_namespaces(any_catalog: Catalog) -> None:
    """SqlCatalog counts only tables: dropping a parent whose children are namespaces succeeds, leaves the
    children alone, and the parent still exists through them (parents are implicit)."""
    any_catalog.create_namespace("com", {"k": "v"})
    any_catalog.create_namespace(("com", "organization"))
    any_catalog.drop_namespace("com")
    assert any_catalog.namespace_exists(("com", "organization"))
    assert any_catalog.list_namespaces("com") == [("com", "organization")]
    assert any_catalog.load_namespace_properties("com") == {}


@pytest.mark.parametrize(
    "blank, message",
    [
        pytest.param("", EMPTY_SEGMENT, id="empty-string"),
        pytest.param((), EMPTY_NAMESPACE, id="empty-tuple"),
        pytest.param(" ", EMPTY_SEGMENT, id="blank-string"),
        pytest.param(("",), EMPTY_SEGMENT, id="empty-part"),
        pytest.param(("a", ""), EMPTY_SEGMENT, id="empty-last-part"),
        pytest.param(("a", " "), EMPTY_SEGMENT, id="blank-last-part"),
        pytest.param("a.", EMPTY_SEGMENT, id="trailing-dot"),
        pytest.param(".a", EMPTY_SEGMENT, id="leading-dot"),
        pytest.param("a..b", EMPTY_SEGMENT, id="double-dot"),
    ],
)
def test_empty_and_blank_namespaces(any_catalog: Catalog, blank: str | Identifier, message: str) -> None:
    """pyiceberg's test_create_namespace_with_empty_identifier, and what every other namespace method does."""
    with raises(NoSuchNamespaceError, message):
        any_catalog.create_namespace(blank)
    with raises(NoSuchNamespaceError, message):
        any_catalog.namespace_exists(blank)
    with raises(NoSuchNamespaceError, message):
        any_catalog.drop_namespace(blank)
    with raises(ValueError, message):
        any_catalog.load_namespace_properties(blank)
    with raises(ValueError, message):
        any_catalog.update_namespace_properties(blank, updates={"k": "v"})
    assert any_catalog.list_namespaces() == []


def test_list_the_empty_namespace(any_catalog: Catalog) -> None:
    """list_namespaces(()) lists the top level; list_namespaces("") is the children of the namespace ("",),
    which has none. list_tables refuses both."""
    any_catalog.create_namespace("ns")
    assert any_catalog.list_namespaces(()) == [("ns",)]
    assert any_catalog.list_namespaces("") == []
    with raises(ValueError, EMPTY_NAMESPACE):
        any_catalog.list_tables(())
    with raises(ValueError, EMPTY_SEGMENT):
        any_catalog.list_tables("")


def test_blank_namespace_in_list_calls(any_catalog: Catalog) -> None:
    with raises(NoSuchNamespaceError, EMPTY_SEGMENT):
        any_catalog.list_namespaces(" ")
    with raises(NoSuchNamespaceError, EMPTY_SEGMENT):
        any_catalog.list_tables(" ")
    with raises(NoSuchNamespaceError, EMPTY_SEGMENT):
        any_catalog.list_tables(("a", ""))


def test_namespace_parts_are_stripped(any_catalog: Catalog) -> None:
    """SqlCatalog strips whitespace around each namespace part (pyiceberg's Catalog.namespace_to_string)."""
    any_catalog.create_namespace((" pad ", "  inner part "), {"k": "v"})
    assert any_catalog.namespace_exists(("pad", "inner part"))
    assert any_catalog.list_namespaces() == [("pad",)]
    assert any_catalog.load_namespace_properties("pad.inner part") == {"k": "v"}
    with raises(NamespaceAlreadyExistsError, "Namespace pad.inner part already exists"):
        any_catalog.create_namespace("pad.inner part")


def test_a_dot_inside_a_namespace_part_is_a_level_separator(any_catalog: Catalog) -> None:
    """A namespace is stored dotted: ("a.b",) and ("a", "b") are the same namespace."""
    any_catalog.create_namespace(("a.b",), {"k": "v"})
    assert any_catalog.namespace_exists(("a", "b"))
    assert any_catalog.namespace_exists("a")
    assert any_catalog.list_namespaces() == [("a",)]
    assert any_catalog.list_namespaces("a") == [("a", "b")]
    assert any_catalog.load_namespace_properties(("a", "b")) == {"k": "v"}
    with raises(NamespaceAlreadyExistsError, "Namespace a.b already exists"):
        any_catalog.create_namespace("a.b")
    table = any_catalog.create_table(("a.b", "t"), ARROW_SCHEMA)
    assert table.name() == ("a", "b", "t")
    assert any_catalog.list_tables(("a", "b")) == [("a", "b", "t")]
    assert any_catalog.load_table("a.b.t").metadata_location == table.metadata_location


def test_a_dot_inside_a_table_name(any_catalog: Catalog) -> None:
    """The table name is the last part of a tuple as given, dots included; as a string it would be split."""
    any_catalog.create_namespace("ns")
    table = any_catalog.create_table(("ns", "x.y"), ARROW_SCHEMA)
    assert table.name() == ("ns", "x.y")
    assert any_catalog.load_table(("ns", "x.y")).metadata_location == table.metadata_location
    assert any_catalog.list_tables("ns") == [("ns", "x.y")]
    assert any_catalog.table_exists(("ns", "x.y"))
    assert not any_catalog.table_exists("ns.x.y")  # table y in namespace ns.x
    any_catalog.drop_table(("ns", "x.y"))
    assert any_catalog.list_tables("ns") == []


# ---- tables: identifiers that name no table --------------------------------------------------------


def test_table_identifier_without_a_namespace(any_catalog: Catalog) -> None:
    any_catalog.create_namespace("ns")
    with raises(NoSuchNamespaceError, EMPTY_NAMESPACE):
        any_catalog.create_table("t", ARROW_SCHEMA)
    with raises(ValueError, EMPTY_NAMESPACE):
        any_catalog.load_table("t")
    with raises(ValueError, EMPTY_NAMESPACE):
        any_catalog.table_exists("t")
    with raises(ValueError, EMPTY_NAMESPACE):
        any_catalog.drop_table("t")
    with raises(ValueError, EMPTY_NAMESPACE):
        any_catalog.register_table("t", "file:///nowhere/00000-x.metadata.json")


@pytest.mark.parametrize(
    "identifier",
    [("", "t"), (" ", "t"), ("ns", "", "t"), ".t", "ns..t"],
    ids=["empty-namespace-part", "blank-namespace-part", "empty-middle-part", "leading-dot", "double-dot"],
)
def test_table_identifier_with_an_empty_namespace_part(any_catalog: Catalog, identifier: str | Identifier) -> None:
    any_catalog.create_namespace("ns")
    with raises(NoSuchNamespaceError, EMPTY_SEGMENT):
        any_catalog.create_table(identifier, ARROW_SCHEMA)
    with raises(ValueError, EMPTY_SEGMENT):
        any_catalog.load_table(identifier)
    with raises(ValueError, EMPTY_SEGMENT):
        any_catalog.drop_table(identifier)
    assert any_catalog.list_tables("ns") == []


def test_the_catalog_name_is_not_stripped_from_identifiers(any_catalog: Catalog) -> None:
    """pyiceberg 0.12 has no "self identifier" form: "lake.ns.t" is table t of namespace lake.ns."""
    any_catalog.create_namespace("ns")
    any_catalog.create_table(("ns", "t"), ARROW_SCHEMA)
    assert not any_catalog.table_exists(f"{CATALOG_NAME}.ns.t")
    with raises(NoSuchTableError, f"Table does not exist: {CATALOG_NAME}.ns.t"):
        any_catalog.load_table(f"{CATALOG_NAME}.ns.t")
    with raises(
        NoSuchNamespaceError,
        f"Namespace does not exist: {(CATALOG_NAME, 'ns')}",
        f"Namespace does not exist: {CATALOG_NAME}.ns",
    ):
        any_catalog.create_table(f"{CATALOG_NAME}.ns.t", ARROW_SCHEMA)
    with raises(NoSuchTableError, f"Table does not exist: {CATALOG_NAME}.ns.t"):
        any_catalog.drop_table(f"{CATALOG_NAME}.ns.t")
    assert any_catalog.list_tables("ns") == [("ns", "t")]


# ---- tables, for every identifier shape ------------------------------------------------------------


def test_create_table(any_catalog: Catalog, ident: str | Identifier) -> None:
    name = with_namespace(any_catalog, ident)
    table = any_catalog.create_table(ident, ARROW_SCHEMA)
    assert table.name() == name
    assert table.location() == default_location(any_catalog, name)
    assert table.metadata_location.startswith(f"{table.location()}/metadata/00000-")
    assert exists(any_catalog, table.metadata_location)
    assert table.format_version == 2
    assert table.sort_order().is_unsorted
    loaded = any_catalog.load_table(ident)
    assert loaded.name() == name
    assert loaded.metadata_location == table.metadata_location
    assert loaded.metadata == table.metadata
    assert any_catalog.table_exists(ident)
    assert any_catalog.list_tables(name[:-1]) == [name]


def test_dotted_string_and_tuple_name_the_same_table(any_catalog: Catalog, ident: str | Identifier) -> None:
    name = with_namespace(any_catalog, ident)
    table = any_catalog.create_table(dotted(name), ARROW_SCHEMA)
    assert table.name() == name
    assert any_catalog.load_table(name).metadata_location == table.metadata_location
    assert any_catalog.list_tables(dotted(name[:-1])) == [name]


def test_create_table_in_a_missing_namespace(any_catalog: Catalog, ident: str | Identifier) -> None:
    namespace = Catalog.namespace_from(ident)
    any_catalog.create_namespace("other")
    with raises(
        NoSuchNamespaceError,
        f"Namespace does not exist: {namespace}",
        f"Namespace does not exist: {dotted(namespace)}",
    ):
        any_catalog.create_table(ident, ARROW_SCHEMA)
    assert not any_catalog.namespace_exists(namespace)
    assert not any_catalog.table_exists(ident)


def test_create_table_twice(any_catalog: Catalog, ident: str | Identifier) -> None:
    with_namespace(any_catalog, ident)
    table = any_catalog.create_table(ident, ARROW_SCHEMA)
    with raises(TableAlreadyExistsError, f"Table {dotted(ident)} already exists"):
        any_catalog.create_table(ident, pa.schema([pa.field("other", pa.int64())]))
    assert any_catalog.load_table(ident).metadata_location == table.metadata_location


def test_create_table_if_not_exists(any_catalog: Catalog, ident: str | Identifier) -> None:
    with_namespace(any_catalog, ident)
    first = any_catalog.create_table_if_not_exists(ident, ARROW_SCHEMA)
    second = any_catalog.create_table_if_not_exists(ident, pa.schema([pa.field("other", pa.int64())]))
    assert second.name() == first.name() == as_tuple(ident)
    assert second.metadata_location == first.metadata_location
    assert second.schema() == first.schema()


def test_load_a_missing_table(any_catalog: Catalog, ident: str | Identifier) -> None:
    message = f"Table does not exist: {dotted(ident)}"
    with raises(NoSuchTableError, message):  # its namespace is missing too
        any_catalog.load_table(ident)
    assert not any_catalog.table_exists(ident)
    with_namespace(any_catalog, ident)
    with raises(NoSuchTableError, message):
        any_catalog.load_table(ident)
    assert not any_catalog.table_exists(ident)


def test_list_tables(any_catalog: Catalog, ident: str | Identifier) -> None:
    name = with_namespace(any_catalog, ident)
    namespace, other = name[:-1], sibling(name)
    assert any_catalog.list_tables(namespace) == []
    any_catalog.create_namespace(other[:-1])
    any_catalog.create_table(name, ARROW_SCHEMA)
    any_catalog.create_table((*namespace, name[-1] + "_2"), ARROW_SCHEMA)
    any_catalog.create_table(other, ARROW_SCHEMA)
    assert sorted(any_catalog.list_tables(namespace)) == sorted([name, (*namespace, name[-1] + "_2")])
    assert any_catalog.list_tables(other[:-1]) == [other]
    if len(namespace) > 1:  # only the tables directly in a namespace, not those of its children
        assert any_catalog.list_tables(namespace[:-1]) == []


def test_list_tables_of_a_namespace_with_a_child(any_catalog: Catalog, ident: str | Identifier) -> None:
    name = with_namespace(any_catalog, ident)
    child = (*name[:-1], "child", "t")
    any_catalog.create_namespace(child[:-1])
    any_catalog.create_table(child, ARROW_SCHEMA)
    assert any_catalog.list_tables(name[:-1]) == []
    assert any_catalog.list_tables(child[:-1]) == [child]


def test_list_tables_of_a_missing_namespace(any_catalog: Catalog, ident: str | Identifier) -> None:
    namespace = Catalog.namespace_from(ident)
    with raises(
        NoSuchNamespaceError, f"Namespace does not exist: {namespace}", f"Namespace does not exist: {dotted(namespace)}"
    ):
        any_catalog.list_tables(namespace)
    with raises(NoSuchNamespaceError, f"Namespace does not exist: {dotted(namespace)}"):
        any_catalog.list_tables(dotted(namespace))


def test_drop_table(any_catalog: Catalog, ident: str | Identifier) -> None:
    name = with_namespace(any_catalog, ident)
    table = any_catalog.create_table(ident, ARROW_SCHEMA)
    any_catalog.drop_table(ident)
    assert not any_catalog.table_exists(ident)
    with raises(NoSuchTableError, f"Table does not exist: {dotted(name)}"):
        any_catalog.load_table(ident)
    assert any_catalog.list_tables(name[:-1]) == []
    assert exists(any_catalog, table.metadata_location)  # a drop keeps the files (purge_table removes them)
    any_catalog.drop_namespace(name[:-1])
    assert not any_catalog.namespace_exists(name[:-1])


def test_drop_a_missing_table(any_catalog: Catalog, ident: str | Identifier) -> None:
    message = f"Table does not exist: {dotted(ident)}"
    with raises(NoSuchTableError, message):
        any_catalog.drop_table(ident)
    with_namespace(any_catalog, ident)
    with raises(NoSuchTableError, message):
        any_catalog.drop_table(ident)
    any_catalog.create_table(ident, ARROW_SCHEMA)
    any_catalog.drop_table(ident)
    with raises(NoSuchTableError, message):
        any_catalog.drop_table(ident)


def test_drop_a_namespace_that_has_a_table(any_catalog: Catalog, ident: str | Identifier) -> None:
    name = with_namespace(any_catalog, ident)
    any_catalog.create_table(ident, ARROW_SCHEMA)
    with raises(NamespaceNotEmptyError, f"Namespace {dotted(name[:-1])} is not empty. 1 tables exist."):
        any_catalog.drop_namespace(name[:-1])
    assert any_catalog.table_exists(ident)
    assert any_catalog.namespace_exists(name[:-1])


def test_purge_table(any_catalog: Catalog, ident: str | Identifier) -> None:
    name = with_namespace(any_catalog, ident)
    table = any_catalog.create_table(ident, ARROW_SCHEMA)
    table.append(ROWS)
    snapshot = table.current_snapshot()
    files = [table.metadata_location, snapshot.manifest_list]
    files += [entry.metadata_file for entry in table.metadata.metadata_log]
    for manifest in snapshot.manifests(table.io):
        files.append(manifest.manifest_path)
        files += [entry.data_file.file_path for entry in manifest.fetch_manifest_entry(table.io)]
    assert all(exists(any_catalog, f) for f in files)
    any_catalog.purge_table(ident)
    with raises(NoSuchTableError, f"Table does not exist: {dotted(name)}"):
        any_catalog.load_table(ident)
    assert [f for f in files if exists(any_catalog, f)] == []
    with raises(NoSuchTableError, f"Table does not exist: {dotted(name)}"):
        any_catalog.purge_table(ident)


RENAME_TARGETS = {
    "same-namespace": lambda name: (*name[:-1], name[-1] + "_renamed"),
    "other-namespace": sibling,
    "child-namespace": lambda name: (*name[:-1], "archive", "y2024", name[-1]),
    "top-level-namespace": lambda name: ("flat", name[-1]),
}


@pytest.mark.parametrize("target", RENAME_TARGETS.values(), ids=RENAME_TARGETS.keys())
def test_rename_table(any_catalog: Catalog, ident: str | Identifier, target) -> None:
    name = with_namespace(any_catalog, ident)
    new = target(name)
    if not any_catalog.namespace_exists(new[:-1]):
        any_catalog.create_namespace(new[:-1])
    table = any_catalog.create_table(ident, ARROW_SCHEMA)
    table.append(ROWS)
    renamed = any_catalog.rename_table(ident, new)
    assert renamed.name() == new
    assert renamed.metadata_location == table.metadata_location
    loaded = any_catalog.load_table(new)
    assert loaded.metadata_location == table.metadata_location
    assert arrow_rows(loaded) == arrow_rows(table)
    assert not any_catalog.table_exists(ident)
    with raises(NoSuchTableError, f"Table does not exist: {dotted(name)}"):
        any_catalog.load_table(ident)
    assert any_catalog.list_tables(new[:-1]) == [new]
    if new[:-1] != name[:-1]:
        assert any_catalog.list_tables(name[:-1]) == []
    loaded.append(ROWS)  # the renamed table takes commits under its new name
    assert len(any_catalog.load_table(new).scan().to_arrow()) == 2 * len(ROWS)


def test_rename_table_into_a_missing_namespace(any_catalog: Catalog, ident: str | Identifier) -> None:
    name = with_namespace(any_catalog, ident)
    table = any_catalog.create_table(ident, ARROW_SCHEMA)
    new = sibling(name)
    with raises(NoSuchNamespaceError, f"Namespace does not exist: {dotted(new[:-1])}"):
        any_catalog.rename_table(ident, new)
    assert any_catalog.load_table(ident).metadata_location == table.metadata_location
    assert not any_catalog.namespace_exists(new[:-1])


def test_rename_table_onto_an_existing_one(any_catalog: Catalog, ident: str | Identifier) -> None:
    name = with_namespace(any_catalog, ident)
    other = sibling(name)
    any_catalog.create_namespace(other[:-1])
    table = any_catalog.create_table(ident, ARROW_SCHEMA)
    existing = any_catalog.create_table(other, ARROW_SCHEMA)
    with raises(TableAlreadyExistsError, f"Table {dotted(other)} already exists"):
        any_catalog.rename_table(ident, other)
    assert any_catalog.load_table(ident).metadata_location == table.metadata_location
    assert any_catalog.load_table(other).metadata_location == existing.metadata_location


def test_rename_a_missing_table(any_catalog: Catalog, ident: str | Identifier) -> None:
    name = with_namespace(any_catalog, ident)
    new = (*name[:-1], name[-1] + "_renamed")
    with raises(NoSuchTableError, f"Table does not exist: {name[-1]}", f"Table does not exist: {dotted(name)}"):
        any_catalog.rename_table(ident, new)
    assert not any_catalog.table_exists(new)


def test_self_identifier(any_catalog: Catalog, ident: str | Identifier) -> None:
    """pyiceberg's *_from_self_identifier tests: table.name() addresses the table in every method."""
    name = with_namespace(any_catalog, ident)
    table = any_catalog.create_table(ident, ARROW_SCHEMA)
    assert any_catalog.load_table(table.name()).metadata_location == table.metadata_location
    assert any_catalog.table_exists(table.name())
    new = (*name[:-1], name[-1] + "_renamed")
    renamed = any_catalog.rename_table(table.name(), new)
    with raises(NoSuchTableError, f"Table does not exist: {dotted(name)}"):
        any_catalog.load_table(table.name())
    any_catalog.drop_table(renamed.name())
    assert any_catalog.list_tables(name[:-1]) == []


def test_register_table(any_catalog: Catalog, ident: str | Identifier) -> None:
    name = with_namespace(any_catalog, ident)
    original = any_catalog.create_table(ident, ARROW_SCHEMA)
    original.append(ROWS)
    original = any_catalog.load_table(ident)
    new = (*name[:-1], name[-1] + "_registered")
    registered = any_catalog.register_table(new, original.metadata_location)
    assert registered.name() == new
    assert registered.metadata_location == original.metadata_location
    assert registered.metadata == original.metadata
    assert arrow_rows(any_catalog.load_table(new)) == arrow_rows(original)
    assert sorted(any_catalog.list_tables(name[:-1])) == sorted([name, new])
    with raises(TableAlreadyExistsError, f"Table {dotted(new)} already exists"):
        any_catalog.register_table(new, original.metadata_location)
    with raises(TableAlreadyExistsError, f"Table {dotted(name)} already exists"):
        any_catalog.register_table(name, registered.metadata_location)
    missing = sibling(name)
    with raises(NoSuchNamespaceError, f"Namespace does not exist: {dotted(missing[:-1])}"):
        any_catalog.register_table(missing, original.metadata_location)


def test_register_a_dropped_table_again(any_catalog: Catalog, ident: str | Identifier) -> None:
    with_namespace(any_catalog, ident)
    table = any_catalog.create_table(ident, ARROW_SCHEMA)
    table.append(ROWS)
    any_catalog.drop_table(ident)
    again = any_catalog.register_table(ident, table.metadata_location)
    assert again.name() == as_tuple(ident)
    assert arrow_rows(again) == arrow_rows(table)


@pytest.mark.parametrize("slash", ["", "/"], ids=["no-trailing-slash", "trailing-slash"])
def test_create_table_with_a_location(any_catalog: Catalog, ident: str | Identifier, slash: str) -> None:
    """pyiceberg's test_create_table_location_override and ..._removes_trailing_slash_from_location."""
    with_namespace(any_catalog, ident)
    location = f"{warehouse(any_catalog)}/elsewhere/given-location"
    table = any_catalog.create_table(ident, ARROW_SCHEMA, location=location + slash, properties={"key1": "value1"})
    assert table.location() == location
    assert table.metadata.location == location
    assert table.metadata_location.startswith(f"{location}/metadata/00000-")
    loaded = any_catalog.load_table(ident)
    assert loaded.location() == location
    assert loaded.metadata_location == table.metadata_location
    assert loaded.properties["key1"] == "value1"
    loaded.append(ROWS)
    assert all(task.file.file_path.startswith(f"{location}/data/") for task in loaded.scan().plan_files())
    assert arrow_rows(any_catalog.load_table(ident)) == arrow_rows(ROWS)


@pytest.mark.parametrize("format_version", [1, 2])
def test_append_and_read_back(any_catalog: Catalog, ident: str | Identifier, format_version: int) -> None:
    """pyiceberg's test_append_table, on tables of both format versions and every identifier shape."""
    with_namespace(any_catalog, ident)
    table = any_catalog.create_table(ident, ARROW_SCHEMA, properties={"format-version": str(format_version)})
    assert table.format_version == format_version
    table.append(ROWS)
    assert len(table.metadata.snapshots) == 1
    snapshot = table.metadata.snapshots[0]
    assert snapshot.snapshot_id == table.metadata.current_snapshot_id
    assert snapshot.parent_snapshot_id is None
    assert snapshot.summary["added-records"] == "3"
    assert snapshot.summary["total-records"] == "3"
    assert len(table.metadata.metadata_log) == 1
    loaded = any_catalog.load_table(ident)
    assert loaded.format_version == format_version
    assert loaded.metadata_location == table.metadata_location
    assert arrow_rows(loaded) == arrow_rows(ROWS)
    loaded.append(ROWS)
    assert len(any_catalog.load_table(ident).scan().to_arrow()) == 6


def test_schema_evolution(any_catalog: Catalog, ident: str | Identifier) -> None:
    """pyiceberg's test_commit_table and test_concurrent_commit_table."""
    with_namespace(any_catalog, ident)
    table = any_catalog.create_table(ident, ARROW_SCHEMA)
    stale = any_catalog.load_table(ident)
    original_location = table.metadata_location
    original_updated_ms = table.metadata.last_updated_ms

    with table.update_schema() as update:
        update.add_column(path="baz", field_type=LongType())
    assert table.metadata.current_schema_id == 1
    assert table.schema().find_field("baz").field_type == LongType()
    assert table.metadata_location != original_location
    assert [(e.metadata_file, e.timestamp_ms) for e in table.metadata.metadata_log] == [
        (original_location, original_updated_ms)
    ]

    loaded = any_catalog.load_table(ident)
    assert loaded.metadata_location == table.metadata_location
    assert loaded.schema() == table.schema()
    loaded.append(ROWS.append_column("baz", pa.array([7, None, 9], pa.int64())))
    assert sorted(r["baz"] is None for r in arrow_rows(any_catalog.load_table(ident))) == [False, False, True]

    with pytest.raises(
        CommitFailedException, match="Requirement failed: current schema id has changed: expected 0, found 1"
    ):
        with stale.update_schema() as update:
            update.add_column(path="qux", field_type=IntegerType())
    assert any_catalog.load_table(ident).schema().find_field("baz")
    assert "qux" not in [f.name for f in any_catalog.load_table(ident).schema().fields]


# ---- distinct identifiers stay distinct ------------------------------------------------------------

LOOKALIKE_PAIRS = {
    "slash-in-namespace-or-name": (("a", "b/t"), ("a/b", "t")),
    "slash-or-backslash": (("c", "x/y"), ("c", "x\\y")),
    "percent-or-its-encoding": (("p", "50%"), ("p", "50%25")),
    "case": (("Ns", "T"), ("ns", "t")),
    "json-suffix": (("j", "t"), ("j", "t.json")),
}


@pytest.mark.parametrize("first, second", LOOKALIKE_PAIRS.values(), ids=LOOKALIKE_PAIRS.keys())
def test_lookalike_identifiers_are_different_tables(
    any_catalog: Catalog, first: Identifier, second: Identifier
) -> None:
    """Two identifiers that differ only where an encoding could fold them together are two tables."""
    for identifier in (first, second):
        if not any_catalog.namespace_exists(identifier[:-1]):
            any_catalog.create_namespace(identifier[:-1])
    one = any_catalog.create_table(first, ARROW_SCHEMA)
    two = any_catalog.create_table(second, ARROW_SCHEMA)
    assert one.metadata_location != two.metadata_location
    assert any_catalog.load_table(first).metadata_location == one.metadata_location
    assert any_catalog.load_table(second).metadata_location == two.metadata_location
    listed = [table for ns in {first[:-1], second[:-1]} for table in any_catalog.list_tables(ns)]
    assert sorted(listed) == sorted([first, second])
    any_catalog.drop_table(first)
    assert not any_catalog.table_exists(first)
    assert any_catalog.load_table(second).metadata_location == two.metadata_location


def test_lakestreams_own_folder_name_is_an_ordinary_namespace(any_catalog: Catalog) -> None:
    """Whatever a catalog keeps for itself in the warehouse must not take a name away from its users."""
    for namespace in ("_lakestream", "_LakeStream"):
        any_catalog.create_namespace(namespace, {"k": "v"})
        assert any_catalog.load_namespace_properties(namespace) == {"k": "v"}
        table = any_catalog.create_table((namespace, "catalog"), ARROW_SCHEMA)
        table.append(ROWS)
        assert arrow_rows(any_catalog.load_table((namespace, "catalog"))) == arrow_rows(ROWS)
        assert any_catalog.list_tables(namespace) == [(namespace, "catalog")]
    assert sorted(any_catalog.list_namespaces()) == [("_LakeStream",), ("_lakestream",)]
