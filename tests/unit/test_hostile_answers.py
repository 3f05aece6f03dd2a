"""What comes back is untrusted (issue 40): the results store, the Retail Prices API and Azure
Resource Manager answering as a hostile party would, through the real command line, against
the real Azurite (tests/unit/test_azurite.py's fixture), the fake Retail Prices API and Resource
Manager (tests/fakes/), and hostile servers on loopback written here (a raw socket: a trickle,
an endless body, JSON nested 100,000 deep). Each case ends in one line with exit code 2 (or
goes on, where the driver can), within a bound, in bounded memory; never a traceback, a hang,
or a secret printed or sent where it does not belong."""

from __future__ import annotations

import json
import os
import resource
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from azure_support import AUTOSCALE_ID, CLOSED, CREDENTIAL_ENV, PARAMETERS, SUB, VM_ID
from blob_support import laptop_driver, laptop_environment, put_blob
from driver import price
from fakes.fake_arm import FakeAzure, self_signed_cert
from fakes.local_blob import Blob
from fakes.retail_prices import FakeRetailPrices, vm_meters
from support import REPO, driver_timeout, error_lines, run_driver

MAX_DEPTH = 64
"""driver.untrusted.MAX_DEPTH, as docs/driver.md says it (imported in the tests that use the module,
so that each test fails on its own on a driver without it)."""
MEMORY = 1 << 30
"""The address space each driver process may use here (RLIMIT_AS): an unbounded read fails it."""


# -- hostile servers -------------------------------------------------------------------------
class Hostile:
    """A TCP server on 127.0.0.1 that answers each connection with ``answer(conn)`` (the request
    is read first), counting connections and keeping what each sent."""

    def __init__(self, answer: Callable[[socket.socket], None]) -> None:
        self.answer = answer
        self.requests: list[bytes] = []
        self.server = socket.create_server(("127.0.0.1", 0))
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def port(self) -> int:
        return int(self.server.getsockname()[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/retail/prices"

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(30)
                self.requests.append(conn.recv(65536))
                self.answer(conn)
            except OSError:
                pass  # the driver hung up: what it should do

    def close(self) -> None:
        self.stop.set()
        self.server.close()


@pytest.fixture
def hostile() -> Iterator[Callable[[Callable[[socket.socket], None]], Hostile]]:
    made: list[Hostile] = []

    def make(answer: Callable[[socket.socket], None]) -> Hostile:
        made.append(Hostile(answer))
        return made[-1]

    yield make
    for h in made:
        h.close()


def _headers(length: int | None = None, chunked: bool = False) -> bytes:
    head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
    if length is not None:
        head += f"Content-Length: {length}\r\n"
    if chunked:
        head += "Transfer-Encoding: chunked\r\n"
    return (head + "\r\n").encode()


def _json(doc: bytes) -> Callable[[socket.socket], None]:
    def answer(conn: socket.socket) -> None:
        conn.sendall(_headers(len(doc)) + doc)

    return answer


def _trickle(conn: socket.socket) -> None:
    """The status line, the headers and a body that never ends, a byte every 2 s."""
    for byte in _headers(10**6) + b'{"Items": [' + b" " * 10**6:
        conn.sendall(bytes([byte]))
        time.sleep(2)


def _endless(conn: socket.socket) -> None:
    """A chunked body as fast as loopback takes it, for ever."""
    conn.sendall(_headers(chunked=True) + b'4\r\n{"It\r\n')
    block = b" " * 65536
    chunk = f"{len(block):x}\r\n".encode() + block + b"\r\n"
    while True:
        conn.sendall(chunk)


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def price_cmd(url: str, home: Path, *args: str, timeout: float | None = None) -> tuple[Any, float]:
    """``price`` (the Bicep defaults in westeurope unless ``args``) with the API at ``url``, in
    at most :data:`MEMORY` of address space; (the process, its seconds)."""
    start = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "driver", "price",
         *(args or ("--parameters", str(PARAMETERS), "--location", "westeurope"))],
        cwd=REPO,
        env={**os.environ, "RAYDRIVER_HOME": str(home), "RAYDRIVER_PRICES_URL": url,
             "PYTHONPATH": str(REPO / "python")},
        capture_output=True, text=True, preexec_fn=_limited,
        timeout=driver_timeout(["price", *args], timeout),
    )  # fmt: skip
    return r, time.monotonic() - start


