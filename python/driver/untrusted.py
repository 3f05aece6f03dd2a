"""Reading what comes back from outside: the results store, the Retail Prices API, Azure Resource
Manager. None of it is trusted more than a job's output, and every reader goes through here.

* :func:`fetch`: one HTTP(S) answer, with a bound on the time for the *whole* answer (a watchdog
  shuts the socket down when it is spent, so a server that trickles a byte now and then cannot
  hold the driver: a socket timeout is only per read), on its size, and on where it may lead
  (``http``/``https`` only, no redirects: ``file://`` or ``ftp://`` is never opened).
* :func:`loads`: JSON nested no deeper than :data:`MAX_DEPTH` (Python's parser recurses: a
  document nested 100,000 deep is a ``RecursionError``, and a shallower one breaks whatever code
  walks it next).
* :func:`same_origin`: a link a server hands back (``NextPageLink``) is followed only on the
  scheme and host the driver started from.
* :func:`retry_after` and :func:`retry_policy`: a ``Retry-After`` is a number of seconds, capped;
  anything else (``soon``, a date, ``NaN``, ``1e400``) is the default. azure-core honours the
  header itself (uncapped, and a value that is not a number or an HTTP date raises), so the SDK
  clients the driver builds get :func:`retry_policy`, and the credentials (whose pipelines take
  no retry policy from outside) :func:`credential`'s transport, whose every wait is capped.
* :func:`within`: a client library's call (an Azure SDK request: its timeouts bound each socket
  read, never a whole answer) given a bound on its whole time.
* What an answer holds is read inside :func:`driver.errors.shaped`: another shape than Azure's
  (a list where an object belongs) is one line, never a traceback.
* :func:`redact_url`: a URL as it may be shown (no user info, no query: a SAS token lives there).
* :func:`terminal_safe` / :func:`shown`: text without the control sequences that could take over
  a terminal; what a job prints and what the store or Azure says go through the same filter.

Each failure is an :class:`Unreadable` with a one-line reason; callers put it into their own
one-line error.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any, cast

MAX_DEPTH = 64
"""JSON nesting the driver reads (a price page is 3 deep, latest.json 2, ARM's answers ~10)."""
MAX_RETRY_AFTER_S = 30.0
"""The longest a server's Retry-After makes the driver wait before it asks again."""
MIN_RETRY_AFTER_S = 0.5


class Unreadable(ValueError):
    """An answer the driver will not read: its one-line reason."""


class TooDeep(Unreadable):
    """JSON nested deeper than the driver reads."""


# -- JSON ------------------------------------------------------------------------------------
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = bytes(c for c in range(256) if c not in b"[]{}")


def depth(data: bytes) -> int:
    """How deep the JSON text ``data`` nests (strings' contents do not count); checked without
    recursion, in C for all but the brackets."""
    brackets = _STRING.sub(b"", data).translate(None, _NOT_BRACKET)
    deepest = level = 0
    for c in brackets:
        level += 1 if c in b"[{" else -1
        if level > deepest:
            deepest = level
            if deepest > MAX_DEPTH:  # no need to look further
                break
    return deepest


def loads(data: bytes | str, max_depth: int = MAX_DEPTH) -> Any:
    """JSON, refused (:class:`Unreadable`) when it is not JSON or nests deeper than
    ``max_depth``."""
    raw = data.encode() if isinstance(data, str) else bytes(data)
    if depth(raw) > max_depth:
        raise TooDeep(f"JSON nested deeper than {max_depth} levels")
    try:
        return json.loads(raw)
    except RecursionError:  # not reached after the check; kept as the last guard
        raise TooDeep(f"JSON nested deeper than {max_depth} levels") from None
    except ValueError as e:
        raise Unreadable(f"not JSON ({one_line(e, 80)})") from None


# -- HTTP ------------------------------------------------------------------------------------
class _Watchdog:
    """Shuts down the socket it was last shown when ``seconds`` have passed: a read blocked on
    it returns at once (a socket timeout bounds one read only, never a whole answer)."""

    def __init__(self, seconds: float) -> None:
        self.expired = threading.Event()
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(seconds, 0.0), self._cut)
        self._timer.daemon = True

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sock = sock
            if self.expired.is_set():
                self._shutdown()

    def _cut(self) -> None:
        with self._lock:
            self.expired.set()
            self._shutdown()

    def _shutdown(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                # The socket's own shutdown, also for an SSL socket (whose shutdown() would drop
                # its SSL state under the reading thread's feet).
                socket.socket.shutdown(self._sock, socket.SHUT_RDWR)

    def __enter__(self) -> _Watchdog:
        self._timer.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._timer.cancel()


def _opener(dog: _Watchdog) -> Any:
    """urllib with only what the driver asks for: HTTP and HTTPS (through a proxy from the
    environment, as urlopen does), every socket shown to ``dog``, redirects not followed."""
    import http.client
    import urllib.request

    class HTTP(http.client.HTTPConnection):
        def connect(self) -> None:
            super().connect()
            dog.watch(self.sock)

    class HTTPS(http.client.HTTPSConnection):
        def connect(self) -> None:
            # HTTPSConnection.connect, with the handshake watched too (a server can trickle it).
            http.client.HTTPConnection.connect(self)
            dog.watch(self.sock)
            host = getattr(self, "_tunnel_host", None) or self.host
            context = getattr(self, "_context", None)
            if context is None:
                import ssl

                context = ssl.create_default_context()
            tls = context.wrap_socket(
                self.sock, server_hostname=host, do_handshake_on_connect=False
            )
            self.sock = tls
            dog.watch(tls)
            tls.do_handshake()

    class HTTPHandler(urllib.request.HTTPHandler):
        def http_open(self, req: Any) -> Any:
            return self.do_open(HTTP, req)

    class HTTPSHandler(urllib.request.HTTPSHandler):
        def https_open(self, req: Any) -> Any:
            return self.do_open(HTTPS, req)

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None  # the 3xx is the answer: an error

    opener = urllib.request.OpenerDirector()
    for handler in (
        urllib.request.ProxyHandler(),
        HTTPHandler(),
        HTTPSHandler(),
        NoRedirect(),
        urllib.request.HTTPDefaultErrorHandler(),
        urllib.request.HTTPErrorProcessor(),
    ):
        opener.add_handler(handler)
    return opener


def fetch(
    url: str,
    timeout: float,
    limit: int,
    headers: dict[str, str] | None = None,
    read_timeout: float | None = None,
) -> bytes:
    """The body of ``GET url`` (HTTP 200 only), read whole within ``timeout`` seconds from the
    start of the connection (each socket read within ``read_timeout``, by default ``timeout``)
    and at most ``limit`` bytes long; else :class:`Unreadable` with one line."""
    import http.client
    import urllib.error
    import urllib.request

    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Unreadable(f"not an http(s) URL: {redact_url(url)}")
    if parts.username is not None or parts.password is not None:
        raise Unreadable(f"a URL with user info is not followed: {redact_url(url)}")
    request = urllib.request.Request(url, headers=headers or {})
    started = time.monotonic()
    with _Watchdog(timeout) as dog:
        try:
            per_read = min(read_timeout or timeout, timeout)
            with _opener(dog).open(request, timeout=per_read) as response:
                length = response.headers.get("Content-Length")
                if length and length.isdigit() and int(length) > limit:
                    raise Unreadable(f"an answer of {int(length)} bytes, more than {limit}")
                body = bytearray()
                while chunk := response.read1(65536):
                    body += chunk
                    if len(body) > limit:
                        raise Unreadable(f"an answer longer than {limit} bytes: stopped reading")
                    if dog.expired.is_set():
                        break
                if (
                    not dog.expired.is_set()
                    and length
                    and length.isdigit()
                    and len(body) < int(length)
                ):
                    raise Unreadable("a broken HTTP answer: IncompleteRead")
        except Unreadable:
            raise
        except urllib.error.HTTPError as e:
            raise Unreadable(f"HTTP {e.code} {shown(str(e.reason), 80)}") from None
        except urllib.error.URLError as e:
            if _spent(dog, started, timeout):
                raise _late(timeout) from None
            raise Unreadable(one_line(e.reason, 120)) from None
        except (OSError, ValueError, http.client.HTTPException) as e:
            if _spent(dog, started, timeout):
                raise _late(timeout) from None
            if isinstance(e, http.client.HTTPException) and not isinstance(e, OSError):
                raise Unreadable(f"a broken HTTP answer: {type(e).__name__}") from None
            raise Unreadable(one_line(e, 120) or type(e).__name__) from None
        if _spent(dog, started, timeout):
            raise _late(timeout)
    return bytes(body)


def _spent(dog: _Watchdog, started: float, timeout: float) -> bool:
    """Whether the time for the whole answer is over: the watchdog has cut the socket, or (on a
    loaded machine its timer thread may run late) a socket read timed out at the same bound."""
    return dog.expired.is_set() or time.monotonic() - started >= timeout


def _late(timeout: float) -> Unreadable:
    return Unreadable(f"no whole answer within {timeout:g} s")


def same_origin(base: str, link: str) -> bool:
    """Whether ``link`` has ``base``'s scheme, host and port (and no user info)."""
    a, b = urllib.parse.urlsplit(base), urllib.parse.urlsplit(link)
    try:
        ports = a.port == b.port
    except ValueError:  # a port that is not a number
        return False
    return (
        b.scheme.lower() == a.scheme.lower()
        and (b.hostname or "") == (a.hostname or "")
        and ports
        and b.username is None
        and b.password is None
    )


# -- Retry-After ---------------------------------------------------------------------------
def retry_after(
    value: str | None,
    default: float,
    low: float = MIN_RETRY_AFTER_S,
    high: float = MAX_RETRY_AFTER_S,
) -> float:
    """A ``Retry-After`` header's seconds, within ``[low, high]``; ``default`` when it is absent
    or not a finite number (an HTTP date is taken as absent: a server's clock is not ours)."""
    try:
        seconds = float((value or "").strip())
    except ValueError:
        return default
    if not math.isfinite(seconds):
        return default
    return min(max(seconds, low), high)


class _WallClock:
    """What azure-core's retry policy asks of a transport to wait: time.sleep, capped."""

    @staticmethod
    def sleep(duration: float) -> None:
        time.sleep(min(max(float(duration), 0.0), MAX_RETRY_AFTER_S))


def retry_policy(**settings: Any) -> Any:
    """azure-core's RetryPolicy (``settings`` as it takes them), whose ``Retry-After`` (and
    ``retry-after-ms``) is validated and capped at :data:`MAX_RETRY_AFTER_S`; a value that is not
    a number falls back to the exponential back-off, itself capped the same."""
    from azure.core.pipeline.policies import RetryPolicy

    class CappedRetryPolicy(RetryPolicy):
        def get_retry_after(self, response: Any) -> float | None:
            headers = {k.lower(): v for k, v in response.http_response.headers.items()}
            if headers.get("retry-after"):
                seconds = retry_after(headers["retry-after"], -1.0, 0.0, MAX_RETRY_AFTER_S)
            else:
                ms = headers.get("retry-after-ms") or headers.get("x-ms-retry-after-ms")
                seconds = retry_after(ms, -1.0, 0.0, MAX_RETRY_AFTER_S * 1000) / 1000
            return None if seconds < 0 else seconds

        def sleep(self, settings: Any, transport: Any, response: Any = None) -> None:
            # A retry waits on the wall clock, capped, whatever the transport's own sleep does
            # (that one paces a long-running operation's polls: see transport()).
            # _WallClock is all of a transport the policy's sleep uses (its .sleep).
            super().sleep(settings, cast(Any, _WallClock()), response)

    settings.setdefault("retry_total", 3)
    settings.setdefault("retry_backoff_factor", 1.0)
    settings.setdefault("retry_backoff_max", MAX_RETRY_AFTER_S)
    return CappedRetryPolicy(**settings)


def credential(**settings: Any) -> Any:
    """azure-identity's DefaultAzureCredential (``settings`` as it takes them), whose token
    requests wait at most :data:`MAX_RETRY_AFTER_S` between tries, whatever ``Retry-After`` the
    token service sends (azure-identity builds its own retry policies, so the cap is in the
    transport every try goes through)."""
    from azure.core.pipeline.transport import RequestsTransport
    from azure.identity import DefaultAzureCredential

    class CappedWaits(RequestsTransport):
        def sleep(self, duration: float) -> None:
            time.sleep(min(max(float(duration), 0.0), MAX_RETRY_AFTER_S))

    return DefaultAzureCredential(transport=CappedWaits(), **settings)


def transport(max_bytes: int, sleep: Any = time.sleep) -> Any:
    """azure-core's requests transport for a typed Azure client: an answer's body is read to at
    most ``max_bytes`` and JSON in it nested at most :data:`MAX_DEPTH` deep (else
    :class:`Unreadable`, before the SDK parses it), and its waits (a long-running operation's
    polls after ``Retry-After``, which azure-core takes uncapped) go through ``sleep`` and last
    at most :data:`MAX_RETRY_AFTER_S`."""
    import requests
    from azure.core.pipeline.transport import RequestsTransport

    def bounded(response: requests.Response, *args: Any, **kwargs: Any) -> requests.Response:
        # requests calls its response hooks before it reads the body: the body is then read
        # through this stream.
        response.raw = _BoundedBody(response.raw, max_bytes)
        return response

    class CappedPolls(RequestsTransport):
        def sleep(self, duration: float) -> None:
            sleep(min(max(float(duration), 0.0), MAX_RETRY_AFTER_S))

    session = requests.Session()
    session.hooks["response"].append(bounded)
    return CappedPolls(session=session, session_owner=True)


class _BoundedBody:
    """An HTTP answer's raw stream (urllib3's) that stops at ``limit`` bytes and, at its end,
    refuses JSON nested deeper than :data:`MAX_DEPTH`."""

    def __init__(self, raw: Any, limit: int) -> None:
        self._raw = raw
        self._limit = limit

    def stream(self, amt: int = 2**16, decode_content: bool | None = None) -> Iterator[bytes]:
        body = bytearray()
        for chunk in self._raw.stream(amt, decode_content=decode_content):
            body += chunk
            if len(body) > self._limit:
                raise Unreadable(f"longer than {self._limit} bytes: stopped reading")
            yield chunk
        if body[:1] in (b"{", b"[") and depth(bytes(body)) > MAX_DEPTH:
            raise TooDeep(f"JSON nested deeper than {MAX_DEPTH} levels")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)

    def __setattr__(self, name: str, value: Any) -> None:
        # What azure-core sets on the stream (enforce_content_length) reaches urllib3's.
        if name.startswith("_"):
            object.__setattr__(self, name, value)
        else:
            setattr(self._raw, name, value)


