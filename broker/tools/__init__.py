"""Command-line tools speaking the Kafka protocol to any broker (kafka-get-offsets.sh,
kafka-topics.sh, kafka-configs.sh, kafka-consumer-groups.sh counterparts), registered as
``chronolog`` subcommands by :mod:`broker.cli`.  Networking is :mod:`broker.tools.client`
(blocking sockets + the sans-IO codec in :mod:`protocol`)."""

from __future__ import annotations

import os
import sys
from typing import Callable

DEFAULT_TIMEOUT_MS = 15_000
EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


class ToolError(Exception):
    """A one-line error for the user (exit status 1)."""


class UsageError(ToolError):
    """Bad flags or flag values (exit status 2)."""


def add_common_args(p, bootstrap_required: bool = True) -> None:
    p.add_argument("--bootstrap-server", required=bootstrap_required, metavar="HOST:PORT[,HOST:PORT]",
                   help="broker(s) to connect to")
    p.add_argument("--request-timeout-ms", type=int, default=DEFAULT_TIMEOUT_MS, metavar="MS",
                   help=f"connect and request timeout (default {DEFAULT_TIMEOUT_MS})")
    p.add_argument("--command-config", metavar="FILE",
                   help="client properties: security.protocol, sasl.mechanism, sasl.jaas.config, ssl.truststore.location...")


def run_tool(name: str, fn: Callable[[], int | None]) -> int:
    """Run a tool body: ToolError -> 'Error: ...' on stderr and exit 1 (UsageError: 2)."""
    try:
        rc = fn()
        sys.stdout.flush()
        return EXIT_OK if rc is None else rc
    except UsageError as exc:
        print(f"chronolog {name}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ToolError as exc:
        print(f"chronolog {name}: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except BrokenPipeError:
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):  # pragma: no cover
            pass
        return EXIT_OK
    except KeyboardInterrupt:
        return 130
