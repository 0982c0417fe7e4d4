"""The ``chronolog`` command line.

Subcommands:

* ``chronolog serve [--config server.properties] [--override key=value ...]
  [--log-level SPEC] [--log-format text|json]`` loads the configuration and runs the
  broker until SIGTERM/SIGINT (logging: see broker.logging_setup).
* ``chronolog healthcheck [--bootstrap-server H:P]``: one ApiVersions round trip, exit 0
  when the broker answers, 1 otherwise (the container HEALTHCHECK).
* ``chronolog config --describe [--config F] [--override key=value ...]`` prints the
  effective broker configuration, one ``name=value (source)`` line per property.
* ``chronolog dump-log --files PATH[,PATH...] [--print-data-log] [--deep-iteration]
  [--verify-index-only] [--index-sanity-check] [--max-bytes N]`` prints segment files
  (.log, .index, .timeindex) and producer snapshots (.snapshot) as Kafka's
  kafka-dump-log.sh does (see storage.dump_log).
* ``chronolog get-offsets | topics | configs | consumer-groups | share-groups --bootstrap-server H:P ...``:
  the counterparts of kafka-get-offsets.sh, kafka-topics.sh, kafka-configs.sh and
  kafka-consumer-groups.sh and kafka-share-groups.sh, speaking the Kafka protocol to any broker (see broker.tools;
  exit 1 for an error such as an unknown topic or an unreachable broker, 2 for usage).

Exit codes: 0 success, 2 usage or configuration error (the one-line ConfigError message
goes to stderr), 1 unexpected failure.

More subcommands plug in by adding a ``_register_<name>`` function to :data:`_REGISTRARS`.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from typing import Callable, Optional, Sequence

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def setup_logging(level: str = "INFO", stream=None, fmt: str = "text") -> None:
    """Logging to stderr: plain text (time level logger message) or JSON lines; ``level``
    is a level spec (``INFO,chronolog.produce=DEBUG``; see broker.logging_setup)."""
    from broker.logging_setup import setup_logging as _setup

    _setup(level, stream=stream, fmt=fmt)


def _add_config_source_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", metavar="FILE", help="a Kafka-style server.properties file")
    p.add_argument(
        "--override",
        "-o",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="set a property (repeatable; wins over the file and CHRONOLOG_* env vars)",
    )


def _load(args: argparse.Namespace, *, warn: bool = True):
    from config import load_broker_config

    return load_broker_config(args.config, list(args.override), warn=warn)


# ---------------------------------------------------------------------- serve


def _cmd_serve(args: argparse.Namespace) -> int:
    from config import ConfigError
    from config.broker_config import warn_unknown

    # Flags first (so that config problems are logged in the requested format), then
    # the logging.format / logging.levels properties where no flag was given.
    try:
        setup_logging(args.log_level or "INFO", fmt=args.log_format or "text")
        cfg = _load(args, warn=False)
        if args.log_level is None or args.log_format is None:
            setup_logging(args.log_level or cfg.logging_levels, fmt=args.log_format or cfg.logging_format)
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_USAGE
    warn_unknown(cfg)
    server = importlib.import_module(".server", __package__)  # lazy: tests need no server
    try:
        rc = server.run(cfg)
    except KeyboardInterrupt:
        return EXIT_OK
    except (server.StartupError, server.ShutdownError):
        return EXIT_FAILURE  # the reason is logged, one line
    return EXIT_OK if rc is None else int(rc)


def _register_serve(sub) -> None:
    p = sub.add_parser("serve", help="run the broker", description="Run the Chronolog broker.")
    _add_config_source_args(p)
    p.add_argument(
        "--log-level",
        default=None,
        metavar="SPEC",
        help="LEVEL and/or logger=LEVEL pairs, comma separated, e.g. INFO,chronolog.produce=DEBUG,storage=WARNING "
        "(default: the logging.levels property, INFO)",
    )
    p.add_argument(
        "--log-format",
        default=None,
        type=str.lower,
        choices=("text", "json"),
        help="text (default) or json: one JSON object per line (default: the logging.format property)",
    )
    p.set_defaults(func=_cmd_serve)


# ---------------------------------------------------------------------- healthcheck


def _cmd_healthcheck(args: argparse.Namespace) -> int:
    """ApiVersions round trip: exit 0 when the broker answers with error code 0."""
    import socket
    import struct

    from protocol import codec
    from protocol.messages import ApiVersionsRequest, RequestHeader

    host, _, port = args.bootstrap_server.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    try:
        port_no = int(port)
    except ValueError:
        print(f"healthcheck: --bootstrap-server {args.bootstrap_server!r} is not HOST:PORT", file=sys.stderr)
        return EXIT_USAGE
    header = RequestHeader(api_key=18, api_version=0, correlation_id=1, client_id="chronolog-healthcheck")
    try:
        with socket.create_connection((host, port_no), timeout=args.timeout) as sock:
            sock.settimeout(args.timeout)
            sock.sendall(codec.encode_request(header, ApiVersionsRequest()))
            size = struct.unpack(">i", _recv_exact(sock, 4))[0]
            if not 0 <= size <= 1 << 20:
                raise ValueError(f"bad response size {size}")
            correlation_id, body = codec.decode_response(18, 0, _recv_exact(sock, size))
    except Exception as exc:  # unreachable, timeout, garbage: unhealthy
        print(f"unhealthy: {args.bootstrap_server}: {exc.__class__.__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    if correlation_id != 1 or body.error_code != 0:
        print(f"unhealthy: {args.bootstrap_server}: ApiVersions error code {body.error_code}", file=sys.stderr)
        return EXIT_FAILURE
    if not args.quiet:
        print(f"ok: {args.bootstrap_server} answered ApiVersions ({len(body.api_keys)} APIs)")
    return EXIT_OK


def _recv_exact(sock, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by the broker")
        buf += chunk
    return bytes(buf)


def _register_healthcheck(sub) -> None:
    p = sub.add_parser(
        "healthcheck",
        help="exit 0 if the broker answers an ApiVersions request, else 1",
        description="Send one ApiVersions request (for container HEALTHCHECKs).",
    )
    p.add_argument("--bootstrap-server", default="127.0.0.1:9092", metavar="HOST:PORT",
                   help="default 127.0.0.1:9092")
    p.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS", help="default 5")
    p.add_argument("--quiet", "-q", action="store_true", help="print nothing on success")
    p.set_defaults(func=_cmd_healthcheck)


# ---------------------------------------------------------------------- config


def _cmd_config(args: argparse.Namespace) -> int:
    from config import ConfigError

    if not args.describe:
        args.parser.print_usage(sys.stderr)
        print("chronolog config: nothing to do (use --describe)", file=sys.stderr)
        return EXIT_USAGE
    setup_logging("WARNING")
    try:
        cfg = _load(args, warn=False)
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_USAGE
    lines = [f"{name}={'null' if value is None else value} ({source})" for name, value, source in cfg.describe()]
    lines += [f"{name}={value} ({source}, ignored)" for name, (value, source) in sorted(cfg.ignored_properties.items())]
    try:
        sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:  # e.g. `chronolog config --describe | head`
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):  # pragma: no cover
            pass
        return EXIT_OK
    for name, (value, source) in sorted(cfg.unknown_properties.items()):
        print(f"warning: unknown property {name}={value} ({source})", file=sys.stderr)
    return EXIT_OK


def _register_config(sub) -> None:
    p = sub.add_parser(
        "config",
        help="show the effective broker configuration",
        description="Show the effective broker configuration (defaults < file < CHRONOLOG_* env < --override).",
    )
    p.add_argument("--describe", action="store_true", help="print every property as name=value (source)")
    _add_config_source_args(p)
    p.set_defaults(func=_cmd_config, parser=p)


# ---------------------------------------------------------------------- dump-log


def _cmd_dump_log(args: argparse.Namespace) -> int:
    from storage.dump_log import DumpOptions, dump_files

    files = [f for f in args.files.split(",") if f]
    if not files:
        args.parser.print_usage(sys.stderr)
        print("chronolog dump-log: --files names no file", file=sys.stderr)
        return EXIT_USAGE
    options = DumpOptions(
        print_data_log=args.print_data_log,
        deep_iteration=args.deep_iteration,
        verify_index_only=args.verify_index_only,
        index_sanity_check=args.index_sanity_check,
        max_bytes=args.max_bytes,
        max_message_size=args.max_message_size,
        skip_record_metadata=args.skip_record_metadata,
    )
    try:
        return dump_files(files, sys.stdout, sys.stderr, options)
    except BrokenPipeError:  # e.g. `chronolog dump-log --files x.log | head`
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):  # pragma: no cover
            pass
        return EXIT_OK


def _register_dump_log(sub) -> None:
    p = sub.add_parser(
        "dump-log",
        help="print the contents of .log, .index, .timeindex and .snapshot files",
        description="Print segment files as Kafka's kafka-dump-log.sh does; nothing is modified.",
    )
    p.add_argument("--files", required=True, metavar="FILE[,FILE...]",
                   help="comma separated .log / .index / .timeindex / .snapshot files")
    p.add_argument("--print-data-log", action="store_true",
                   help="print record keys and payloads (implies --deep-iteration)")
    p.add_argument("--deep-iteration", action="store_true", help="print every record, not only batches")
    p.add_argument("--verify-index-only", action="store_true",
                   help="check index entries against the log; print only the mismatches")
    p.add_argument("--index-sanity-check", action="store_true",
                   help="only run the startup sanity check on index files")
    p.add_argument("--max-bytes", type=int, default=2**31 - 1, metavar="N",
                   help="read at most N bytes of each .log")
    p.add_argument("--max-message-size", type=int, default=5 * 1024 * 1024, metavar="N",
                   help="largest batch read when checking an .index (default 5 MiB)")
    p.add_argument("--skip-record-metadata", action="store_true",
                   help="with --print-data-log, print only keys and payloads")
    p.set_defaults(func=_cmd_dump_log, parser=p)


# ---------------------------------------------------------------------- Kafka tools


def _register_tools(sub) -> None:
    """get-offsets, topics, configs, consumer-groups, share-groups, acls, transactions, log-dirs:
    broker.tools (client side; they import the codec only when run)."""
    from broker.tools import acls, configs, consumer_groups, get_offsets, log_dirs, share_groups, topics, transactions

    for module in (get_offsets, topics, configs, consumer_groups, share_groups, acls, transactions, log_dirs):
        module.register(sub)


_REGISTRARS: list[Callable] = [_register_serve, _register_config, _register_dump_log, _register_healthcheck,
                               _register_tools]


# ---------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chronolog", description="Chronolog: a Kafka-protocol broker in Python.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for register in _REGISTRARS:
        register(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    return args.func(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