def within(seconds: float, call: Any) -> Any:
    """``call()``'s result, or :class:`Unreadable` ("no whole answer within N s") when it has not
    returned within ``seconds``. For a client library's request, whose timeouts bound one socket
    read each: a server that trickles its status line or one long chunk holds it for ever. The
    call runs in a daemon thread; one that is late goes on until its own read timeouts end it,
    and its result is dropped (the driver reports the bound and ends, or asks again)."""
    done = threading.Event()
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as e:  # raised again in the caller's thread
            box["error"] = e
        finally:
            done.set()

    threading.Thread(target=run, name="untrusted-within", daemon=True).start()
    if not done.wait(seconds):
        raise _late(seconds)
    if "error" in box:
        raise box["error"]
    return box["value"]


# -- what may be shown ---------------------------------------------------------------------------
def redact_url(text: str, limit: int = 200) -> str:
    """``text`` as a URL that may be shown: no user info (``user:password@``), no query (a SAS
    token) and no fragment, each replaced by ``…``; control characters removed."""
    try:
        parts = urllib.parse.urlsplit(text.strip())
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        return shown(text.split("?")[0].split("@")[-1], limit)
    if ":" in host:
        host = f"[{host}]"
    user = "…@" if parts.username is not None or parts.password is not None else ""
    tail = ("?…" if parts.query else "") + ("#…" if parts.fragment else "")
    scheme = f"{parts.scheme}://" if parts.scheme else ""
    return shown(f"{scheme}{user}{host}{port}{parts.path}{tail}", limit)


