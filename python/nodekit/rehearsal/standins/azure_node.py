"""Fakes of the Azure services a cluster node talks to: the instance metadata service (IMDS) and
Key Vault, with their real wire formats. Neither can exist on this machine.

**IMDS** (plain HTTP, ``http://169.254.169.254`` on Azure; every request needs the header
``Metadata: true``, else 400 ``{"error": "bad_request", ...}``):

* ``GET /metadata/identity/oauth2/token?api-version=2018-02-01&resource=R&client_id=C`` →
  ``{"access_token", "client_id", "expires_in", "expires_on", "ext_expires_in", "not_before",
  "resource", "token_type": "Bearer"}``; an unknown ``client_id`` gets 400
  ``{"error": "invalid_request", "error_description": "Identity not found"}``, as on a VM whose
  user-assigned identity is not attached (yet).
* ``GET /metadata/instance?api-version=2021-02-01`` → ``{"compute": {...}, "network": {...}}``;
  ``GET /metadata/instance/compute/name?api-version=...&format=text`` → the name as text.
* ``GET /metadata/scheduledevents?api-version=2020-07-01`` → ``{"DocumentIncarnation": N,
  "Events": [{"EventId", "EventStatus", "EventType", "ResourceType", "Resources", "NotBefore",
  "Description", "EventSource", "DurationInSeconds"}]}`` (the events a test writes to the state
  folder); ``POST`` with ``{"StartRequests": [{"EventId": ...}]}`` acknowledges: the request is
  logged and the event leaves the document, as Azure then proceeds.

**Key Vault** (HTTPS, ``https://NAME.vault.azure.net``): ``GET /secrets/{name}[/{version}]
?api-version=7.4`` with ``Authorization: Bearer <a token this IMDS issued for
resource=https://vault.azure.net>`` → ``{"value", "id", "attributes": {...}, "tags": {}}``.
Without a token: 401 with Key Vault's ``WWW-Authenticate: Bearer authorization=...,
resource=...`` challenge; a token for another resource or an identity without a role on the
vault: 403 ``{"error": {"code": "Forbidden", "message": ..., "innererror": {"code":
"ForbiddenByRbac"}}}``; no such secret: 404 ``SecretNotFound``; no ``api-version``: 400
``BadParameter``.

Tokens are HMAC-signed by a key both fakes read from their state folders, so the vault accepts
exactly what the IMDS issued. Their claims are those of Entra ID's v1 access tokens (``aud`` is
the resource asked for, ``iss`` ``https://sts.windows.net/<tenant>/``, ``iat``/``nbf``/``exp``),
which is what Azurite, the rehearsal's Blob storage, checks with ``--oauth basic`` for a token
asked for :data:`STORAGE_RESOURCE` (with or without the trailing slash): the issuer's prefix,
the audience (``https://storage.azure.com[/]``), ``nbf <= now <= exp``, and ``iat`` present (it
checks no signature; Azurite's src/blob/authentication/BlobTokenAuthenticator.ts).

Each server keeps its state in a folder a test (or the rehearsal cluster) reads and writes:
``config.json``, ``events.json``, ``faults.json`` (make a path, or ``"POST /path"``, answer
with a status, a non-JSON body or a delay), and ``requests.jsonl``/``acks.jsonl`` (what
arrived).

Run one as a process (the rehearsal cluster starts an IMDS inside each node's network namespace
and one Key Vault on its bridge)::

    python -m nodekit.rehearsal.standins.azure_node imds --bind 169.254.169.254 --port 80 \
        --state DIR
    python -m nodekit.rehearsal.standins.azure_node keyvault --bind IP --port 8471 --state DIR \
        --cert C --key K

or in-process from a test with :class:`FakeImds` / :class:`FakeKeyVault`.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import hmac
import json
import signal
import ssl
import sys
import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

VAULT_RESOURCE = "https://vault.azure.net"
STORAGE_RESOURCE = "https://storage.azure.com/"
"""Blob storage's resource, as azure-identity asks for it (``https://storage.azure.com``, from
the scope ``https://storage.azure.com/.default``) or as written here; either is a token Azurite
accepts."""
TENANT = "fake-tenant"
TOKEN_LIFETIME_S = 24 * 3600


# -- the shared token format -------------------------------------------------------------------
def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def issue_token(
    key: bytes,
    client_id: str,
    principal_id: str,
    resource: str,
    issued_at: float | None = None,
    lifetime_s: int = TOKEN_LIFETIME_S,
) -> str:
    """A JWT-shaped token (header.claims.signature), HMAC-SHA256 signed with ``key``, valid
    from ``issued_at`` (now) for ``lifetime_s``."""
    now = int(time.time() if issued_at is None else issued_at)
    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    claims = _b64(
        json.dumps(
            {
                "aud": resource,
                "appid": client_id,
                "oid": principal_id,
                "sub": principal_id,
                "tid": TENANT,
                "iat": now,
                "nbf": now,
                "exp": now + lifetime_s,
                "iss": f"https://sts.windows.net/{TENANT}/",
                "ver": "1.0",
            }
        ).encode()
    )
    signature = _b64(hmac.new(key, f"{header}.{claims}".encode(), hashlib.sha256).digest())
    return f"{header}.{claims}.{signature}"


def verify_token(key: bytes, token: str) -> dict[str, Any] | None:
    """The token's claims if ``key`` signed it and it has not expired, else None."""
    try:
        header, claims, signature = token.split(".")
        expected = _b64(hmac.new(key, f"{header}.{claims}".encode(), hashlib.sha256).digest())
        if not hmac.compare_digest(signature, expected):
            return None
        data = json.loads(_unb64(claims))
    except (ValueError, TypeError):
        return None
    if not isinstance(data, dict) or data.get("exp", 0) < time.time():
        return None
    return data


