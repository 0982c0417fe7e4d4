"""Decode a request frame, run its handler, encode the response.

The supported API versions live here (``SUPPORTED``) and are what ApiVersions
advertises. A request for an API or version outside them is answered the way Kafka
answers it: ApiVersions gets an UNSUPPORTED_VERSION response in the v0 format (KIP-511),
anything else closes the connection with a log line naming the API and version. A
handler that fails unexpectedly gets its request answered with UNKNOWN_SERVER_ERROR in
every partition or resource (``protocol.error_responses``), as Kafka's handleError; only
framing errors close a connection.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from functools import partial
from time import perf_counter
from typing import Any, Callable

from protocol import codec
from protocol.codec import KafkaStruct
from protocol.errors import ErrorCode

from broker import handlers
from broker.connection import _NO_LANE
from broker.context import BrokerContext
from broker.memory_pool import RequestMemoryPool
from broker.security.authenticator import COMPLETE as _COMPLETE
from broker.security.authorizer import TOPIC as _TOPIC
from broker.security.authorizer import WRITE as _WRITE
from storage.clock import reads_system_time

log = logging.getLogger("chronolog.dispatcher")

_decode_request = codec.decode_request_compiled  # protocol/_fastwire.c's, or None

try:  # a connection's consecutive Produce frames in one call (broker/_lane.c)
    from broker import _lane
except ImportError:  # not built: every frame through dispatch()
    _lane = None

# api key -> (min version, max version, handler)
SUPPORTED: dict[int, tuple[int, int, Callable[..., Any]]] = {
    0: (0, 12, handlers.produce.handle),
    1: (0, 17, handlers.fetch.handle),
    2: (0, 11, handlers.list_offsets.handle),
    3: (0, 13, handlers.metadata.handle),
    8: (0, 9, handlers.offset_commit.handle),
    9: (0, 9, handlers.offset_fetch.handle),
    10: (0, 6, handlers.find_coordinator.handle),
    11: (0, 9, handlers.join_group.handle),
    12: (0, 4, handlers.heartbeat.handle),
    13: (0, 5, handlers.leave_group.handle),
    14: (0, 5, handlers.sync_group.handle),
    15: (0, 6, handlers.describe_groups.handle),
    16: (0, 5, handlers.list_groups.handle),
    68: (0, 1, handlers.consumer_group_heartbeat.handle),
    69: (0, 1, handlers.consumer_group_describe.handle),
    76: (1, 1, handlers.share_group_heartbeat.handle),
    77: (1, 1, handlers.share_group_describe.handle),
    78: (1, 2, handlers.share_fetch.handle),
    79: (1, 2, handlers.share_acknowledge.handle),
    90: (0, 0, handlers.describe_share_group_offsets.handle),
    91: (0, 0, handlers.alter_share_group_offsets.handle),
    92: (0, 0, handlers.delete_share_group_offsets.handle),
    42: (0, 2, handlers.delete_groups.handle),
    47: (0, 0, handlers.offset_delete.handle),
    18: (0, 4, handlers.api_versions.handle),
    19: (0, 7, handlers.create_topics.handle),
    20: (0, 6, handlers.delete_topics.handle),
    21: (0, 2, handlers.delete_records.handle),
    22: (0, 5, handlers.init_producer_id.handle),
    24: (0, 5, handlers.add_partitions_to_txn.handle),
    25: (0, 4, handlers.add_offsets_to_txn.handle),
    26: (0, 4, handlers.end_txn.handle),
    27: (0, 2, handlers.write_txn_markers.handle),
    28: (0, 4, handlers.txn_offset_commit.handle),
    61: (0, 0, handlers.describe_producers.handle),
    65: (0, 0, handlers.describe_transactions.handle),
    66: (0, 2, handlers.list_transactions.handle),
    32: (0, 4, handlers.describe_configs.handle),
    33: (0, 2, handlers.alter_configs.handle),
    37: (0, 3, handlers.create_partitions.handle),
    44: (0, 1, handlers.incremental_alter_configs.handle),
    60: (0, 2, handlers.describe_cluster.handle),
    35: (0, 5, handlers.describe_log_dirs.handle),
    34: (0, 2, handlers.alter_replica_log_dirs.handle),
    55: (0, 2, handlers.describe_quorum.handle),
    74: (0, 1, handlers.list_config_resources.handle),
    75: (0, 0, handlers.describe_topic_partitions.handle),
    43: (0, 2, handlers.elect_leaders.handle),
    45: (0, 1, handlers.alter_partition_reassignments.handle),
    46: (0, 0, handlers.list_partition_reassignments.handle),
    23: (0, 4, handlers.offset_for_leader_epoch.handle),
    48: (0, 1, handlers.describe_client_quotas.handle),
    49: (0, 1, handlers.alter_client_quotas.handle),
    29: (0, 3, handlers.acls.handle_describe),
    30: (0, 3, handlers.acls.handle_create),
    31: (0, 3, handlers.acls.handle_delete),
    50: (0, 0, handlers.scram_credentials.handle_describe),
    51: (0, 0, handlers.scram_credentials.handle_alter),
    # served by broker.security.authenticator, never through a handler
    17: (0, 1, None),
    36: (0, 2, None),
}

# handlers that take ``session=`` (who is asking, from which address, through which listener)
TAKES_SESSION = frozenset(k for k, (_lo, _hi, h) in SUPPORTED.items()
                          if h is not None and "session" in inspect.signature(h).parameters)
SASL_KEYS = frozenset({17, 36})

API_VERSIONS_KEY = 18


class Dispatcher:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.connections: set = set()
        self.handshakes: set = set()  # TLS handshakes in progress (broker.connection.TlsServer tasks)
        self.socket_request_max_bytes = ctx.config.socket_request_max_bytes
        # queued.max.request.bytes (broker.memory_pool); None when <= 0, as Kafka's default
        queued = getattr(ctx.config, "queued_max_request_bytes", -1)
        self.memory_pool = RequestMemoryPool(queued) if queued > 0 else None
        # broker.metrics.BrokerMetrics or None (metrics.port=0): request counts, errors, latency
        self.metrics = getattr(ctx, "metrics", None)
        from broker.security.authenticator import Authenticator
        from broker.security.limits import ConnectionLimits

        self.authenticator = Authenticator(ctx)
        self.limits = ConnectionLimits(ctx.config, self.metrics)
        ctx.reconfigurables.append(self.limits)
        # broker/_lane.c's Lane (see lane_for), or None
        self.lane = self._make_lane()
        self._lane_plain = (self.lane, None)  # lane_for's answer without an authorizer

    # -- connections -----------------------------------------------------------------------
    def connection_opened(self, conn, ssl_object) -> bool:
        """A new connection: its session (and a TLS client's principal), then the
        connection limits. False closes it."""
        from broker.security.authenticator import new_session

        listener = conn.listener
        ip = conn.peer_host[1:] if conn.peer_host.startswith("/") else conn.peer_host
        conn.session = new_session(listener, ip)
        if not self.limits.accept(conn, listener, ip):
            return False
        quotas = self.ctx.client_quotas
        if quotas is not None and not quotas.connection_allowed(ip, self.ctx.clock.time_ms()):
            log.info("closing connection from %s on listener %s: connection_creation_rate quota of %s exceeded",
                     conn._peer, listener.name, ip)
            self.limits.release(conn)
            if self.metrics is not None:
                self.metrics.connection_rejected(listener.name)
            return False
        if ssl_object is not None:
            from broker.security.tls import NoMatchingRule, subject_dn

            cert = ssl_object.getpeercert()
            if cert:
                dn = subject_dn(cert)
                try:
                    name = listener.principal_mapper.name(dn)
                except NoMatchingRule as exc:
                    log.info("closing TLS connection from %s on listener %s: %s", conn._peer, listener.name, exc)
                    return False
                if not listener.sasl:
                    conn.session.principal = "User:" + name
        return True

    def connection_closed(self, conn) -> None:
        if conn.session is not None:
            self.limits.release(conn)
            shares = self.ctx.share_partitions
            if shares is not None and shares.sessions:
                shares.connection_closed(conn.session)

    def dispatch(self, conn, frame: memoryview):
        """``frame``: a request's bytes, a memoryview of unsigned bytes (a slice of the
        connection's buffer). Returns None (no response), a list of chunks, or an
        awaitable of chunks."""
        session = conn.session
        # read once: the authenticator's SERVE (ApiVersions before authenticating) leaves
        # the session unauthenticated
        authenticated = session is not None and session.authenticated
        if session is not None and not authenticated:
            from broker.security.authenticator import SERVE

            # SASL tokens (the legacy framing's are not even Kafka requests)
            result = self.authenticator.handle_unauthenticated(conn, frame)
            if result is not SERVE:
                return result
        # a pair met before: header and body in one call (None: the steps below, which
        # name any problem); frames are memoryviews of the connection's bytearray ("B")
        decoded = _decode_request(codec.REQUEST_TABLE, frame) if _decode_request is not None else None
        if decoded is not None:
            header, offset, request = decoded
        else:
            request = None
            try:
                header, offset = codec.decode_request_header_view(frame)
            except codec.DecodeError as exc:
                log.warning("closing connection from %s: undecodable request header: %s", conn._peer, exc)
                conn.close()
                return None
        api_key, version = header.api_key, header.api_version
        if authenticated:
            if api_key in SASL_KEYS:
                return self.authenticator.handle_authenticated(conn, header, offset, frame)
            elif session.expires_at_ms is not None and self.authenticator.session_expired(session):
                log.info("closing connection from %s on listener %s: its SASL session expired "
                         "(connections.max.reauth.ms) and it did not re-authenticate",
                         conn._peer, session.listener.name)
                conn.close()
                return None
        entry = SUPPORTED.get(api_key)
        if entry is None or not (entry[0] <= version <= entry[1]):
            if api_key == API_VERSIONS_KEY:
                return self._unsupported_api_versions(header)
            name = codec.API_KEYS.get(api_key, "unknown")
            log.warning(
                "closing connection from %s: unsupported API %s (key %d) version %d",
                conn._peer,
                name,
                api_key,
                version,
            )
            conn.close()
            return None
        if request is None:
            try:
                request = codec.decode_request_body_view(header, frame, offset)
            except codec.DecodeError as exc:
                log.warning(
                    "closing connection from %s: malformed %s v%d request: %s",
                    conn._peer,
                    codec.API_KEYS.get(api_key),
                    version,
                    exc,
                )
                conn.close()
                return None
        started = perf_counter()
        try:
            if api_key in TAKES_SESSION:
                result = entry[2](self.ctx, header, request, session=session)
            else:
                result = entry[2](self.ctx, header, request)
        except Exception as exc:
            return self._failed(conn, header, request, exc, started)
        return self._result(conn, header, request, result, started, len(frame))

    def _result(self, conn, header, request, result, started: float, nbytes: int):
        """What a handler returned (``started``: perf_counter() before it ran), answered:
        throttled by the client quotas, awaited, encoded and counted."""
        metrics = self.metrics
        api_key, version = header.api_key, header.api_version
        quotas = self.ctx.client_quotas
        throttled = quotas is not None and quotas.enforcing
        if result is not None and not isinstance(result, KafkaStruct):
            if isinstance(result, asyncio.Future) and not throttled:
                # a handler's future (a parked Fetch): answered by a callback, no task
                answer = result.get_loop().create_future()
                result.add_done_callback(partial(self._future_done, conn, header, request, started, answer))
                return answer
            if inspect.isawaitable(result):
                return self._finish_async(conn, header, request, result, started,
                                          (nbytes, perf_counter() - started) if throttled else None)
        throttle_ms = 0
        if throttled:
            result, throttle_ms = self._throttle(conn, header, request, result, nbytes, perf_counter() - started)
        if result is None:
            if metrics is not None:
                metrics.request_done(api_key, None, perf_counter() - started)
            return self._throttled(conn, None, throttle_ms) if throttle_ms else None
        encoded = codec.encode_response(api_key, version, header.correlation_id, result)
        if metrics is not None:
            metrics.request_done(api_key, result, perf_counter() - started)
        return self._throttled(conn, encoded, throttle_ms) if throttle_ms else encoded

    # -- the compiled lane (broker/_lane.c) ----------------------------------------------
    def _make_lane(self):
        """broker/_lane.c's Lane for this broker: a connection's consecutive Produce v3+
        frames answered in one call, with the calls dispatch() and the produce handler
        make for them. None when it is not built, when the steps it calls are not
        compiled either, or when Produce is not handled by produce.handle (whose
        compiled form it is)."""
        from broker.connection import _COALESCE_CHUNKS
        from broker.handlers import produce

        ctx, metrics = self.ctx, self.metrics
        if (_lane is None or produce.COMMON is None or _decode_request is None
                or codec._encode_response_compiled is None or ctx.log_manager is None
                or SUPPORTED[0][2] is not produce.handle):
            return None
        self._lane_entry = SUPPORTED[0]  # what the lane is the compiled form of
        lo, hi, _handler = self._lane_entry
        return _lane.Lane(
            decode=_decode_request, request_table=codec.REQUEST_TABLE, common=produce.COMMON,
            not_common=produce._NOT_COMMON, logs=ctx.log_manager.logs_by_key, waiters=ctx.fetch_waiters,
            notify=ctx.notify_append, clock_ms=None if reads_system_time(ctx.clock) else ctx.clock.time_ms,
            produced=None if metrics is None else metrics.produced,
            request_done=None if metrics is None else metrics.request_done,
            encode=codec._encode_response_compiled, response_table=codec.RESPONSE_TABLE,
            encode_python=codec.encode_response, min_version=max(lo, 3), max_version=hi,
            max_frame=self.socket_request_max_bytes, coalesce=_COALESCE_CHUNKS)

    def lane_for(self, session):
        """(lane, writable) for the next frames of a connection with this session, or
        (None, None): the lane answers produce requests as dispatch() does for a session
        that is authenticated and never expires (no SASL step, no re-authentication to
        check) on a broker enforcing no client quota (nothing to record per request),
        while Produce's entry in SUPPORTED (versions and handler) is the one it was made
        from. ``writable``: what the lane hands the compiled produce handle, the topics
        the authorizer allowed the session to write (BrokerContext.writable_topics), None
        without an authorizer. Asked once per read: a request that may change the ACLs
        ends the lane's part of the read (KafkaConnection._process)."""
        lane = self.lane
        if lane is None or (session is not None and (session.state != _COMPLETE
                                                     or session.expires_at_ms is not None)) \
                or SUPPORTED.get(0) is not self._lane_entry:
            return _NO_LANE
        ctx = self.ctx
        quotas = ctx.client_quotas
        if quotas is not None and quotas.enforcing:
            return _NO_LANE
        authorizer = ctx.authorizer
        if authorizer is None or session is None:
            plain = self._lane_plain
            return plain if plain[0] is lane else self._plain(lane)
        return lane, authorizer.allowed_names(session, _WRITE, _TOPIC)  # ctx.writable_topics, one call fewer

    def _plain(self, lane):
        """(lane, None), made again when ``self.lane`` was replaced (tests wrap it)."""
        self._lane_plain = (lane, None)
        return self._lane_plain

    def lane_rest(self, conn, left, nbytes: int):
        """A frame the lane began and left to this path, ``left`` its (after, header,
        request, outcome, now_ms, tally, started), finished as dispatch() would: the
        produce handler from its start (the compiled handle's ``not its case``, nothing
        done), from where its compiled loop stopped, or the request failed (an
        exception)."""
        _after, header, request, outcome, now, tally, started = left
        if isinstance(outcome, BaseException):
            if not isinstance(outcome, Exception):
                raise outcome
            return self._failed(conn, header, request, outcome, started)
        produce = handlers.produce
        try:
            if outcome is produce._NOT_COMMON:
                result = produce.handle(self.ctx, header, request, session=conn.session)
            else:
                result = produce.common_rest(self.ctx, header.api_version, request, outcome, now, tally)
        except Exception as exc:
            return self._failed(conn, header, request, exc, started)
        return self._result(conn, header, request, result, started, nbytes)

    # -- client quotas ---------------------------------------------------------------------
    def _throttle(self, conn, header, request, response, request_bytes: int, seconds: float):
        """Record the request against the client's quotas (broker.quotas): the frame
        size for a Produce (producer_byte_rate), the records sent for a consumer's Fetch
        (consumer_byte_rate), the handler time for every request (request_percentage).
        Returns (response, throttle ms): a throttled Fetch is answered without records
        (Kafka's getThrottledResponse, its bytes taken back), every response carries
        the throttle time."""
        from broker.quotas import FETCH, PRODUCE, REQUEST, user_of

        quotas = self.ctx.client_quotas
        user, client = user_of(conn.session), header.client_id or ""
        now = self.ctx.clock.time_ms()
        api_key = header.api_key
        throttle = 0
        fetched = None
        if api_key == 0 and quotas.active(PRODUCE):
            throttle = quotas.record(PRODUCE, user, client, request_bytes, now)
        elif (api_key == 1 and response is not None and quotas.active(FETCH)
              and handlers.fetch.replica_id_of(header.api_version, request) < 0):
            fetched = sum(len(p.records) for t in response.responses for p in t.partitions if p.records)
            throttle = quotas.record(FETCH, user, client, fetched, now)
        if quotas.active(REQUEST):
            throttle = max(throttle, quotas.record(REQUEST, user, client, seconds * 100.0, now))
        # set by a handler: controller_mutation_rate (CreateTopics, CreatePartitions, DeleteTopics)
        throttle = max(throttle, getattr(response, "throttle_time_ms", 0) or 0)
        if throttle <= 0:
            return response, 0
        if fetched is not None:
            quotas.unrecord(FETCH, user, client, fetched, now)
            response = type(response)(throttle_time_ms=throttle, error_code=0, session_id=0, responses=[])
        elif response is not None and hasattr(response, "throttle_time_ms"):
            response.throttle_time_ms = throttle
        if self.metrics is not None:
            self.metrics.throttled(codec.API_KEYS.get(api_key, str(api_key)), throttle)
        return response, throttle

    @staticmethod
    async def _throttled(conn, chunks, throttle_ms: int):
        """KIP-219: the response goes out now; the connection then reads nothing for
        ``throttle_ms`` (Kafka mutes the channel), which holds back an older client that
        does not wait on its own."""
        if chunks:
            conn.write_chunks(chunks)
        await asyncio.sleep(throttle_ms / 1000.0)
        return None

    def _error_response(self, conn, header, request, exc: Exception):
        """Kafka's KafkaApis.handleError: an unexpected failure answers the request with
        UNKNOWN_SERVER_ERROR for every partition or resource in it (logged once, with the
        traceback) and the connection stays open. A produce with acks=0 has no response:
        its connection is closed, as Kafka closes it."""
        from protocol.error_responses import error_response

        name = codec.API_KEYS.get(header.api_key)
        log.error("%s v%d request from %s failed; answering UNKNOWN_SERVER_ERROR", name, header.api_version,
                  conn._peer, exc_info=exc)
        if header.api_key == 0 and getattr(request, "acks", 1) == 0:
            conn.close()
            return None
        try:
            body = error_response(header.api_key, header.api_version, request,
                                  message=f"Unexpected error: {type(exc).__name__}")
            return codec.encode_response(header.api_key, header.api_version, header.correlation_id, body)
        except Exception:  # pragma: no cover - the error response itself failed
            log.exception("no error response for %s v%d; closing the connection", name, header.api_version)
            conn.close()
            return None

    async def _finish_async(self, conn, header, request, awaitable, started: float = 0.0, throttle=None):
        """``throttle``: (request bytes, handler seconds before the first wait) when
        client quotas are enforced; the time spent waiting (a Fetch long poll) is not
        the client's request time."""
        try:
            response = await awaitable
        except Exception as exc:
            return self._failed(conn, header, request, exc, started)
        throttle_ms = 0
        if throttle is not None:
            response, throttle_ms = self._throttle(conn, header, request, response, *throttle)
        encoded = self._answer(header, response, started)
        if throttle_ms:
            await self._throttled(conn, encoded, throttle_ms)
            return None
        return encoded

    def _future_done(self, conn, header, request, started: float, answer: asyncio.Future,
                     future: asyncio.Future) -> None:
        """A handler's future is done: ``answer`` (what the connection waits on) gets the
        encoded response, as ``_finish_async`` would return it without quotas."""
        if answer.done():
            return
        if future.cancelled():
            answer.cancel()
            return
        exc = future.exception()
        answer.set_result(self._failed(conn, header, request, exc, started) if exc is not None
                          else self._answer(header, future.result(), started))

    def _answer(self, header, response, started: float):
        """The encoded response (None for none) of a request handled since ``started``,
        counted in the request metrics."""
        metrics = self.metrics
        if response is None:
            if metrics is not None:
                metrics.request_done(header.api_key, None, perf_counter() - started)
            return None
        encoded = codec.encode_response(header.api_key, header.api_version, header.correlation_id, response)
        if metrics is not None:
            metrics.request_done(header.api_key, response, perf_counter() - started)
        return encoded

    def _failed(self, conn, header, request, exc: Exception, started: float):
        if self.metrics is not None:
            self.metrics.request_failed(header.api_key, perf_counter() - started)
        return self._error_response(conn, header, request, exc)

    def _unsupported_api_versions(self, header):
        from protocol.messages import ApiVersionsResponse

        body = ApiVersionsResponse(
            error_code=ErrorCode.UNSUPPORTED_VERSION,
            api_keys=api_version_entries(),
        )
        return codec.encode_response(API_VERSIONS_KEY, 0, header.correlation_id, body)


def api_version_entries():
    from protocol.messages import ApiVersionsResponse

    return [
        ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
        for k, (lo, hi, _) in sorted(SUPPORTED.items())
    ]
