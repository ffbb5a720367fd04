"""``lakestream subscription list|show|drop``: durable consumer positions of tables."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from lakestream.cli.common import (
    ConfigOpt,
    JsonOpt,
    WarehouseOpt,
    cells,
    command_errors,
    console,
    data_table,
    emit,
    open_lakehouse,
    print_mapping,
)
from lakestream.console import json_line, new_table

if TYPE_CHECKING:
    from lakehouse.subscriptions import Subscription

subscription_app = typer.Typer(help="Durable consumer positions of tables (subscriptions).", no_args_is_help=True)


@subscription_app.command("list")
def subscription_list(
    table: Annotated[str | None, typer.Argument(help="only this table's (namespace.table)")] = None,
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """List subscriptions: table, consumer, position, records behind, last advanced."""
    with command_errors():
        lh = open_lakehouse(warehouse, config)
        subs = lh.subscriptions(table)
        rows = []
        for sub in subs:  # --json streams: a subscription is printed as its lag is read
            records = None if sub.stale else sum(lag.records for lag in sub.lag().values())
            if json_output:
                json_line(
                    {
                        "table": sub.table,
                        "consumer": sub.consumer,
                        "position": sub.position,
                        "records_behind": records,
                        "advanced_at": sub.advanced_at,
                        "idle_seconds": round(sub.idle_for().total_seconds(), 3),
                        "stale": sub.stale,
                    }
                )
                continue
            behind = "-" if records is None else str(records)
            rows.append(
                {
                    "table": sub.table,
                    "consumer": sub.consumer,
                    "position": _offsets(sub.position),
                    "records behind": behind,
                    "advanced": f"{sub.advanced_at:%Y-%m-%d %H:%M:%S} ({_ago(sub.idle_for())} ago)"
                    + (" stale: its table was dropped" if sub.stale else ""),
                }
            )
    if json_output:
        return
    if rows:
        console.print(data_table(list(rows[0]), rows))
    else:
        console.print(f"no subscriptions{f' of {table}' if table else ''} in {lh.url}", markup=False)


@subscription_app.command("show")
def subscription_show(
    table: Annotated[str, typer.Argument(help="namespace.table")],
    consumer: Annotated[str, typer.Argument(help="the consumer's name")],
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """A subscription's position, lag per bucket, last advance and what it pins (snapshots, log)."""
    with command_errors():
        lh = open_lakehouse(warehouse, config)
        sub = lh.subscription(table, consumer, create=False)
        lag = sub.lag()
        pins = lh.subscription_pins(table)
    who = f"subscription {sub.consumer}"
    kept = {}  # bucket -> the offset from which the log is kept for this subscription
    for b, (offset, names) in pins.log.items():
        if who in names.split(", "):
            kept[b] = offset
    snapshots = sorted(s for s, names in pins.snapshots.items() if who in names.split(", "))
    emit(json_output, _show_json(sub, lag, kept, snapshots), lambda: _print_show(sub, lag, kept, snapshots))


def _show_json(sub: Subscription, lag: dict, kept: dict[int, int], snapshots: list[int]) -> dict:
    """`subscription show` as --json prints it."""
    buckets = [
        {
            "bucket": b,
            "position": sub.position[b],
            "records_behind": lg.records,
            "seconds_behind": lg.seconds,
            "log_kept_from": kept.get(b),
        }
        for b, lg in lag.items()
    ]
    return {
        "table": sub.table,
        "consumer": sub.consumer,
        "created_at": sub.created_at,
        "advanced_at": sub.advanced_at,
        "advances": sub.record.advances,
        "idle_seconds": round(sub.idle_for().total_seconds(), 3),
        "buckets": buckets,
        "pinned_snapshots": snapshots,
    }


def _print_show(sub: Subscription, lag: dict, kept: dict[int, int], snapshots: list[int]) -> None:
    """`subscription show` for people: the record, a table of its buckets, what it pins."""
    print_mapping(
        {
            "table": sub.table,
            "consumer": sub.consumer,
            "created": f"{sub.created_at:%Y-%m-%d %H:%M:%S}",
            "advanced": f"{sub.advanced_at:%Y-%m-%d %H:%M:%S} ({_ago(sub.idle_for())} ago, "
            f"{sub.record.advances} advances)",
        }
    )
    out = new_table("bucket", "position", "records behind", "seconds behind", "log kept from")
    for b, lg in lag.items():
        seconds = "?" if lg.seconds is None else f"{lg.seconds:.1f}"
        out.add_row(*cells(b, sub.position[b], lg.records, seconds, kept.get(b, "-")))
    console.print(out)
    console.print(f"{'pins snapshots':14} {', '.join(map(str, snapshots)) or '- (none: its state is the log alone)'}")


@subscription_app.command("drop")
def subscription_drop(
    table: Annotated[str, typer.Argument(help="namespace.table")],
    consumer: Annotated[str, typer.Argument(help="the consumer's name")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")] = False,
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Drop a subscription: maintenance may then delete the log and snapshots its position needed."""
    with command_errors():
        lh = open_lakehouse(warehouse, config)
        if not yes:
            typer.confirm(
                f"drop subscription {consumer} of {table} in {lh.url}? Its position is lost, and maintenance may "
                "delete what it needed",
                abort=True,
                err=json_output,  # stdout holds only JSON
            )
        lh.drop_subscription(table, consumer)
    emit(
        json_output,
        {"table": table, "consumer": consumer, "dropped": True},
        lambda: console.print(f"[green]dropped[/] subscription {escape(consumer)} of {escape(table)}"),
    )


def _offsets(position: dict[int, int]) -> str:
    return ",".join(f"{b}:{o}" for b, o in sorted(position.items()))


def _ago(age: timedelta) -> str:
    seconds = int(age.total_seconds())
    days, rest = divmod(seconds, 86400)
    if days:
        return f"{days}d {rest // 3600}h"
    return f"{rest // 3600}h {rest % 3600 // 60}m" if rest >= 3600 else f"{rest // 60}m {rest % 60}s"
