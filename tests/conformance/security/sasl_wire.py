"""SASL on a raw socket (SaslHandshake v1, SaslAuthenticate v1), for what kafka-python hides:
the error code and message of a refused login (kafka-python only times out bootstrapping) and
the broker's answer to a mechanism no client library would ask for."""
import os
import socket
import struct
import sys

from kafka.net.sasl.scram import ScramClient

# The main suite's raw-protocol helpers (STRING encoding, the field reader).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import wire  # noqa: E402

_string = wire.string

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
METADATA = 3

NONE = 0
SASL_AUTHENTICATION_FAILED = 58
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34


def _bytes(b):
    return struct.pack(">i", len(b)) + b


class _Reader(wire.Reader):
    def nullable_string(self):
        n = self.take(">h")
        if n < 0:
            return None
        s = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def nullable_bytes(self):
        n = self.take(">i")
        if n < 0:
            return None
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b


class Closed(Exception):
    """The broker closed the connection instead of answering."""


class Conn:
    """One connection; request() sends a request with header v1 and returns the body of the
    response (after the correlation id)."""

    def __init__(self, address, timeout=10.0):
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.correlation = 0

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _recv(self, n):
        data = b""
        while len(data) < n:
            try:
                chunk = self.sock.recv(n - len(data))
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                raise Closed("the broker closed the connection")
            data += chunk
        return data

    def request(self, api_key, version, body):
        self.correlation += 1
        head = struct.pack(">hhi", api_key, version, self.correlation) + _string("sasl-wire")
        msg = head + body
        self.sock.sendall(struct.pack(">i", len(msg)) + msg)
        size = struct.unpack(">i", self._recv(4))[0]
        data = self._recv(size)
        corr = struct.unpack_from(">i", data)[0]
        assert corr == self.correlation, "correlation id %d, expected %d" % (corr, self.correlation)
        return data[4:]

    def handshake(self, mechanism):
        """SaslHandshake v1: (error code, enabled mechanisms)."""
        r = _Reader(self.request(SASL_HANDSHAKE, 1, _string(mechanism)))
        error = r.take(">h")
        mechanisms = [r.nullable_string() for _ in range(r.take(">i"))]
        return error, mechanisms

    def authenticate(self, token):
        """SaslAuthenticate v1: (error code, error message, auth bytes, session lifetime ms)."""
        r = _Reader(self.request(SASL_AUTHENTICATE, 1, _bytes(token)))
        return r.take(">h"), r.nullable_string(), r.nullable_bytes(), r.take(">q")

    def metadata_v1_all(self):
        """Metadata v1 for all topics (a null topic array); returns the raw body."""
        return self.request(METADATA, 1, struct.pack(">i", -1))


def plain_login(address, user, password):
    """SASL/PLAIN: (handshake error, authenticate error, error message)."""
    with Conn(address) as c:
        herr, _ = c.handshake("PLAIN")
        if herr != NONE:
            return herr, None, None
        token = b"\0" + user.encode() + b"\0" + password.encode()
        err, msg, _, _ = c.authenticate(token)
        return herr, err, msg


def scram_login(address, user, password, mechanism="SCRAM-SHA-512"):
    """SCRAM (RFC 5802 via kafka-python's ScramClient): (handshake error, error code of the step
    that failed or NONE, its error message)."""
    with Conn(address) as c:
        herr, _ = c.handshake(mechanism)
        if herr != NONE:
            return herr, None, None
        client = ScramClient(user, password, mechanism)
        err, msg, server_first, _ = c.authenticate(client.first_message())
        if err != NONE:
            return herr, err, msg
        client.process_server_first_message(server_first)
        err, msg, server_final, _ = c.authenticate(client.final_message())
        if err == NONE:
            client.process_server_final_message(server_final)
        return herr, err, msg