# -- a small JSON-over-HTTP server with a state folder -----------------------------------------
class StateFolder:
    """Files a test writes (config, events, faults) and reads (requests, acks)."""

    def __init__(self, folder: Path) -> None:
        self.path = Path(folder)
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def read(self, name: str, default: Any) -> Any:
        try:
            return json.loads((self.path / name).read_text())
        except (OSError, ValueError):
            return default

    def write(self, name: str, data: Any) -> None:
        tmp = self.path / f".{name}.tmp"
        tmp.write_text(json.dumps(data, indent=2))
        tmp.replace(self.path / name)

    def append(self, name: str, record: dict[str, Any]) -> None:
        with self._lock, open(self.path / name, "a") as f:
            f.write(json.dumps(record) + "\n")

    def lines(self, name: str) -> list[dict[str, Any]]:
        try:
            text = (self.path / name).read_text()
        except OSError:
            return []
        return [json.loads(line) for line in text.splitlines() if line.strip()]


Reply = tuple[int, Any, dict[str, str]]
"""(status, body: dict/list → JSON, str → text, bytes → as is; extra headers)."""


_S = TypeVar("_S", bound="_Server")


class _Server:
    """A threading HTTP(S) server whose requests go to ``self.route``."""

    def __init__(self, bind: str, port: int, state: StateFolder, tls: tuple[Path, Path] | None):
        self.state = state
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                server._serve(self, "GET")

            def do_POST(self) -> None:
                server._serve(self, "POST")

            def do_PUT(self) -> None:
                server._serve(self, "PUT")

            def do_PATCH(self) -> None:
                server._serve(self, "PATCH")

            def do_DELETE(self) -> None:
                server._serve(self, "DELETE")

        self.httpd = ThreadingHTTPServer((bind, port), Handler)
        self.httpd.daemon_threads = True
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.host = bind
        self.port = int(self.httpd.server_address[1])
        self._thread: threading.Thread | None = None

    def route(
        self, method: str, path: str, query: dict[str, str], headers: Any, body: bytes
    ) -> Reply:
        raise NotImplementedError

    def _serve(self, h: BaseHTTPRequestHandler, method: str) -> None:
        url = urlsplit(h.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        self.state.append(
            "requests.jsonl",
            {
                "time": time.time(),
                "method": method,
                "path": url.path,
                "query": query,
                "client": h.client_address[0],
                "authorization": bool(h.headers.get("Authorization")),
            },
        )
        faults = self.state.read("faults.json", {})
        fault = faults.get(f"{method} {url.path}", faults.get(url.path))
        if isinstance(fault, dict):
            time.sleep(float(fault.get("delay", 0)))
            if "status" in fault or "body" in fault:
                self._send(h, int(fault.get("status", 200)), fault.get("body", ""), {})
                return
        try:
            status, payload, headers = self.route(method, url.path, query, h.headers, body)
        except Exception as e:  # a bug in the fake: say so, like a 500 would
            status, payload, headers = 500, {"error": f"fake server error: {e}"}, {}
        self._send(h, status, payload, headers)

    @staticmethod
    def _send(
        h: BaseHTTPRequestHandler, status: int, payload: Any, headers: dict[str, str]
    ) -> None:
        if isinstance(payload, bytes):
            data, ctype = payload, "application/octet-stream"
        elif isinstance(payload, str):
            data, ctype = payload.encode(), "text/plain; charset=utf-8"
        else:
            data, ctype = json.dumps(payload).encode(), "application/json; charset=utf-8"
        with contextlib.suppress(OSError):
            h.send_response(status)
            h.send_header("Content-Type", ctype)
            h.send_header("Content-Length", str(len(data)))
            for k, v in headers.items():
                h.send_header(k, v)
            h.end_headers()
            h.wfile.write(data)

    def start(self: _S) -> _S:
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread:
            self._thread.join(timeout=5)


# -- IMDS ----------------------------------------------------------------------------------------
class FakeImds(_Server):
    """One VM's instance metadata service.

    ``config.json``: ``{"token_key": hex, "compute": {name, vmId, vmScaleSetName, resourceId,
    location, ...}, "identities": {client_id: principal_id}}``. ``events.json``: the list of
    scheduled events (``EventId``, ``EventType``, ``Resources``, ``NotBefore``, ...).
    """

    def __init__(self, state: Path | StateFolder, bind: str = "127.0.0.1", port: int = 0) -> None:
        folder = state if isinstance(state, StateFolder) else StateFolder(state)
        super().__init__(bind, port, folder, None)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def route(
        self, method: str, path: str, query: dict[str, str], headers: Any, body: bytes
    ) -> Reply:
        if headers.get("Metadata", "").lower() != "true":
            return (
                400,
                {
                    "error": "bad_request",
                    "error_description": "Required metadata header not specified",
                },
                {},
            )
        if "api-version" not in query:
            return 400, {"error": "Bad request. api-version was not specified in the request"}, {}
        config = self.state.read("config.json", {})
        if path == "/metadata/identity/oauth2/token" and method == "GET":
            return self._token(config, query)
        if path == "/metadata/scheduledevents":
            return self._scheduled_events(method, body)
        if path.startswith("/metadata/instance") and method == "GET":
            return self._instance(config, path, query)
        return 404, {"error": "Not found"}, {}

    def _token(self, config: dict[str, Any], query: dict[str, str]) -> Reply:
        identities: dict[str, str] = config.get("identities", {})
        client_id = query.get("client_id") or (
            next(iter(identities)) if len(identities) == 1 else ""
        )
        resource = query.get("resource", "")
        if not resource:
            return (
                400,
                {
                    "error": "invalid_request",
                    "error_description": "Required query variable 'resource' is missing",
                },
                {},
            )
        if client_id not in identities:
            return 400, {"error": "invalid_request", "error_description": "Identity not found"}, {}
        key = bytes.fromhex(config["token_key"])
        now = int(time.time())
        return (
            200,
            {
                "access_token": issue_token(key, client_id, identities[client_id], resource),
                "client_id": client_id,
                "expires_in": str(TOKEN_LIFETIME_S),
                "expires_on": str(now + TOKEN_LIFETIME_S),
                "ext_expires_in": str(TOKEN_LIFETIME_S),
                "not_before": str(now),
                "resource": resource,
                "token_type": "Bearer",
            },
            {},
        )

    def _instance(self, config: dict[str, Any], path: str, query: dict[str, str]) -> Reply:
        doc: Any = {"compute": config.get("compute", {}), "network": config.get("network", {})}
        for part in path.removeprefix("/metadata/instance").strip("/").split("/"):
            if not part:
                continue
            if not isinstance(doc, dict) or part not in doc:
                return 404, {"error": "Not found"}, {}
            doc = doc[part]
        if query.get("format") == "text":
            return 200, doc if isinstance(doc, str) else json.dumps(doc), {}
        return 200, doc, {}

    def _scheduled_events(self, method: str, body: bytes) -> Reply:
        events: list[dict[str, Any]] = self.state.read("events.json", [])
        incarnation = int(self.state.read("incarnation.json", 1))
        if method == "GET":
            return 200, {"DocumentIncarnation": incarnation, "Events": events}, {}
        try:
            request = json.loads(body)
            ids = [r["EventId"] for r in request["StartRequests"]]
        except (ValueError, KeyError, TypeError):
            return 400, {"error": 'Bad request: expected {"StartRequests": [{"EventId": ...}]}'}, {}
        known = {e.get("EventId") for e in events}
        for event_id in ids:
            self.state.append(
                "acks.jsonl", {"time": time.time(), "EventId": event_id, "known": event_id in known}
            )
        remaining = [e for e in events if e.get("EventId") not in ids]
        if len(remaining) != len(events):
            self.state.write("events.json", remaining)
            self.state.write("incarnation.json", incarnation + 1)
        return 200, "", {}

    # -- what a test does ----------------------------------------------------------------------
    def schedule(self, event_type: str, resources: list[str], not_before_s: float = 300) -> str:
        """Add an event (as Azure would), return its EventId."""
        event_id = str(uuid.uuid4()).upper()
        events = self.state.read("events.json", [])
        events.append(scheduled_event(event_id, event_type, resources, not_before_s))
        self.state.write("events.json", events)
        self.state.write("incarnation.json", int(self.state.read("incarnation.json", 1)) + 1)
        return event_id

    def acks(self) -> list[dict[str, Any]]:
        return self.state.lines("acks.jsonl")


def scheduled_event(
    event_id: str, event_type: str, resources: list[str], not_before_s: float
) -> dict[str, Any]:
    not_before = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + not_before_s))
    return {
        "EventId": event_id,
        "EventStatus": "Scheduled",
        "EventType": event_type,
        "ResourceType": "VirtualMachine",
        "Resources": resources,
        "NotBefore": not_before,
        "Description": f"{event_type} requested by the platform",
        "EventSource": "Platform",
        "DurationInSeconds": -1,
    }


