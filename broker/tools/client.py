"""A small synchronous Kafka client for the command-line tools.

It speaks the Kafka protocol through our own sans-IO codec (:mod:`protocol.codec`) over
blocking sockets with timeouts, so it works against any Kafka-compatible broker.  One
:class:`Connection` per broker; :class:`Client` bootstraps, reads metadata, routes
requests to partition leaders and group coordinators and negotiates API versions
(ApiVersions v0, then the highest version both sides support, capped at the versions
the tools were written for).

Every failure the user can cause or meet (unreachable broker, timeout, unknown topic,
an error code in a response) is a :class:`ToolError` with a one-line message.
"""

from __future__ import annotations

import socket
import ssl
import struct
from typing import Any, Iterable

from protocol import codec
from protocol.errors import ErrorCode
from protocol.messages import ApiVersionsRequest, RequestHeader

from broker.tools import DEFAULT_TIMEOUT_MS, ToolError, UsageError  # noqa: F401  (re-export)

CLIENT_ID = "chronolog-tools"

# api key -> highest version these tools are written for (field shapes change above)
VERSION_CAPS = {
    0: 9,    # Produce (unused)
    1: 12,   # Fetch: v13+ identifies topics by id
    2: 8,    # ListOffsets
    3: 12,   # Metadata
    8: 8,    # OffsetCommit
    9: 9,    # OffsetFetch (v8+: batched groups)
    10: 3,   # FindCoordinator: v4+ batches keys
    15: 6,   # DescribeGroups (v6: GROUP_ID_NOT_FOUND for a group that is not classic)
    16: 4,   # ListGroups
    19: 7,   # CreateTopics
    20: 5,   # DeleteTopics: v6 adds topic ids
    32: 4,   # DescribeConfigs
    37: 3,   # CreatePartitions
    44: 1,   # IncrementalAlterConfigs
}

API_NAMES = {k: n for k, n in codec.API_KEYS.items()}

# Retriable coordinator/leader errors worth one more try after a short pause.
RETRIABLE = {
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
}


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error code {code}"


def parse_bootstrap(value: str) -> list[tuple[str, int]]:
    """``host:port[,host:port...]`` (IPv6 as ``[::1]:9092``)."""
    out = []
    for item in (value or "").split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise UsageError(f"--bootstrap-server: invalid address {item!r} (expected host:port)")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise UsageError(f"--bootstrap-server: no address in {value!r}")
    return out


