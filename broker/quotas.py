"""Client quotas: what DescribeClientQuotas and AlterClientQuotas see and change, and the
throttling of clients over them, as Kafka's ClientQuotaControlManager,
ClientQuotasImage and ClientQuotaManager (KIP-13, KIP-55, KIP-124, KIP-219, KIP-546).

Entities are user, client-id (alone or together) or ip, each named or the default
(a null name). Their quotas (``producer_byte_rate``, ``consumer_byte_rate``,
``request_percentage``, ``controller_mutation_rate``; ``connection_creation_rate`` for
ip) are kept in the ``client-quotas`` entity-config file of the first log dir
(:mod:`storage.entity_configs`), the entity written ``user=alice&client-id`` (types in
order, ``=name`` percent-encoded, no ``=`` for the default).

Enforcement (:meth:`ClientQuotas.record`): a request's user (the session principal's
name, ``ANONYMOUS`` when unauthenticated) and client id pick the most specific quota of
the kind, in Kafka's order: user+client, user+default client, user, default
user+client, default user+default client, default user, client, default client. The
level that matched decides who shares one rate: a user quota is shared by all that
user's client ids, a client-id quota by every user of that client id. Rates are
measured over ``quota.window.num`` samples of ``quota.window.size.seconds`` (Kafka's
SampledStat Rate, with its minimum window); a recorded value that takes the rate over
the quota gives a throttle time of (rate - quota) / quota x window, bounded by one
window for ``request_percentage``. Time comes from the caller (the broker's clock).

What the throttle does is the dispatcher's (``broker.dispatcher``): the response goes
out at once with ``throttle_time_ms`` set, then the connection reads nothing more for
that long (Kafka mutes the channel; KIP-219 clients also wait on their own). A Fetch
over ``consumer_byte_rate`` is answered without records (Kafka's throttled response).
``connection_creation_rate`` (KIP-612) is checked as each connection is accepted: one
over its ip's rate is closed at once (Kafka holds it for the throttle time, then closes
it). ``controller_mutation_rate`` (KIP-599) counts the partitions CreateTopics,
CreatePartitions and DeleteTopics create or delete, in Kafka's token bucket
(:meth:`ClientQuotas.mutation_quota`): strict for the versions that know
THROTTLING_QUOTA_EXCEEDED (a topic asked while the bucket is empty is refused with it),
permissive for older ones (done, then throttled).
"""

from __future__ import annotations

import ipaddress
import logging
import math
import socket
from urllib.parse import quote, unquote

log = logging.getLogger("chronolog.quotas")

USER, CLIENT_ID, IP = "user", "client-id", "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)

PRODUCE, FETCH, REQUEST = "producer_byte_rate", "consumer_byte_rate", "request_percentage"
CONTROLLER_MUTATION = "controller_mutation_rate"
CONNECTION_CREATION = "connection_creation_rate"

# QuotaConfig.userAndClientQuotaConfigs / ipConfigs: key -> (type, max for integral types)
USER_CLIENT_KEYS = {PRODUCE: "LONG", FETCH: "LONG", REQUEST: "DOUBLE", CONTROLLER_MUTATION: "DOUBLE"}
IP_KEYS = {CONNECTION_CREATION: "INT"}
_TYPE_MAX = {"INT": (2**31 - 1, "an INT"), "LONG": (2**63 - 1, "a LONG"), "SHORT": (2**15 - 1, "a SHORT")}

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2

_DEFAULT = None  # the default entity of a type


