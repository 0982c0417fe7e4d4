"""TLS for SSL and SASL_SSL listeners: an ``ssl.SSLContext`` from Kafka's ``ssl.*``
properties, and the principal of a client certificate.

Key material is PEM, as Kafka accepts it:

* ``ssl.keystore.type=PEM`` with ``ssl.keystore.location`` (one file holding the private
  key and the certificate chain), or inline ``ssl.keystore.certificate.chain`` +
  ``ssl.keystore.key``; ``ssl.key.password`` decrypts an encrypted key.
* ``ssl.truststore.type=PEM`` with ``ssl.truststore.location`` (CA certificates) or
  inline ``ssl.truststore.certificates``; without a truststore the system CAs are used.

JKS and PKCS12 stores are refused with a message saying how to convert them (a file
that is PEM is read whatever its declared type, with a warning).

``ssl.client.auth``: none, requested (a certificate is verified when sent), required.
``ssl.enabled.protocols`` bounds the TLS versions; ``ssl.cipher.suites`` takes Kafka's
(IANA) names or OpenSSL's for TLS 1.2 suites. The principal of a verified client
certificate is its subject's distinguished name in RFC 2253 form (as Java's
``X500Principal.getName()``), mapped by ``ssl.principal.mapping.rules``
(:class:`PrincipalMapper`, Kafka's rule syntax).

Dynamic keystore update (Kafka's SslFactory reconfiguration): each handshake uses the
listener's context of the moment (broker.connection.TlsServer), so replacing it
changes what new connections get while open ones keep theirs. The new keystore's
certificate must keep the subject DN and SANs of the old one unless
``ssl.allow.dn.changes`` / ``ssl.allow.san.changes`` (:func:`ensure_compatible`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import ssl
import tempfile

from config.properties import ConfigError

log = logging.getLogger("chronolog.security")

_PEM_ARMOR = b"-----BEGIN"


def _read(path: str, prop: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise ConfigError(prop, path, f"cannot read the file: {exc.strerror or exc}") from None


def _check_pem(kind: str, store_type: str, path: str, data: bytes, listener: str) -> None:
    if _PEM_ARMOR in data:
        if store_type.upper() != "PEM":
            log.warning("listener %s: %s %s is PEM although ssl.%s.type=%s; reading it as PEM",
                        listener, kind, path, kind, store_type)
        return
    raise ConfigError(f"ssl.{kind}.location", path,
                      f"ssl.{kind}.type={store_type} stores are not read by Chronolog: give a PEM file "
                      f"(ssl.{kind}.type=PEM), e.g. `openssl pkcs12 -in store.p12 -nodes -out store.pem` "
                      "(JKS: `keytool -importkeystore -deststoretype PKCS12` first)")


def iana_to_openssl(name: str) -> str:
    """``TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`` -> ``ECDHE-RSA-AES128-GCM-SHA256``
    (an OpenSSL name is returned unchanged)."""
    if not name.startswith("TLS_") or "_WITH_" not in name:
        return name
    kx, cipher = name[4:].split("_WITH_", 1)
    cipher = re.sub(r"^AES_(128|256)_", r"AES\1_", cipher)
    cipher = cipher.replace("CHACHA20_POLY1305_SHA256", "CHACHA20_POLY1305")
    parts = ([] if kx == "RSA" else [kx.replace("_", "-")]) + [cipher.replace("_", "-")]
    return "-".join(parts)


def build_server_context(value, listener: str) -> ssl.SSLContext:
    """The listener's server SSLContext. ``value(prop)`` gives the listener's value of a
    broker property (``BrokerConfig.listener_value`` bound to the listener). Raises
    ConfigError naming the property at fault."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    protocols = list(value("ssl.enabled.protocols") or [])
    if not protocols:
        raise ConfigError("ssl.enabled.protocols", "", "at least one TLS protocol is needed")
    order = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
    ctx.minimum_version = min(order[p] for p in protocols)
    ctx.maximum_version = max(order[p] for p in protocols)
    suites = [s for s in (value("ssl.cipher.suites") or []) if s]
    if suites:
        tls12 = [iana_to_openssl(s) for s in suites if not s.startswith("TLS_AES_") and not s.startswith("TLS_CHACHA20_")]
        if tls12:
            try:
                ctx.set_ciphers(":".join(tls12))
            except ssl.SSLError:
                raise ConfigError("ssl.cipher.suites", ",".join(suites),
                                  "none of these cipher suites is known to this OpenSSL") from None
    # the broker's key and certificate chain
    password = value("ssl.key.password")
    location = value("ssl.keystore.location")
    chain, key = value("ssl.keystore.certificate.chain"), value("ssl.keystore.key")
    store_type = value("ssl.keystore.type") or "JKS"
    try:
        if location:
            _check_pem("keystore", store_type, location, _read(location, "ssl.keystore.location"), listener)
            ctx.load_cert_chain(location, password=password)
        elif chain and key:
            _load_inline_chain(ctx, chain, key, password)
        else:
            raise ConfigError("ssl.keystore.location", None,
                              f"listener {listener} uses TLS: set ssl.keystore.location (PEM) or "
                              "ssl.keystore.certificate.chain and ssl.keystore.key "
                              f"(per listener: listener.name.{listener.lower()}.ssl.keystore.location)")
    except ssl.SSLError as exc:
        raise ConfigError("ssl.keystore.location" if location else "ssl.keystore.key", location or "[hidden]",
                          f"cannot load the key and certificate chain ({exc.reason or exc}); an encrypted key "
                          "needs ssl.key.password") from None
    # who the broker trusts
    client_auth = (value("ssl.client.auth") or "none").lower()
    ctx.verify_mode = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
                       "required": ssl.CERT_REQUIRED}[client_auth]
    trust_location = value("ssl.truststore.location")
    trust_inline = value("ssl.truststore.certificates")
    try:
        if trust_location:
            _check_pem("truststore", value("ssl.truststore.type") or "JKS", trust_location,
                       _read(trust_location, "ssl.truststore.location"), listener)
            ctx.load_verify_locations(cafile=trust_location)
        elif trust_inline:
            ctx.load_verify_locations(cadata=trust_inline)
        elif client_auth != "none":
            ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    except ssl.SSLError as exc:
        raise ConfigError("ssl.truststore.location" if trust_location else "ssl.truststore.certificates",
                          trust_location or "[hidden]", f"cannot load the CA certificates ({exc.reason or exc})") from None
    return ctx