class Connection:
    """One blocking connection to one broker; requests are answered in order."""

    def __init__(self, host: str, port: int, timeout_ms: int = DEFAULT_TIMEOUT_MS, security=None):
        self.host, self.port = host, port
        self.timeout = timeout_ms / 1000.0
        self._cid = 0
        try:
            self.sock = socket.create_connection((host, port), timeout=self.timeout)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if security is not None and security.tls:
                self.sock = security.ssl_context.wrap_socket(self.sock, server_hostname=host)
        except socket.timeout:
            raise ToolError(f"cannot connect to {host}:{port}: timed out after {timeout_ms} ms") from None
        except ssl.SSLError as exc:
            raise ToolError(f"TLS handshake with {host}:{port} failed: {exc.reason or exc}") from None
        except OSError as exc:
            raise ToolError(f"cannot connect to {host}:{port}: {exc.strerror or exc}") from None
        self.versions: dict[int, tuple[int, int]] = {}
        self._negotiate()
        if security is not None and security.sasl:
            from broker.tools.security import authenticate

            authenticate(self, security)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:  # pragma: no cover
            pass

    # -- framing --------------------------------------------------------------------

    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.sock.recv(min(n - len(buf), 1 << 20))
            except socket.timeout:
                raise ToolError(
                    f"broker {self.host}:{self.port} did not answer within {int(self.timeout * 1000)} ms"
                ) from None
            except OSError as exc:
                raise ToolError(f"connection to {self.host}:{self.port} failed: {exc.strerror or exc}") from None
            if not chunk:
                raise ToolError(f"broker {self.host}:{self.port} closed the connection")
            buf += chunk
        return bytes(buf)

    def _roundtrip(self, api_key: int, version: int, body: Any) -> Any:
        self._cid += 1
        header = RequestHeader(api_key=api_key, api_version=version, correlation_id=self._cid,
                               client_id=CLIENT_ID)
        data = codec.encode_request(header, body)
        try:
            self.sock.sendall(data)
        except socket.timeout:
            raise ToolError(f"broker {self.host}:{self.port}: send timed out") from None
        except OSError as exc:
            raise ToolError(f"connection to {self.host}:{self.port} failed: {exc.strerror or exc}") from None
        (size,) = struct.unpack(">i", self._recv_exact(4))
        if size < 4 or size > 1 << 30:
            raise ToolError(f"broker {self.host}:{self.port} sent an invalid frame size {size}")
        frame = self._recv_exact(size)
        try:
            cid, resp = codec.decode_response(api_key, version, frame)
        except codec.CodecError as exc:
            raise ToolError(f"broker {self.host}:{self.port} sent a malformed {API_NAMES[api_key]} "
                            f"v{version} response: {exc}") from None
        if cid != self._cid:
            raise ToolError(f"broker {self.host}:{self.port} answered correlation id {cid}, expected {self._cid}")
        return resp

    def _negotiate(self) -> None:
        resp = self._roundtrip(18, 0, ApiVersionsRequest())
        if resp.error_code:
            raise ToolError(f"broker {self.host}:{self.port}: ApiVersions failed: {error_name(resp.error_code)}")
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}

    def version_for(self, api_key: int) -> int:
        name = API_NAMES.get(api_key, str(api_key))
        if api_key not in self.versions:
            raise ToolError(f"broker {self.host}:{self.port} does not support the {name} API (key {api_key})")
        lo, hi = self.versions[api_key]
        schema_versions = codec.valid_versions(api_key)
        v = min(hi, VERSION_CAPS.get(api_key, hi), schema_versions.hi)
        if v < lo or v < schema_versions.lo:
            raise ToolError(f"broker {self.host}:{self.port} supports {name} v{lo}-{hi} only; "
                            f"this tool speaks up to v{v}")
        return v

    def supports(self, api_key: int) -> bool:
        return api_key in self.versions

    def request(self, body: Any, version: int | None = None) -> tuple[int, Any]:
        """Send a request object; returns ``(version used, response)``."""
        api_key = type(body).API_KEY
        v = self.version_for(api_key) if version is None else version
        return v, self._roundtrip(api_key, v, body)


