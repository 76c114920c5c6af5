"""schedctl's argument types, the options every command takes, its two local errors and the
text layout of human output (tables, aligned fields): shared by the command modules (schedctl.py,
job_commands.py, run_commands.py, dag_commands.py, ...), which import this and never each other
(each is imported by schedctl only)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

import grpc
from tabulate import tabulate

from .context import CLUSTER_ENV, parse_cluster
from .documents import parse_size
from .convert import parse_time
from .errors import SchedError, ValidationError, brief, clip
from .specs import INT32_MAX, parse_duration

PROG = "schedctl"


class UsageError(Exception):
    """The command line does not make sense (exit status 2)."""


class CommandError(Exception):
    """The command failed for a reason found locally, e.g. an unreadable file (exit status 1)."""


class ExitStatus(Exception):
    """The command did what it was asked and says something by its status alone (``job diff
    --exit-code``: 3 when something would change); nothing more is printed."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def _count(low: int, high: int = INT32_MAX) -> Callable[[str], int]:
    """An argparse type: an integer from ``low`` to ``high`` (default: the int32 maximum, the
    type of every integer field of the API, so no flag can overflow a message)."""

    def parse(text: str) -> int:
        try:
            value = int(text) if len(text) <= 20 else None     # int() refuses past 4300 digits
        except ValueError:
            value = None
        if value is None and not text.strip().lstrip("+-").isdigit():
            raise argparse.ArgumentTypeError(f"not an integer: {brief(text)}")
        if value is None or value < low or value > high:
            below = value is not None and value < low and high == INT32_MAX
            bounds = f">= {low}" if below else f"from {low} to {high}"
            raise argparse.ArgumentTypeError(f"must be {bounds}: {clip(text, 60)}")
        return value

    return parse


def _seconds(text: str) -> float:
    try:
        return parse_duration(text)
    except ValidationError as err:
        raise argparse.ArgumentTypeError(err.message) from None


def _deadline(text: str) -> float:
    seconds = _seconds(text)
    if not seconds:
        raise argparse.ArgumentTypeError("must be more than 0")
    return seconds


def _time_arg(text: str) -> Callable[[float], int]:
    """A time given as RFC 3339, ``now``, or a duration ago (``90d``, ``6h30m``, also written
    ``-90d`` or ``90d ago``); resolved later against the command's clock, so tests can inject it."""
    return _parse_time_arg(text, ahead=False)


def time_arg(*, ahead: bool = False) -> Callable[[str], Callable[[float], int]]:
    """`_time_arg`, or with ``ahead`` (forecasts, instants to come) the same times where a bare
    duration counts from now on (``1h``, ``+1h``) and ``1h ago`` or ``-1h`` back."""
    return (lambda text: _parse_time_arg(text, ahead=True)) if ahead else _time_arg


def _parse_time_arg(text: str, *, ahead: bool) -> Callable[[float], int]:
    text = text.strip()
    if text == "now":
        return lambda now: int(now * 1000)
    back = not ahead or text.endswith("ago") or text.startswith("-")
    relative = text.removesuffix("ago").strip().removeprefix("-")
    if ahead:
        relative = relative.removeprefix("+")
    if relative and relative[0].isdigit() and relative[-1] in "smhd":
        try:
            seconds = parse_duration(relative)
        except ValidationError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        if seconds > _MAX_AGO_SECONDS:      # before 1900: no schedule of ours has instants there
            raise argparse.ArgumentTypeError(f"too far back: at most {_MAX_AGO_SECONDS // 86400}d ago" if back
                                             else f"too far ahead: at most {_MAX_AGO_SECONDS // 86400}d")
        sign = -1 if back else 1
        return lambda now: int((now + sign * seconds) * 1000)
    try:
        ms = parse_time(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"bad time {brief(text)}: {e}") from None
    return lambda now: ms


_MAX_AGO_SECONDS = 200 * 365 * 86400


def _file_size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _file_options(parser: argparse.ArgumentParser, *, required: bool) -> None:
    """``-f FILE`` and the bound on how much of it is read (see ``schedd_client.documents``)."""
    parser.add_argument("-f", "--file", metavar="FILE", required=required,
                        help='YAML/JSON documents ("-" = stdin)')
    parser.add_argument("--max-file-size", type=_file_size, metavar="SIZE",
                        help="refuse a larger FILE, e.g. 256MiB (default: $SCHEDCTL_MAX_FILE_BYTES or 64MiB)")


def _addresses(text: str) -> list[str]:
    try:
        return parse_cluster(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _global_options(parser: argparse.ArgumentParser, *, top: bool, timeout: bool = True) -> None:
    """The options every command takes. Below the top level they default to SUPPRESS, so a value
    given before the command is not overwritten by the subcommand's parser."""

    def default(value: Any) -> Any:
        return value if top else argparse.SUPPRESS

    group = parser.add_argument_group("global options")
    group.add_argument(
        "--cluster",
        metavar="ADDRS",
        type=_addresses,
        default=default(None),
        help=f"node addresses, host:port,host:port (default: ${CLUSTER_ENV} or 127.0.0.1:7070)",
    )
    group.add_argument("--context", metavar="FILE", default=default(None),
                       help="a context file with the cluster, CA/cert/key and token "
                            "(default: $SCHEDD_CONTEXT)")
    group.add_argument("--ca", metavar="FILE", default=default(None),
                       help="connect with TLS trusting this CA (default: $SCHEDD_CA)")
    group.add_argument("--cert", metavar="FILE", default=default(None),
                       help="client certificate for mTLS (default: $SCHEDD_CERT)")
    group.add_argument("--key", metavar="FILE", default=default(None),
                       help="the client certificate's key (default: $SCHEDD_KEY)")
    group.add_argument(
        "--token", metavar="TOKEN", default=default(None),
        help="bearer token <accessor>.<secret> (default: $SCHEDD_TOKEN); prefer the variable: "
             "a command line is visible to other users",
    )  # fmt: skip
    group.add_argument(
        "-o", "--output", choices=("table", "wide", "json", "yaml"), default=default("table"),
        help="output format (default: table; wide: a table with more columns, e.g. run list's RECORDED and TERM)",
    )  # fmt: skip
    if timeout:
        group.add_argument(
            "--timeout", dest="rpc_timeout", metavar="S", type=_deadline, default=default(15.0),
            help="give up on the cluster after S seconds, failover included (default: 15)",
        )  # fmt: skip
    group.add_argument(
        "--stale", action="store_true", default=default(False),
        help="read from whichever node answers, without asking the leader",
    )  # fmt: skip


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, empty: str) -> str:
    if not rows:
        return empty
    return tabulate(rows, headers=headers, tablefmt="plain", disable_numparse=True)


def _fields(*pairs: tuple[str, Any]) -> str:
    """``Label:  value`` lines, aligned; empty values left out, multi-line values indented."""
    width = max(len(label) for label, _ in pairs) + 2
    shown = [(label, str(value)) for label, value in pairs if value not in ("", None)]
    lines = []
    for label, value in shown:
        first, *rest = value.split("\n")
        lines.append(f"{label + ':':<{width}}{first}")
        lines += [" " * width + line for line in rest]
    return "\n".join(lines)


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.rstrip("\n").split("\n"))


def _shorten(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def shard_count(client: Any) -> int:
    """How many shard groups the cluster has (1: unsharded, or a node from before shards)."""
    try:
        return max(1, client.list_shards().shards)
    except SchedError as e:
        if e.code != grpc.StatusCode.UNIMPLEMENTED:
            raise
        return 1