# Job output, store names, Azure's messages: what could rewrite the user's terminal. Each sequence
# goes whole, in its 7-bit form (ESC [, ESC ], ESC P ...) and its 8-bit C1 form (U+009B CSI,
# U+009D OSC, U+0090 DCS ...: terminals that decode UTF-8 act on them too), and so does every
# other C0 and C1 control. Colours (SGR: "ESC [ digits;... m") are harmless and kept in a job's
# output, so RLlib's coloured tables still look right.
_SGR = re.compile(r"\x1b\[[0-9;:]*m")
_CONTROL = re.compile(
    # CSI: parameter bytes, intermediate bytes, a final byte (missing when the text ends first)
    r"(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?"
    # OSC, ended by BEL or ST (ESC \ or U+009C); titles, links, the clipboard. One that is not
    # ended goes to the end of the line, not further: the next lines stay.
    r"|(?:\x1b\]|\x9d)[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"
    # DCS, SOS, PM, APC strings, ended by ST
    r"|(?:\x1b[PX^_]|[\x90\x98\x9e\x9f])[^\x1b\x9c\n]*(?:\x1b\\|\x9c)?"
    # any other escape: intermediates and a final byte (ESC ( 0, ESC # 8, ESC c ...), or a lone ESC
    r"|\x1b[\x20-\x2f]*[\x30-\x7e]?"
    # C0 controls except \t \n \r, DEL, and the C1 controls U+0080-U+009F
    r"|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]"
)