def laptop_env(imds_url: str, client_id: str, ca: Path) -> dict[str, str]:
    """The environment in which azure-identity's DefaultAzureCredential, as a laptop's driver
    uses it, gets its tokens from the fake metadata service at ``imds_url`` (its own variables;
    the product code sets none of them) and trusts the rehearsal's CA ``ca``."""
    return {
        # checkov:skip=CKV_SECRET_6:The name of azure-identity's credential, not a secret
        "AZURE_TOKEN_CREDENTIALS": "ManagedIdentityCredential",
        "AZURE_POD_IDENTITY_AUTHORITY_HOST": imds_url,
        "AZURE_CLIENT_ID": client_id,
        "REQUESTS_CA_BUNDLE": str(ca),
    }


def imds_config(
    token_key: bytes,
    name: str,
    identities: dict[str, str],
    scale_set: str = "",
    resource_id: str = "",
) -> dict[str, Any]:
    """A ``config.json`` for :class:`FakeImds`: the VM's compute metadata and its identities."""
    return {
        "token_key": token_key.hex(),
        "identities": identities,
        "compute": {
            "name": name,
            "vmId": str(uuid.uuid5(uuid.NAMESPACE_DNS, name)),
            "vmScaleSetName": scale_set,
            "resourceId": resource_id,
            "location": "westeurope",
            "osType": "Linux",
        },
    }