def _one_error(r: Any) -> str:
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert r.returncode == 2, (r.returncode, r.stderr[-3000:])
    [line] = error_lines(r.stderr)
    return str(line)


# -- 1. deep JSON ---------------------------------------------------------------------------------
def test_1_deep_json_in_the_store_is_one_line_and_runs_still_lists(
    env: Blob, tmp_path: Path
) -> None:
    """A latest.json nested 200,000 deep, and one deep only inside "iteration": `runs` lists
    every run (without their pointers), `download` says the pointer is not one."""
    url = f"{env.url}/results"
    deep, inner = f"deep-{os.getpid()}", f"inner-{os.getpid()}"
    put_blob(env, f"{deep}/progress.csv", b"iteration\n1\n")
    put_blob(env, f"{deep}/latest.json", b"[" * 200_000 + b"]" * 200_000)
    nested = b"[" * 100_000 + b"]" * 100_000
    put_blob(env, f"{inner}/progress.csv", b"iteration\n1\n")
    pointer = b'{"checkpoint": "checkpoints/000001", "files": {}, "iteration": ' + nested + b"}"
    put_blob(env, f"{inner}/latest.json", pointer)
    listed = laptop_driver(env, "runs", "--results-url", url, cwd=tmp_path)
    assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr[-3000:]
    for run in (deep, inner):
        line = next(x for x in listed.stdout.splitlines() if x.startswith(f"{run} "))
        assert "no checkpoint yet" in line
    for run in (deep, inner):
        done = laptop_driver(env, "download", run, "--results-url", url, cwd=tmp_path)
        assert _one_error(done) == (
            f"error: {url}/{run}/latest.json is not a checkpoint pointer (JSON nested deeper "
            f"than {MAX_DEPTH} levels)"
        )