def _strip(match: re.Match[str]) -> str:
    return match.group() if _SGR.fullmatch(match.group()) else ""


def terminal_safe(text: str) -> str:
    """``text`` without the control sequences that could take over a terminal (colours and
    line breaks stay: a job's output)."""
    return _CONTROL.sub(_strip, text)


def shown(text: str, limit: int = 300) -> str:
    """``text`` from outside as one field of one line: no control sequence (colours neither),
    tabs and line breaks shown as ``\\t``/``\\n``/``\\r``, at most ``limit`` characters."""
    text = _CONTROL.sub("", str(text))
    text = text.replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def one_line(e: BaseException | str, limit: int = 300) -> str:
    """An exception's text (or any text from outside) on one line (whitespace collapsed, no
    control sequences), cut to ``limit`` characters."""
    text = " ".join(_CONTROL.sub("", str(e)).split())
    if not text and isinstance(e, BaseException):
        text = type(e).__name__
    return text[:limit]


@contextlib.contextmanager
def deadline_check(seconds: float) -> Iterator[Any]:
    """A callable that raises :class:`Unreadable` once ``seconds`` have passed (for readers that
    go chunk by chunk through a client library)."""
    end = time.monotonic() + seconds

    def check() -> None:
        if time.monotonic() > end:
            raise _late(seconds)

    yield check