@contextlib.contextmanager
def _private_pem(text: str):
    """The ``ssl`` module reads key material from files only: inline PEM goes through a
    private file (mode 0600, in a private directory) removed at once. Yields its path."""
    with tempfile.TemporaryDirectory(prefix="chronolog-tls-") as d:
        path = os.path.join(d, "keystore.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        yield path


def _load_inline_chain(ctx: ssl.SSLContext, chain: str, key: str, password) -> None:
    with _private_pem(key.strip() + "\n" + chain.strip() + "\n") as path:
        ctx.load_cert_chain(path, password=password)


def keystore_certificate(value) -> dict:
    """The broker's certificate (the first of the keystore's chain), decoded as
    ``getpeercert()`` gives it. Raises ConfigError."""
    location = value("ssl.keystore.location")
    try:
        if location:
            return ssl._ssl._test_decode_cert(location)
        with _private_pem((value("ssl.keystore.certificate.chain") or "").strip() + "\n") as path:
            return ssl._ssl._test_decode_cert(path)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError("ssl.keystore.location" if location else "ssl.keystore.certificate.chain",
                          location or "[hidden]", f"cannot read the certificate ({exc})") from None


class IncompatibleKeystore(Exception):
    """A replacement keystore whose certificate changes what clients verify."""


def ensure_compatible(old: dict, new: dict, allow_dn_changes: bool, allow_san_changes: bool) -> None:
    """SslFactory.CertificateEntries.ensureCompatible: a replacement keystore keeps the
    certificate's subject DN and subject alternative names. Raises IncompatibleKeystore."""
    if not allow_dn_changes and subject_dn(old) != subject_dn(new):
        raise IncompatibleKeystore("Keystore DistinguishedName does not match: "
                          f"existing={{DN={subject_dn(old)}}}, new={{DN={subject_dn(new)}}} "
                          "(ssl.allow.dn.changes=true allows it)")
    old_san, new_san = set(old.get("subjectAltName", ())), set(new.get("subjectAltName", ()))
    if not allow_san_changes and old_san != new_san:
        def fmt(sans):
            return "[" + ", ".join(f"{k}:{v}" for k, v in sorted(sans)) + "]"
        raise IncompatibleKeystore("Keystore SubjectAltNames do not match: "
                          f"existing={{SAN={fmt(old_san)}}}, new={{SAN={fmt(new_san)}}} "
                          "(ssl.allow.san.changes=true allows it)")


# ---------------------------------------------------------------------- principals

# getpeercert() attribute names -> RFC 2253 keywords (others: OID=#hex, as Java prints them)
_RFC2253_KEYWORDS = {
    "commonName": "CN", "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
    "organizationName": "O", "organizationalUnitName": "OU", "streetAddress": "STREET",
    "domainComponent": "DC", "userId": "UID",
}
_OIDS = {"emailAddress": ("1.2.840.113549.1.9.1", 0x16), "serialNumber": ("2.5.4.5", 0x13),
         "title": ("2.5.4.12", 0x0C), "surname": ("2.5.4.4", 0x0C), "givenName": ("2.5.4.42", 0x0C)}


def _escape(value: str) -> str:
    out = re.sub(r'([,+"\\<>;])', r"\\\1", value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def _der_hex(tag: int, value: str) -> str:
    data = value.encode("utf-8")
    if len(data) < 128:
        length = bytes([len(data)])
    else:
        n = len(data).to_bytes((len(data).bit_length() + 7) // 8, "big")
        length = bytes([0x80 | len(n)]) + n
    return "#" + (bytes([tag]) + length + data).hex()


def subject_dn(peercert: dict) -> str:
    """The subject of ``SSLObject.getpeercert()`` in RFC 2253 form, most specific RDN
    first (``CN=alice,OU=eng,O=Example,C=US``)."""
    rdns = []
    for rdn in reversed(peercert.get("subject", ())):
        parts = []
        for name, value in rdn:
            if name in _RFC2253_KEYWORDS:
                parts.append(f"{_RFC2253_KEYWORDS[name]}={_escape(value)}")
            elif name in _OIDS:
                oid, tag = _OIDS[name]
                parts.append(f"{oid}={_der_hex(tag, value)}")
            else:
                parts.append(f"{name}={_escape(value)}")
        rdns.append("+".join(parts))
    return ",".join(rdns)


_RULE_PATTERN = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE_PATTERN + r")\s*(,\s*|$)")


class NoMatchingRule(Exception):
    pass


class PrincipalMapper:
    """``ssl.principal.mapping.rules`` (Kafka's SslPrincipalMapper): a comma-separated
    list of ``DEFAULT`` (the DN itself) and ``RULE:pattern/replacement/[LU]`` (the
    pattern must match the whole DN; ``$1`` in the replacement is the first group;
    L or U lower- or upper-cases the result). The first rule that applies wins; no
    rule applying fails the authentication."""

    def __init__(self, rules: str | None) -> None:
        self.text = rules if rules is not None else "DEFAULT"
        self.rules: list = []
        for m in _RULE_SPLITTER.finditer(self.text.strip()):
            rule = m.group(1)
            pm = re.match(_RULE_PATTERN, rule)
            if pm is None or pm.end() != len(rule):
                raise ConfigError("ssl.principal.mapping.rules", self.text, f"Invalid rule: {rule}")
            if pm.group(1):
                self.rules.append(None)
            elif pm.group(2) is not None:
                try:
                    pattern = re.compile(pm.group(2))
                except re.error as exc:
                    raise ConfigError("ssl.principal.mapping.rules", self.text,
                                      f"Invalid rule pattern {pm.group(2)}: {exc}") from None
                repl = re.sub(r"\$(\d+)", lambda g: _backref(g.group(1), pattern.groups), pm.group(3))
                self.rules.append((pattern, repl, pm.group(4)))
            if m.end() >= len(self.text.strip()):
                break

    def name(self, dn: str) -> str:
        for rule in self.rules:
            if rule is None:
                return dn
            pattern, repl, case = rule
            m = pattern.fullmatch(dn)
            if m is None:
                continue
            out = m.expand(repl)
            return out.lower() if case == "L" else out.upper() if case == "U" else out
        raise NoMatchingRule(f"No rules apply to {dn}, rules {self.text}")


def _backref(num: str, groups: int) -> str:
    """Java's replacement ``$n`` (Kafka keeps an invalid one literal)."""
    if num.startswith("0"):
        return "$" + num
    n = int(num)
    while n > groups and n >= 10:
        n //= 10
        num = num[:-1]
    if n > groups:
        return "$" + num
    return f"\\g<{n}>" + num[len(str(n)):]