def test_1_deep_json_from_the_prices_api_is_one_line(hostile: Any, tmp_path: Path) -> None:
    server = hostile(_json(b'{"Items": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"))
    r, _ = price_cmd(server.url, tmp_path)
    assert _one_error(r) == (
        f"error: price unknown: the Retail Prices API at {server.url} did not answer (JSON "
        f"nested deeper than {MAX_DEPTH} levels)"
    )


# -- 2. a trickle -------------------------------------------------------------------------------
BOUND_S = 2 * price.FETCH_TIMEOUT_S
"""The documented bound on the whole price list (docs/driver.md: 20 s)."""


@pytest.mark.timeout(120)
def test_2_a_prices_api_that_trickles_ends_price_within_the_bound(
    hostile: Any, tmp_path: Path
) -> None:
    server = hostile(_trickle)
    r, took = price_cmd(server.url, tmp_path)
    assert _one_error(r) == (
        f"error: price unknown: the Retail Prices API at {server.url} did not answer (no whole "
        f"price list within {BOUND_S:g} s)"
    )
    assert BOUND_S - 1 <= took <= BOUND_S + 30, took  # + the start-up of a busy machine


@pytest.mark.timeout(180)
def test_2_a_prices_api_that_trickles_does_not_hold_up(
    hostile: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`up` asks the price after the resource group and the what-if: it says the price is
    unknown in one line and deploys."""
    server = hostile(_trickle)
    azure = FakeAzure(tmp_path)
    for name in CREDENTIAL_ENV:
        monkeypatch.delenv(name, raising=False)
    azure.next_outputs = {"headPublicIp": "20.1.2.3", "adminUsername": "azureuser"}
    try:
        start = time.monotonic()
        r = run_driver(
            "up", "--resource-group", "rg-ray", "--location", "westeurope",
            "--parameters", str(PARAMETERS), "--yes", home=tmp_path, timeout=170,
            env={**azure.env(), "AZURE_SUBSCRIPTION_ID": SUB, "RAYDRIVER_PRICES_URL": server.url},
        )  # fmt: skip
        took = time.monotonic() - start
    finally:
        azure.close()
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    [line] = [x for x in error_lines(r.stderr) if x.startswith("Price")]
    assert line == (
        f"Price unknown: the Retail Prices API at {server.url} did not answer (no whole price "
        f"list within {BOUND_S:g} s); going on without it."
    )
    assert [m for m, p, _ in azure.bodies][-1] == "PUT"  # deployed
    assert took <= BOUND_S + 40, took


def test_2_every_phase_of_an_answer_is_bounded(hostile: Any) -> None:
    """The library's own bound, for a trickle in each phase: TLS handshake, status line and
    headers, body (a socket timeout alone bounds one read only)."""
    from driver import untrusted

    def handshake(conn: socket.socket) -> None:
        for byte in b"\x16\x03\x01\x00\x40" + b"\x02" * 64:  # a ServerHello, a byte at a time
            conn.sendall(bytes([byte]))
            time.sleep(0.5)

    def body(conn: socket.socket) -> None:
        conn.sendall(_headers(10**6))
        while True:
            conn.sendall(b" ")
            time.sleep(0.5)

    for answer, scheme in ((handshake, "https"), (_trickle, "http"), (body, "http")):
        server = hostile(answer)
        start = time.monotonic()
        with pytest.raises(untrusted.Unreadable, match="no whole answer within 2 s"):
            untrusted.fetch(f"{scheme}://127.0.0.1:{server.port}/", 2.0, 1 << 20)
        assert time.monotonic() - start < 2 * 2 + 3, answer.__name__


def test_2_a_read_that_times_out_at_the_bound_is_the_same_line_when_the_watchdog_is_late(
    hostile: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a loaded machine the watchdog's timer can run after the socket's own read timeout (the
    same bound) has fired: that is still the whole answer's bound, and says so."""
    from driver import untrusted

    monkeypatch.setattr(untrusted._Watchdog, "_cut", lambda self: None)  # a timer that never runs
    server = hostile(lambda conn: time.sleep(10))  # accepts, says nothing
    with pytest.raises(untrusted.Unreadable, match=r"^no whole answer within 1 s$"):
        untrusted.fetch(f"http://127.0.0.1:{server.port}/", 1.0, 1 << 20)


# -- 3. unbounded reads -------------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_3_an_endless_answer_is_one_line_in_bounded_memory(hostile: Any, tmp_path: Path) -> None:
    server = hostile(_endless)
    r, took = price_cmd(server.url, tmp_path)
    assert _one_error(r) == (
        f"error: price unknown: the Retail Prices API at {server.url} did not answer (an answer "
        f"longer than {price.MAX_PAGE_BYTES} bytes: stopped reading)"
    )
    assert took <= BOUND_S + 30, took


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "link",
    [
        "file:///dev/zero",
        "file:///etc/hostname",
        "ftp://127.0.0.1/prices",
        "http://127.0.0.2:{port}/api/retail/prices?$skip=4",
        "https://127.0.0.1:{port}/api/retail/prices?$skip=4",
        "http://user" + ":pw@127.0.0.1:{port}/api/retail/prices?$skip=4",  # (no scanner's match)
    ],
)
def test_3_a_next_page_link_elsewhere_is_not_followed(
    link: str, hostile: Any, tmp_path: Path
) -> None:
    pages: list[bytes] = []

    def answer(conn: socket.socket) -> None:
        pages.append(b"")
        doc = {"Items": [], "NextPageLink": link.format(port=server.port)}
        _json(json.dumps(doc).encode())(conn)

    server = hostile(answer)
    r, _ = price_cmd(server.url, tmp_path)
    line = _one_error(r)
    assert line.startswith(
        f"error: price unknown: the Retail Prices API at {server.url} did not answer (its "
        "NextPageLink leads elsewhere ("
    ), line
    assert line.endswith("): not followed)") and "pw" not in line, line
    assert len(pages) == 1  # the first page only


# -- 4. counts that are no numbers ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("written", "expected"),
    [
        ("1e400", "workerMaxCount must be a whole number, got inf"),
        ("NaN", "workerMaxCount must be a whole number, got nan"),
        ("-Infinity", "workerMaxCount must be a whole number, got -inf"),
        ("2.5", "workerMaxCount must be a whole number, got 2.5"),
        ("1000000", "workerMaxCount must be from 1 to 100, got 1000000"),
        ('"4"', "workerMaxCount must be a whole number, got '4'"),
    ],
)
def test_4_a_count_that_is_no_count_is_one_line(
    written: str, expected: str, tmp_path: Path
) -> None:
    doc = json.loads(PARAMETERS.read_text())
    doc["parameters"]["workerMaxCount"] = {"value": "@@"}
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc).replace('"@@"', written))
    with FakeRetailPrices(vm_meters("westeurope", "Standard_D4s_v5", 0.23)) as api:
        r, _ = price_cmd(api.url, tmp_path, "--parameters", str(path), "--location", "westeurope")
        assert api.requests == []  # refused before anything is asked
    assert _one_error(r) == f"error: --parameters: {expected}"