class QuotaRequestError(Exception):
    """A request Kafka refuses as a whole: ``code`` (protocol error code) and message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _invalid(message: str) -> QuotaRequestError:
    from protocol.errors import ErrorCode

    return QuotaRequestError(int(ErrorCode.INVALID_REQUEST), message)


# ----------------------------------------------------------------------------- entities
Entity = frozenset  # of (type, name-or-None)


def encode_entity(entity: Entity) -> str:
    order = {t: i for i, t in enumerate(ENTITY_TYPES)}
    parts = []
    for etype, name in sorted(entity, key=lambda e: order[e[0]]):
        parts.append(etype if name is None else f"{etype}={quote(name, safe='')}")
    return "&".join(parts)


def decode_entity(text: str) -> Entity:
    out = []
    for part in text.split("&"):
        etype, sep, name = part.partition("=")
        if etype not in ENTITY_TYPES:
            raise ValueError(f"unknown entity type {etype!r}")
        out.append((etype, unquote(name, errors="strict") if sep else None))
    return frozenset(out)


# ----------------------------------------------------------------------------- Kafka's answer order
# Kafka builds its quota answers from java.util.HashMap iteration: an entity's parts, a
# quota's keys and DescribeClientQuotas' entries come out in bucket order, not in request
# or name order, and clients that compare answers (platformatic/kafka's tests do) see it.
# These functions give the same order: a String's hash, HashMap's spread, the table size
# a map of n entries has, buckets in turn and insertion order within one.

def _java_hash(text: str) -> int:
    """java.lang.String.hashCode over UTF-16 code units, as an unsigned 32-bit value."""
    h = 0
    data = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h


def _bucket(h: int, capacity: int) -> int:
    return (h ^ (h >> 16)) & (capacity - 1)


def _table_size_for(n: int) -> int:
    cap = 1
    while cap < n:
        cap <<= 1
    return cap


def java_capacity(entries: int, initial: int | None = None) -> int:
    """The table size of a HashMap made with ``new HashMap<>(initial)`` (None: the
    default 16) after ``entries`` puts: it doubles whenever its size passes 3/4 of it."""
    cap = 16 if initial is None else _table_size_for(max(initial, 1))
    threshold = int(cap * 0.75)
    for size in range(1, entries + 1):
        if size > threshold:
            cap <<= 1
            threshold = int(cap * 0.75)
    return cap


def java_order(items, hash_of, capacity: int) -> list:
    """``items`` (in insertion order) as a HashMap of that ``capacity`` iterates them."""
    return [x for _, _, x in sorted((_bucket(hash_of(x), capacity), i, x) for i, x in enumerate(items))]


def _entity_hash(entity: Entity) -> int:
    """ClientQuotaEntity.hashCode: Objects.hash(entries), the map's hash the sum of
    key hash ^ value hash (0 for a null name)."""
    total = 0
    for etype, name in entity:
        total += _java_hash(etype) ^ (0 if name is None else _java_hash(name))
    return (31 + total) & 0xFFFFFFFF


def entity_parts(entity) -> list:
    """An entity's (type, name) pairs in the order Kafka's answers list them (a default
    HashMap of the types: client-id before user)."""
    known = {t: i for i, t in enumerate(ENTITY_TYPES)}
    parts = sorted(entity, key=lambda e: (known.get(e[0], len(known)), e[0] or ""))
    return java_order(parts, lambda e: _java_hash(e[0] or ""), 16)


def value_order(keys) -> list:
    """A quota's keys in the order DescribeClientQuotas lists them: as a ClientQuotaDelta
    applies one alteration, the keys go from a default HashMap into a new map grown from
    none (an entity's quotas set in one AlterClientQuotas, the usual case)."""
    inserted = java_order(sorted(keys), _java_hash, 16)
    return java_order(inserted, _java_hash, java_capacity(len(inserted), 0))


def entity_str(entity: Entity) -> str:
    """Kafka's ClientQuotaEntity toString-like rendering for messages and logs."""
    return "(" + ", ".join(f"{t}={'<default>' if n is None else n}" for t, n in sorted(entity)) + ")"


def _valid_ip_entity(name) -> bool:
    if name is None:
        return True
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        pass
    try:
        socket.getaddrinfo(name, None)
        return True
    except (OSError, UnicodeError):
        return False


# ----------------------------------------------------------------------------- rates
class Rate:
    """Kafka's Rate over a SampledStat: ``samples`` windows of ``window_ms``; the rate is
    the sum of the kept samples over the elapsed time, which is never taken shorter than
    ``samples - 1`` full windows (so a first burst is not seen as an infinite rate)."""

    __slots__ = ("samples", "window_ms", "_windows")

    def __init__(self, samples: int, window_ms: int) -> None:
        self.samples = max(1, int(samples))
        self.window_ms = max(1, int(window_ms))
        self._windows: list[list] = []  # [start_ms, total]

    def _purge(self, now_ms: int) -> None:
        expire = self.samples * self.window_ms
        self._windows = [w for w in self._windows if now_ms - w[0] < expire]

    def record(self, value: float, now_ms: int) -> None:
        self._purge(now_ms)
        w = self._windows[-1] if self._windows else None
        if w is None or now_ms - w[0] >= self.window_ms:
            w = [now_ms, 0.0]
            self._windows.append(w)
            if len(self._windows) > self.samples:
                del self._windows[0]
        w[1] += value

    def window_size_ms(self, now_ms: int) -> int:
        self._purge(now_ms)
        elapsed = now_ms - self._windows[0][0] if self._windows else 0
        full = elapsed // self.window_ms
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return max(1, elapsed)

    def measure_with_window(self, now_ms: int) -> tuple[float, int]:
        """(rate per second, the window in ms it was measured over)."""
        size = self.window_size_ms(now_ms)
        return sum(w[1] for w in self._windows) / (size / 1000.0), size

    def measure(self, now_ms: int) -> float:
        """Per second."""
        return self.measure_with_window(now_ms)[0]


class TokenBucket:
    """Kafka's TokenBucket stat (KIP-599): ``burst`` = quota x samples x window tokens,
    refilled at the quota per second; a mutation takes its partitions (tokens may go
    below zero, which is when the quota is exceeded)."""

    __slots__ = ("tokens", "last_ms", "burst")

    def __init__(self, burst: float, now_ms: int) -> None:
        self.burst = burst
        self.tokens = burst
        self.last_ms = now_ms

    def refill(self, rate: float, now_ms: int) -> float:
        self.tokens = min(self.burst, self.tokens + rate * max(0, now_ms - self.last_ms) / 1000.0)
        self.last_ms = max(self.last_ms, now_ms)
        return self.tokens


class ThrottlingQuotaExceeded(Exception):
    def __init__(self, throttle_ms: int) -> None:
        super().__init__("The throttling quota has been exceeded.")
        self.throttle_ms = throttle_ms


class MutationQuota:
    """One request's view of a controller_mutation_rate: ``record(partitions)`` before
    each topic is created or deleted; strict raises ThrottlingQuotaExceeded when the
    bucket is already below zero. ``throttle_ms``: what the response carries."""

    def __init__(self, bucket: TokenBucket | None, rate: float, strict: bool, now_ms: int) -> None:
        self.bucket, self.rate, self.strict, self.now_ms = bucket, rate, strict, now_ms
        self.throttle_ms = 0

    def _throttle(self) -> int:
        return int(round(-self.bucket.tokens / self.rate * 1000)) if self.bucket.tokens < 0 else 0

    def record(self, partitions: int) -> None:
        if self.bucket is None:
            return
        self.bucket.refill(self.rate, self.now_ms)
        if self.strict and self.bucket.tokens < 0:
            self.throttle_ms = self._throttle()
            raise ThrottlingQuotaExceeded(self.throttle_ms)
        self.bucket.tokens = min(self.bucket.burst, self.bucket.tokens - partitions)
        if not self.strict:
            self.throttle_ms = max(self.throttle_ms, self._throttle())


# ----------------------------------------------------------------------------- the registry
class ClientQuotas:
    def __init__(self, store, samples: int = 11, window_seconds: int = 1) -> None:
        self.store = store
        self.samples = int(samples)
        self.window_ms = int(window_seconds) * 1000
        self._quotas: dict[Entity, dict[str, float]] = {}
        for text, props in store.all().items():
            try:
                entity = decode_entity(text)
                self._quotas[entity] = {k: float(v) for k, v in props.items()}
            except ValueError as exc:
                from storage.entity_configs import EntityConfigError

                raise EntityConfigError(f"{store.path}: entity {text!r} is not a client quota entity: {exc}") from None
        self._by_kind: dict[str, dict[Entity, float]] = {}
        self._rebuild()
        self._sensors: dict[tuple, Rate] = {}

    def _rebuild(self) -> None:
        by_kind: dict[str, dict[Entity, float]] = {}
        for entity, props in self._quotas.items():
            for key, value in props.items():
                by_kind.setdefault(key, {})[entity] = value
        self._by_kind = by_kind
        self._enforcing = any(by_kind.get(k) for k in (PRODUCE, FETCH, REQUEST, CONTROLLER_MUTATION))

    # -- DescribeClientQuotas ------------------------------------------------------------
    def describe(self, components, strict: bool) -> list[tuple[Entity, dict[str, float]]]:
        """``components``: [(entity_type, match_type, match)]. Kafka's
        ClientQuotasImage.describe; raises QuotaRequestError."""
        from protocol.errors import ErrorCode

        exact: dict[str, str | None] = {}
        typed: set[str] = set()
        for etype, match_type, match in components:
            if not etype:
                raise _invalid("Invalid empty entity type.")
            if etype in exact or etype in typed:
                raise _invalid(f"Entity type {etype} cannot appear more than once in the filter.")
            if etype not in ENTITY_TYPES:
                raise QuotaRequestError(int(ErrorCode.UNSUPPORTED_VERSION), f"Unsupported entity type {etype}")
            if match_type == MATCH_EXACT:
                if match is None:
                    raise _invalid("Request specified MATCH_TYPE_EXACT, but set match string to null.")
                exact[etype] = match
            elif match_type == MATCH_DEFAULT:
                if match is not None:
                    raise _invalid("Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
                exact[etype] = None
            elif match_type == MATCH_SPECIFIED:
                if match is not None:
                    raise _invalid("Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
                typed.add(etype)
            else:
                raise _invalid(f"Unknown match type {match_type}")
        if (IP in exact or IP in typed) and ({USER, CLIENT_ID} & (set(exact) | typed)):
            raise _invalid("Invalid entity filter component combination. IP filter component should not be "
                           "used with user or clientId filter component.")
        out = []
        for entity, props in self._quotas.items():
            names = dict(entity)
            if strict and len(names) != len(exact) + len(typed):
                continue
            if any(t not in names or names[t] != n for t, n in exact.items()):
                continue
            if any(t not in names for t in typed):
                continue
            out.append((entity, dict(props)))
        return self._kafka_order(out, exact)

    def _kafka_order(self, found: list, exact: dict) -> list:
        """``found`` as ClientQuotasImage.matches lists it: the candidates' HashMap, a
        copy of the entities matching the first exact component (its size sets the
        table), else one holding every candidate. Entities of one bucket keep the order
        of the quota file (Kafka's depends on the history of its maps)."""
        if exact:
            etype = java_order(sorted(exact), _java_hash, 16)[0]
            copied = sum(1 for e in self._quotas if (etype, exact[etype]) in e)
            capacity = _table_size_for(int(copied / 0.75 + 1.0))
        else:
            capacity = java_capacity(len(found), len(found))
        return java_order(found, lambda f: _entity_hash(f[0]), capacity)

    # -- AlterClientQuotas ---------------------------------------------------------------
    def alter(self, entries, validate_only: bool) -> list[tuple[list, int, str | None]]:
        """``entries``: [(entity [(type, name)], ops [(key, value, remove)])]. Kafka's
        ClientQuotaControlManager.alterClientQuotas: a result per entry, in order
        ([(type, name)], error code, message); the valid ones are applied together."""
        from protocol.errors import ErrorCode

        results = []
        changes: dict[Entity, dict[str, float | None]] = {}
        seen: set[Entity] = set()
        for raw_entity, ops in entries:
            entity_list = [(t, n) for t, n in raw_entity]
            try:
                entity = self._validate_entity(entity_list)
                if entity in seen:
                    raise _invalid(f"Ignoring duplicate entity {entity_str(entity)}")
                seen.add(entity)
                keys = IP_KEYS if any(t == IP for t, _ in entity) else USER_CLIENT_KEYS
                new: dict[str, float | None] = {}
                for key, value, remove in ops:
                    if key in new:
                        raise _invalid(f"Duplicate quota key {key} not updating quota for this entity "
                                       f"{entity_str(entity)}")
                    if remove:
                        new[key] = None
                        continue
                    _validate_value(keys, key, value)
                    new[key] = float(value)
            except QuotaRequestError as exc:
                results.append((entity_list, exc.code, str(exc)))
                continue
            changes[entity] = new
            results.append((entity_list, int(ErrorCode.NONE), None))
        if not validate_only:
            for entity, new in changes.items():
                props = dict(self._quotas.get(entity, {}))
                for key, value in new.items():
                    if value is None:
                        props.pop(key, None)
                    else:
                        props[key] = value
                if props == self._quotas.get(entity, {}):
                    continue
                self.store.set(encode_entity(entity), {k: _fmt(v) for k, v in props.items()})
                if props:
                    self._quotas[entity] = props
                else:
                    self._quotas.pop(entity, None)
                log.info("client quotas of %s are now %s", entity_str(entity), props or "none")
            self._rebuild()
            self._sensors.clear()  # who shares a rate may have changed (Kafka: quotaResetRequired)
        return results

    @staticmethod
    def _validate_entity(entity_list) -> Entity:
        if not entity_list:
            raise _invalid("Invalid empty client quota entity")
        names: dict[str, str | None] = {}
        for etype, name in entity_list:
            if etype in names:
                raise _invalid(f"Invalid client quota entity, duplicate entity entry {etype}")
            if etype not in ENTITY_TYPES:
                raise _invalid(f"Unhandled client quota entity type: {etype}")
            if name is not None and name == "":
                raise _invalid(f"Empty {etype} not supported")
            names[etype] = name
        if IP in names:
            if USER in names or CLIENT_ID in names:
                raise _invalid("Invalid quota entity combination, IP entity shouldnot be combined with User or "
                               "ClientId")
            if not _valid_ip_entity(names[IP]):
                raise _invalid(f"{names[IP]} is not a valid IP or resolvable host.")
        return frozenset(names.items())

    # -- enforcement ---------------------------------------------------------------------
    def active(self, kind: str) -> bool:
        return bool(self._by_kind.get(kind))

    @property
    def enforcing(self) -> bool:
        """Any produce, fetch, request or controller mutation quota set (else nothing is
        recorded at all)."""
        return self._enforcing

    def resolve(self, kind: str, user: str, client_id: str):
        """(limit, (user tag, client tag)) of the most specific quota of ``kind`` for the
        user and client id, None when none applies."""
        q = self._by_kind.get(kind)
        if not q:
            return None
        u, c = (USER, user), (CLIENT_ID, client_id)
        du, dc = (USER, _DEFAULT), (CLIENT_ID, _DEFAULT)
        for entity, tags in ((frozenset((u, c)), (user, client_id)), (frozenset((u, dc)), (user, client_id)),
                             (frozenset((u,)), (user, "")), (frozenset((du, c)), (user, client_id)),
                             (frozenset((du, dc)), (user, client_id)), (frozenset((du,)), (user, "")),
                             (frozenset((c,)), ("", client_id)), (frozenset((dc,)), ("", client_id))):
            limit = q.get(entity)
            if limit is not None:
                return limit, tags
        return None

    def max_value_in_window(self, kind: str, user: str, client_id: str) -> float | None:
        """Kafka's getMaxValueInQuotaWindow: what can be recorded without throttling when
        nothing was recorded lately (quota x (samples - 1) x window); None: no quota."""
        found = self.resolve(kind, user, client_id)
        if found is None:
            return None
        return found[0] * (self.samples - 1) * (self.window_ms / 1000.0)

    def record(self, kind: str, user: str, client_id: str, value: float, now_ms: int) -> int:
        """Record ``value`` (bytes, or request-time percentage) for the client; the
        throttle time in ms (0 within quota)."""
        found = self.resolve(kind, user, client_id)
        if found is None:
            return 0
        limit, tags = found
        key = (kind, *tags)
        rate = self._sensors.get(key)
        if rate is None:
            if len(self._sensors) > 100_000:
                self._sensors.clear()  # idle sensors (Kafka expires them after an hour)
            rate = self._sensors[key] = Rate(self.samples, self.window_ms)
        rate.record(value, now_ms)
        measured, window = rate.measure_with_window(now_ms)
        if measured <= limit:
            return 0
        throttle = round((measured - limit) / limit * window)
        if kind == REQUEST:
            throttle = min(throttle, self.window_ms)
        return int(max(0, throttle))

    def connection_allowed(self, ip: str, now_ms: int) -> bool:
        """KIP-612: a new connection from ``ip`` counts against its connection_creation_rate
        (the ip's own quota, else the default ip quota; each ip its own rate). False: the
        rate is over the quota and the connection is to be closed."""
        q = self._by_kind.get(CONNECTION_CREATION)
        if not q:
            return True
        limit = q.get(frozenset({(IP, ip)}))
        if limit is None:
            limit = q.get(frozenset({(IP, _DEFAULT)}))
        if limit is None:
            return True
        key = (CONNECTION_CREATION, ip)
        rate = self._sensors.get(key)
        if rate is None:
            rate = self._sensors[key] = Rate(self.samples, self.window_ms)
        rate.record(1, now_ms)
        if rate.measure(now_ms) <= limit:
            return True
        rate.record(-1, now_ms)  # a refused connection is not a created one
        return False

    def mutation_quota(self, user: str, client_id: str, strict: bool, now_ms: int) -> "MutationQuota":
        """The controller_mutation_rate of one CreateTopics / CreatePartitions /
        DeleteTopics request (Kafka's Strict/PermissiveControllerMutationQuota)."""
        found = self.resolve(CONTROLLER_MUTATION, user, client_id)
        if found is None:
            return MutationQuota(None, 0.0, strict, now_ms)
        limit, tags = found
        key = (CONTROLLER_MUTATION, *tags)
        bucket = self._sensors.get(key)
        if bucket is None:
            burst = limit * self.samples * self.window_ms / 1000.0
            bucket = self._sensors[key] = TokenBucket(burst, now_ms)
        return MutationQuota(bucket, limit, strict, now_ms)

    def unrecord(self, kind: str, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Take back a recorded value (a throttled Fetch sends nothing, as Kafka's
        unrecordQuotaSensor)."""
        found = self.resolve(kind, user, client_id)
        if found is None:
            return
        rate = self._sensors.get((kind, *found[1]))
        if rate is not None:
            rate.record(-value, now_ms)


def _validate_value(keys: dict, key: str, value: float) -> None:
    kind = keys.get(key)
    if kind is None:
        raise _invalid(f"Invalid configuration key {key}")
    if not (value > 0.0):
        raise _invalid(f"Quota {key} must be greater than 0")
    if kind == "DOUBLE":
        if math.isinf(value):
            raise _invalid(f"Quota {key} must be finite")
        return
    top, what = _TYPE_MAX[kind]
    if value > top:
        raise _invalid(f"Proposed value for {key} is too large for {what}.")
    if abs(math.fmod(value, 1.0)) > 1e-6:
        raise _invalid(f"{key} cannot be a fractional value.")


def _fmt(value: float) -> str:
    return repr(float(value))


def mutation_quota_for(ctx, header, session, strict_since: int) -> MutationQuota:
    """The controller_mutation_rate view of a CreateTopics / CreatePartitions /
    DeleteTopics request: strict from ``strict_since`` (the version that added
    THROTTLING_QUOTA_EXCEEDED), permissive before."""
    quotas = getattr(ctx, "client_quotas", None)
    if quotas is None or not quotas.active(CONTROLLER_MUTATION):
        return MutationQuota(None, 0.0, False, 0)
    return quotas.mutation_quota(user_of(session), header.client_id or "", header.api_version >= strict_since,
                                 ctx.clock.time_ms())


def user_of(session) -> str:
    """The quota user of a session: its principal's name (``User:alice`` -> ``alice``)."""
    principal = getattr(session, "principal", None) or "User:ANONYMOUS"
    return principal.split(":", 1)[1] if ":" in principal else principal