# -- Key Vault -------------------------------------------------------------------------------
class FakeKeyVault(_Server):
    """One vault over HTTPS. ``config.json``: ``{"token_key": hex, "readers": [client_id, ...],
    "secrets": {name: value}}``: an identity in ``readers`` has "Key Vault Secrets User"."""

    def __init__(
        self,
        state: Path | StateFolder,
        cert: Path,
        key: Path,
        bind: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        folder = state if isinstance(state, StateFolder) else StateFolder(state)
        super().__init__(bind, port, folder, (cert, key))

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}/"

    def route(
        self, method: str, path: str, query: dict[str, str], headers: Any, body: bytes
    ) -> Reply:
        if "api-version" not in query:
            return (
                400,
                {
                    "error": {
                        "code": "BadParameter",
                        "message": "The 'api-version' query parameter is missing.",
                    }
                },
                {},
            )
        config = self.state.read("config.json", {})
        auth = headers.get("Authorization", "")
        if not auth.startswith("Bearer "):
            challenge = (
                f'Bearer authorization="https://login.microsoftonline.com/{TENANT}", '
                f'resource="{VAULT_RESOURCE}"'
            )
            return (
                401,
                {
                    "error": {
                        "code": "Unauthorized",
                        "message": "AKV10000: Request is missing a Bearer or PoP token.",
                    }
                },
                {"WWW-Authenticate": challenge},
            )
        claims = verify_token(
            bytes.fromhex(config["token_key"]), auth.removeprefix("Bearer ").strip()
        )
        if claims is None or claims.get("aud") != VAULT_RESOURCE:
            return (
                401,
                {
                    "error": {
                        "code": "Unauthorized",
                        "message": "AKV10022: Invalid audience or token.",
                    }
                },
                {},
            )
        parts = path.strip("/").split("/")
        if method != "GET" or len(parts) not in (2, 3) or parts[0] != "secrets":
            return (
                404,
                {"error": {"code": "NotFound", "message": f"{method} {path} is not served here"}},
                {},
            )
        if claims.get("appid") not in config.get("readers", []):
            return (
                403,
                {
                    "error": {
                        "code": "Forbidden",
                        "message": "Caller is not authorized to perform action on resource. "
                        f"Caller: appid={claims.get('appid')}; "
                        "Action: 'Microsoft.KeyVault/vaults/secrets/getSecret/action'",
                        "innererror": {"code": "ForbiddenByRbac"},
                    }
                },
                {},
            )
        name = parts[1]
        secrets = config.get("secrets", {})
        if name not in secrets:
            return (
                404,
                {
                    "error": {
                        "code": "SecretNotFound",
                        "message": f"A secret with (name/id) {name} was not found in this "
                        "key vault.",
                    }
                },
                {},
            )
        version = (
            parts[2] if len(parts) == 3 else hashlib.sha1(secrets[name].encode()).hexdigest()[:32]
        )
        now = int(time.time())
        return (
            200,
            {
                "value": secrets[name],
                "id": f"{self.url}secrets/{name}/{version}",
                "attributes": {
                    "enabled": True,
                    "created": now,
                    "updated": now,
                    "recoveryLevel": "Recoverable",
                    "recoverableDays": 7,
                },
                "tags": {},
            },
            {},
        )