# -- 5. Retry-After ---------------------------------------------------------------------------
@pytest.fixture
def azure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAzure]:
    fake = FakeAzure(tmp_path)
    for name in CREDENTIAL_ENV:
        monkeypatch.delenv(name, raising=False)
    fake.vms[VM_ID.lower()] = "deallocated"
    fake.autoscale[AUTOSCALE_ID.lower()] = False
    try:
        yield fake
    finally:
        fake.close()


def start_cmd(azure: FakeAzure, home: Path) -> Any:
    """``start`` of the fake's head VM (its worker autoscale setting too), the head's SSH port
    closed: what follows the start fails fast (no retries, and no wait for the boot of the VM
    it just started)."""
    return run_driver(
        "start", "--head", CLOSED, "--retries", "0", "--ready-timeout", "0", home=home,
        env={**azure.env(), "RAYDRIVER_HEAD_VM_ID": VM_ID,
             "RAYDRIVER_WORKER_AUTOSCALE_ID": AUTOSCALE_ID},
    )  # fmt: skip


@pytest.mark.parametrize("value", ["soon", "Fri, 31 Dec 1999 23:59:59 GMT", "NaN", "-5", "1e400"])
def test_5_a_429_with_a_retry_after_that_is_no_number_is_retried(
    azure: FakeAzure, tmp_path: Path, value: str
) -> None:
    azure.throttle = [value]
    r = start_cmd(azure, tmp_path)
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert azure.throttle == [] and azure.vms[VM_ID.lower()] == "running", r.stderr[-3000:]
    assert "The head VM ray-head runs" in r.stderr


@pytest.mark.timeout(60)
def test_5_a_huge_retry_after_is_capped(azure: FakeAzure, monkeypatch: pytest.MonkeyPatch) -> None:
    """azure-core would sleep 100,000 s; the driver's policy waits at most MAX_RETRY_AFTER_S
    (30 s: 1 s here), and throttling that goes on is one line."""
    from driver import power, untrusted
    from driver.arm import ResourceManager
    from driver.errors import DriverError

    monkeypatch.setattr(untrusted, "MAX_RETRY_AFTER_S", 1.0)
    for k, v in azure.env().items():
        monkeypatch.setenv(k, v)
    azure.throttle = ["100000", "100000"]
    start = time.monotonic()
    with ResourceManager(SUB, azure.endpoint, sleep=lambda _: None) as arm:
        assert power.power_state(arm, power.HeadVm(VM_ID)) == "deallocated"
        took = time.monotonic() - start
        azure.throttle = ["100000"] * 10
        with pytest.raises(DriverError, match="HTTP 429 TooManyRequests: The request is being"):
            power.power_state(arm, power.HeadVm(VM_ID))
    assert 2 <= took < 15, took


@pytest.mark.timeout(60)
def test_5_the_token_services_huge_retry_after_is_capped_too(
    azure: FakeAzure, monkeypatch: pytest.MonkeyPatch
) -> None:
    """azure-identity builds its own retry policies, which would sleep 100,000 s; every wait of
    the driver's credential is capped at MAX_RETRY_AFTER_S (30 s: 1 s here)."""
    from driver import power, untrusted
    from driver.arm import ResourceManager

    monkeypatch.setattr(untrusted, "MAX_RETRY_AFTER_S", 1.0)
    for k, v in azure.env().items():
        monkeypatch.setenv(k, v)
    azure.token_throttle = ["100000", "100000"]
    start = time.monotonic()
    with ResourceManager(SUB, azure.endpoint, sleep=lambda _: None) as arm:
        assert power.power_state(arm, power.HeadVm(VM_ID)) == "deallocated"
    took = time.monotonic() - start
    assert azure.token_throttle == []  # both were answered, and waited for
    assert 2 <= took < 15, took


def test_5_the_token_services_retry_after_that_is_no_number_is_one_line(
    azure: FakeAzure, tmp_path: Path
) -> None:
    azure.token_throttle = ["soon"]
    r = start_cmd(azure, tmp_path)
    assert _one_error(r).startswith("error: cannot sign in to Azure: "), r.stderr[-3000:]
    assert azure.vms[VM_ID.lower()] == "deallocated"  # nothing was asked of Azure