class Client:
    """Bootstrap + metadata + routing to leaders and coordinators."""

    def __init__(self, bootstrap: str, timeout_ms: int = DEFAULT_TIMEOUT_MS, security=None):
        self.timeout_ms = timeout_ms
        self.security = security  # broker.tools.security.ClientSecurity (--command-config)
        self.addresses = parse_bootstrap(bootstrap)
        self._conns: dict[tuple[str, int], Connection] = {}
        self.brokers: dict[int, tuple[str, int]] = {}
        self.controller_id = -1
        self.cluster_id: str | None = None
        errors = []
        self.bootstrap_conn: Connection | None = None
        for host, port in self.addresses:
            try:
                self.bootstrap_conn = self._connect(host, port)
                break
            except ToolError as exc:
                errors.append(str(exc))
        if self.bootstrap_conn is None:
            raise ToolError("--bootstrap-server " + bootstrap + ": no broker reachable (" + "; ".join(errors) + ")")

    @classmethod
    def from_args(cls, args) -> "Client":
        """The tools' common flags: --bootstrap-server, --request-timeout-ms, --command-config."""
        from broker.tools.security import load_command_config

        return cls(args.bootstrap_server, args.request_timeout_ms,
                   load_command_config(getattr(args, "command_config", None)))

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for c in self._conns.values():
            c.close()
        self._conns.clear()

    def _connect(self, host: str, port: int) -> Connection:
        c = self._conns.get((host, port))
        if c is None:
            c = Connection(host, port, self.timeout_ms, self.security)
            self._conns[(host, port)] = c
        return c

    def node(self, node_id: int) -> Connection:
        if node_id not in self.brokers:
            self.metadata([])
        if node_id not in self.brokers:
            raise ToolError(f"broker {node_id} is not in the cluster metadata")
        return self._connect(*self.brokers[node_id])

    def any(self) -> Connection:
        assert self.bootstrap_conn is not None
        return self.bootstrap_conn

    # -- metadata -------------------------------------------------------------------

    def metadata(self, topics: Iterable[str] | None) -> Any:
        """Metadata for ``topics`` (None: every topic); never auto-creates topics."""
        from protocol.messages import MetadataRequest

        conn = self.any()
        v = conn.version_for(3)
        if topics is None:
            req_topics = None if v >= 1 else []
        else:
            req_topics = [MetadataRequest.MetadataRequestTopic(name=t) for t in topics]
        _, resp = conn.request(MetadataRequest(topics=req_topics, allow_auto_topic_creation=False), v)
        self.brokers = {b.node_id: (b.host, b.port) for b in resp.brokers}
        self.controller_id = getattr(resp, "controller_id", -1)
        self.cluster_id = getattr(resp, "cluster_id", None)
        return resp

    def topic_partitions(self, topics: Iterable[str]) -> dict[str, dict[int, int]]:
        """``{topic: {partition: leader id}}``; ToolError naming an unknown topic."""
        topics = list(topics)
        resp = self.metadata(topics)
        out: dict[str, dict[int, int]] = {}
        for t in resp.topics:
            if t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise ToolError(f"--topic {t.name}: topic does not exist")
            if t.error_code:
                raise ToolError(f"topic {t.name}: {error_name(t.error_code)}")
            out[t.name] = {p.partition_index: p.leader_id for p in t.partitions}
        for name in topics:
            if name not in out:
                raise ToolError(f"--topic {name}: topic does not exist")
        return out

    # -- ListOffsets ----------------------------------------------------------------

    def list_offsets(self, requests: dict[tuple[str, int], int], leaders: dict[str, dict[int, int]],
                     isolation_level: int = 0) -> dict[tuple[str, int], tuple[int, int, int]]:
        """``{(topic, partition): timestamp spec}`` -> ``{tp: (error, offset, timestamp)}``,
        each partition asked of its leader (``isolation_level`` 1: read_committed, so
        latest is the last stable offset)."""
        from protocol.messages import ListOffsetsRequest

        by_leader: dict[int, dict[str, list]] = {}
        for (topic, part), ts in requests.items():
            leader = leaders[topic][part]
            if leader < 0:
                raise ToolError(f"{topic}-{part} has no leader")
            by_leader.setdefault(leader, {}).setdefault(topic, []).append(
                ListOffsetsRequest.ListOffsetsPartition(partition_index=part, timestamp=ts))
        out: dict[tuple[str, int], tuple[int, int, int]] = {}
        for leader, topics in by_leader.items():
            conn = self.node(leader)
            v = conn.version_for(2)
            if min(p.timestamp for ps in topics.values() for p in ps) < -2:
                need = min(p.timestamp for ps in topics.values() for p in ps)
                v_needed = {-3: 7, -4: 8, -5: 9}.get(need, 7)
                if v < v_needed:
                    raise ToolError(f"broker {conn.host}:{conn.port} supports ListOffsets up to v{v}; "
                                    f"--time {need} needs v{v_needed}")
            req = ListOffsetsRequest(
                replica_id=-1, isolation_level=isolation_level,
                topics=[ListOffsetsRequest.ListOffsetsTopic(name=t, partitions=ps) for t, ps in topics.items()])
            _, resp = conn.request(req, v)
            for t in resp.topics:
                for p in t.partitions:
                    if v == 0:
                        off = p.old_style_offsets[0] if p.old_style_offsets else -1
                        out[(t.name, p.partition_index)] = (p.error_code, off, -1)
                    else:
                        out[(t.name, p.partition_index)] = (p.error_code, p.offset, p.timestamp)
        return out

    # -- groups ---------------------------------------------------------------------

    def coordinator(self, group: str) -> Connection:
        import time

        from protocol.messages import FindCoordinatorRequest

        conn = self.any()
        last = None
        for attempt in range(5):
            v = conn.version_for(10)
            _, resp = conn.request(FindCoordinatorRequest(key=group, key_type=0), v)
            if resp.error_code == 0:
                return self._connect(resp.host, resp.port)
            last = resp.error_code
            if resp.error_code not in RETRIABLE:
                break
            time.sleep(0.2 * (attempt + 1))
        msg = error_name(last)
        raise ToolError(f"--group {group}: cannot find the group coordinator: {msg}")