def vault_config(token_key: bytes, readers: list[str], secrets: dict[str, str]) -> dict[str, Any]:
    return {"token_key": token_key.hex(), "readers": readers, "secrets": secrets}


def tls_certificate(folder: Path, ip: str) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for ``ip`` signed by it: (ca.crt, server.crt, server.key).

    A node trusts the CA the way a VM trusts the public CA behind vault.azure.net.
    """
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Fake Azure Test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"vault.{ip}")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(ip))]), critical=False
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    folder.mkdir(parents=True, exist_ok=True)
    ca_path, cert_path, key_path = folder / "ca.crt", folder / "server.crt", folder / "server.key"
    ca_path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o600)
    return ca_path, cert_path, key_path


# -- command line ----------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    sub = p.add_subparsers(dest="service", required=True)
    for name in ("imds", "keyvault"):
        s = sub.add_parser(name)
        s.add_argument("--bind", required=True)
        s.add_argument("--port", type=int, required=True)
        s.add_argument("--state", type=Path, required=True)
        if name == "keyvault":
            s.add_argument("--cert", type=Path, required=True)
            s.add_argument("--key", type=Path, required=True)
    args = p.parse_args(argv)
    server: _Server
    if args.service == "imds":
        server = FakeImds(args.state, args.bind, args.port)
    else:
        server = FakeKeyVault(args.state, args.cert, args.key, args.bind, args.port)
    stop: Callable[..., None] = lambda *_: threading.Thread(target=server.httpd.shutdown).start()  # noqa: E731
    signal.signal(signal.SIGTERM, stop)
    print(f"serving {args.service} on {args.bind}:{server.port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