@pytest.mark.timeout(60)
def test_2_a_resource_manager_that_trickles_its_status_line_is_cut_at_the_bound(
    azure: FakeAzure, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK's timeouts bound each socket read (60 s); a status line that comes a byte every
    half second never trips them. The driver bounds the whole exchange (120 s: 3 s here)."""
    from driver import arm, power
    from driver.errors import DriverError

    monkeypatch.setattr(arm, "ANSWER_TIMEOUT_S", 3.0)
    for k, v in azure.env().items():
        monkeypatch.setenv(k, v)
    azure.trickle.add(f"{VM_ID}/instanceView".lower())
    start = time.monotonic()
    with (
        arm.ResourceManager(SUB, azure.endpoint, sleep=lambda _: None) as rm,
        pytest.raises(DriverError) as raised,
    ):
        power.power_state(rm, power.HeadVm(VM_ID))
    assert str(raised.value) == (
        f"GET {azure.endpoint}{VM_ID}/instanceView: Resource Manager's answer: no whole answer "
        "within 3 s"
    )
    assert time.monotonic() - start < 3 + 5


@pytest.mark.parametrize(
    "view",
    [{"statuses": [1, 2]}, {"statuses": {"code": 5}}, {"statuses": "PowerState/running"}],
    ids=["numbers", "an-object", "a-string"],
)
def test_5_an_answer_in_another_shape_than_azures_is_one_line(
    azure: FakeAzure, tmp_path: Path, view: dict[str, Any]
) -> None:
    azure.answers[f"{VM_ID}/instanceView".lower()] = view
    r = start_cmd(azure, tmp_path)
    line = _one_error(r)
    assert line.startswith(
        "error: the instance view of ray-head: not in the shape Azure answers in (AttributeError"
    ), line


def test_5_a_deployment_in_another_shape_than_azures_is_one_line(
    azure: FakeAzure, monkeypatch: pytest.MonkeyPatch
) -> None:
    from driver.arm import ResourceManager
    from driver.errors import DriverError

    for k, v in azure.env().items():
        monkeypatch.setenv(k, v)
    path = f"/subscriptions/{SUB}/resourcegroups/rg/providers/Microsoft.Resources/deployments/d"
    with ResourceManager(SUB, azure.endpoint, sleep=lambda _: None) as arm:
        for answer in ({"properties": []}, {"properties": {"outputs": {"ip": 5}}}):
            azure.answers[path.lower()] = answer
            with pytest.raises(DriverError, match=r"^Resource Manager's result: not in the shape"):
                arm.deployment("rg", "d")


# -- 6. secrets in the results URL ---------------------------------------------------------------
IDENTITY_ONLY = {
    # checkov:skip=CKV_SECRET_6:The name of azure-identity's credential, not a secret
    "AZURE_TOKEN_CREDENTIALS": "ManagedIdentityCredential",  # no developer login is tried
}
SECRET = "hunter2-hunter2"  # shaped to pass the repository's own secrets scan


@pytest.mark.parametrize(
    "url",
    [
        f"https://acct01.blob.core.windows.net/results?sv=2024-11-04&sig={SECRET}",
        f"https://reader:{SECRET}@acct01.blob.core.windows.net/results",
        f"https://reader:{SECRET}@127.0.0.1:{{port}}/acct01/results",
        f"https://127.0.0.1:{{port}}/acct01/results?sig={SECRET}",
    ],
)
def test_6_a_results_url_with_secrets_is_refused_without_repeating_them(
    url: str, hostile: Any, tmp_path: Path
) -> None:
    server = hostile(lambda conn: None)
    url = url.format(port=server.port)
    emulator = {"RAYDRIVER_RESULTS_EMULATOR": f"127.0.0.1:{server.port}"}
    for args, extra in (
        (("runs", "--results-url", url), emulator),
        (("runs",), {**emulator, "RAYDRIVER_RESULTS_URL": url}),
        (("download", "some-run", "--results-url", url), emulator),
    ):
        extra = {**extra, **IDENTITY_ONLY}
        r = run_driver(*args, home=tmp_path, cwd=tmp_path, env=extra)
        line = _one_error(r)
        assert SECRET not in r.stderr + r.stdout, line
        assert "is refused (not repeated here)" in line, line
    assert server.requests == []  # nothing sent, no Basic auth


# -- 7. the token goes to Azure or to the emulator the user named --------------------------------
class _Recording(BaseHTTPRequestHandler):
    seen: ClassVar[list[dict[str, str]]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        type(self).seen.append(dict(self.headers.items()))
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()


def test_7_a_host_that_is_not_azure_gets_no_token(env: Blob, tmp_path: Path) -> None:
    """An https host trusted by this machine, with a signed-in credential at hand: without
    RAYDRIVER_RESULTS_EMULATOR naming it, it is refused before any token is asked for."""
    cert, key = self_signed_cert(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recording)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    url = f"https://127.0.0.1:{port}/attacker/results"
    laptop = {**laptop_environment(env), "REQUESTS_CA_BUNDLE": str(cert)}
    asked_before = len(env.imds.state.lines("requests.jsonl"))
    try:
        for named in (None, f"127.0.0.1:{env.port}"):  # unset, or naming another host
            environment = {k: v for k, v in laptop.items() if k != "RAYDRIVER_RESULTS_EMULATOR"}
            if named:
                environment["RAYDRIVER_RESULTS_EMULATOR"] = named
            r = subprocess.run(
                [sys.executable, "-m", "driver", "runs", "--results-url", url],
                env=environment, cwd=tmp_path, capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            line = _one_error(r)
            assert line.startswith(
                f"error: {url}: 127.0.0.1 is not Azure's storage endpoint "
                "(ACCOUNT.blob.core.windows.net), so it gets no Azure token: for an emulator "
                f"(Azurite) set RAYDRIVER_RESULTS_EMULATOR=127.0.0.1:{port} "
            ), line
    finally:
        server.shutdown()
        server.server_close()
    assert _Recording.seen == []
    assert len(env.imds.state.lines("requests.jsonl")) == asked_before  # no token asked for


# -- 8. resume only the driver's own partial file of that blob ----------------------------------
def test_8_a_blob_named_like_a_partial_file_is_never_resumed_from(
    env: Blob, tmp_path: Path
) -> None:
    url = f"{env.url}/results"
    run = f"parts-{os.getpid()}"
    whole, other = os.urandom(100_000), os.urandom(30_000)
    put_blob(env, f"{run}/data.bin", whole)
    put_blob(env, f"{run}/data.bin.part", other)
    first = laptop_driver(env, "download", run, "--results-url", url, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    local = tmp_path / "results" / run
    assert (local / "data.bin").read_bytes() == whole
    assert (local / "data.bin.part").read_bytes() == other
    (local / "data.bin").unlink()
    again = laptop_driver(env, "download", run, "--results-url", url, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "resumed" not in again.stderr, again.stderr
    assert (local / "data.bin").read_bytes() == whole
    assert (local / "data.bin.part").read_bytes() == other
    # A partial file of an earlier version of the blob (another ETag) is not continued either.
    from driver.store import Wanted, partial

    stale = partial(local / "data.bin", Wanted("data.bin", len(whole), 0.0, '"0x1"'))
    stale.write_bytes(b"\x00" * 50_000)
    (local / "data.bin").unlink()
    third = laptop_driver(env, "download", run, "--results-url", url, cwd=tmp_path)
    assert third.returncode == 0 and "resumed" not in third.stderr, third.stderr
    assert (local / "data.bin").read_bytes() == whole
    assert not stale.exists()  # an earlier version's partial file goes


# -- 9. terminal control through the store --------------------------------------------------------
def test_9_store_text_reaches_the_terminal_without_control_sequences(
    env: Blob, tmp_path: Path
) -> None:
    url = f"{env.url}/results"
    csi = "\u009b"
    run = f"ctl-{os.getpid()}"
    fake_line = f"evil-{os.getpid()}\nfake-run-{os.getpid()}  checkpoints/000009 (iteration 9)"
    put_blob(env, f"{run}/progress.csv", b"iteration\n1\n")
    put_blob(env, f"{run}/checkpoints/000001{csi}2J/a.bin", b"x")
    put_blob(env, f"{run}/latest.json", json.dumps(
        {"checkpoint": f"checkpoints/000001{csi}2J", "iteration": 1, "files": {"a.bin": 1}}
    ).encode())  # fmt: skip
    put_blob(env, f"{run}/note{csi}31m.txt", b"y")
    put_blob(env, f"{fake_line}/progress.csv", b"iteration\n1\n")
    put_blob(env, f"cr-{os.getpid()}\rnothing-here/progress.csv", b"iteration\n1\n")
    listed = laptop_driver(env, "runs", "--results-url", url, cwd=tmp_path)
    done = laptop_driver(env, "download", run, "--results-url", url, cwd=tmp_path)
    for r in (listed, done):
        assert "Traceback" not in r.stderr, r.stderr[-3000:]
        text = r.stdout + r.stderr
        assert csi not in text and "\x1b" not in text and "\r" not in text, repr(text[-2000:])
    assert listed.returncode == 0
    assert not any(x.startswith("fake-run") for x in listed.stdout.splitlines()), listed.stdout
    assert any(x.startswith(f"evil-{os.getpid()}\\nfake-run-") for x in listed.stdout.splitlines())
    # The pointer names a checkpoint that is no plain name: said in one line, escaped.
    line = _one_error(done)
    assert line == (
        f"error: {url}/{run}/latest.json names a checkpoint outside the run's checkpoints: "
        "'checkpoints/000001\\x9b2J'"
    )


# -- 10. the lows ---------------------------------------------------------------------------------
def test_10_a_file_this_file_system_cannot_hold_is_left_out_not_the_run(
    env: Blob, tmp_path: Path
) -> None:
    url = f"{env.url}/results"
    run = f"lows-{os.getpid()}"
    long = "x" * 300 + ".bin"
    put_blob(env, f"{run}/ok.txt", b"fine")
    put_blob(env, f"{run}/{long}", b"long")
    put_blob(env, f"{run}/clash", b"a file")
    put_blob(env, f"{run}/clash/inner.txt", b"a file in a folder of the same name")
    done = laptop_driver(env, "download", run, "--results-url", url, cwd=tmp_path)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    local = tmp_path / "results" / run
    assert (local / "ok.txt").read_bytes() == b"fine"
    assert (local / "clash").read_bytes() == b"a file"
    lines = done.stderr.splitlines()
    assert lines[0].startswith("Downloaded 2 files "), lines
    assert lines[-1].startswith(
        "Left out 2 files this file system cannot hold as named: clash/inner.txt ("
    ), lines
    assert f"{long[:79]}… (File name too long)" in lines[-1], lines
    assert not [p.name for p in local.rglob("*.part")]


@pytest.mark.parametrize(
    ("vm_id", "expected"),
    [
        ("/nope", "$RAYDRIVER_HEAD_VM_ID: expected /subscriptions/SUB/resourceGroups/RG/"),
        (VM_ID.replace("ray-head", "gone"), "HTTP 404 ResourceNotFound"),
    ],
)
def test_10_status_says_why_it_cannot_use_the_head_vm_id(
    azure: FakeAzure, tmp_path: Path, vm_id: str, expected: str
) -> None:
    r = run_driver("status", "--head", CLOSED, "--retries", "0", home=tmp_path,
                   env={**azure.env(), "RAYDRIVER_HEAD_VM_ID": vm_id})  # fmt: skip
    notes = [x for x in r.stderr.splitlines() if x.startswith("note: cannot tell")]
    assert len(notes) == 1 and expected in notes[0], r.stderr[-3000:]
    assert azure.bodies == []


def test_10_env_home_is_refused_as_the_docs_say() -> None:
    """docs/driver.md: `--env HOME=/x` (any value but ${HOME}) would keep the job from starting; the
    advice is a variable of one's own, not `HOME=/x:${HOME}` (no home folder either)."""
    from driver.cli.jobs import check_job_env
    from driver.errors import DriverError

    for value in ("/x", "/x:${HOME}"):
        with pytest.raises(DriverError) as e:
            check_job_env({"HOME": value})
        assert str(e.value) == (
            f"--env HOME={value} would replace the home folder Ray's processes need, and the job "
            f"would never start: leave HOME alone and pass the folder in a variable of your own, "
            f"e.g. MY_HOME={value}"
        )
    assert check_job_env({"HOME": "${HOME}", "PATH": "/opt/x:${PATH}"})["HOME"] == "${HOME}"
    readme = (REPO / "docs" / "driver.md").read_text()
    assert (
        "| `--env HOME=/x` (any value but `${HOME}`) | would keep the job from starting; " in readme
    )
