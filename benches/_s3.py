"""The remote benchmarks' servers: an S3-compatible server in Rust
(``s3s-fs``, from the Rust package registry), and a latency proxy in front
of it that adds a fixed delay to every request and counts requests and
bytes, each in a process of its own.

    python benches/_s3.py proxy UPSTREAM_PORT PORT_FILE     (used by start_proxy)

``s3s-fs`` is installed with ``cargo install s3s-fs --version 0.14.1
--features binary --locked`` (``$LOADERX_S3S`` names the binary when it is
not on ``PATH`` or in ``~/.cache/loaderx-tools/bin``). The proxy answers
``GET /__stats`` with its counters and ``PUT /__latency/<ms>`` by changing
its delay; every other request is forwarded unchanged.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

KEY, SECRET, REGION = "loaderx-bench", "loaderx-bench-secret", "us-east-1"


def lance_options(opts: dict[str, str]) -> dict[str, str]:
    """Lance's storage options for the server loaderx reaches with
    ``opts`` (object_store's S3 keys, plain HTTP)."""
    keys = ("aws_endpoint", "aws_region", "aws_access_key_id", "aws_secret_access_key")
    return {**{k: opts[k] for k in keys}, "allow_http": "true"}


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _wait(port: int, proc: subprocess.Popen, what: str) -> None:
    deadline = time.time() + 30
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with status {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"{what} did not start listening on port {port}")


def s3s_binary() -> str:
    env = os.environ.get("LOADERX_S3S")
    candidates = [env] if env else []
    candidates += [shutil.which("s3s-fs"), str(Path.home() / ".cache/loaderx-tools/bin/s3s-fs")]
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return c
    raise SystemExit(
        "bench_remote needs s3s-fs: cargo install s3s-fs --version 0.14.1 --features binary "
        "--locked --root ~/.cache/loaderx-tools"
    )


@dataclass
class Servers:
    root: str
    bucket: str
    server_port: int
    proxy_port: int
    procs: list

    @property
    def endpoint(self) -> str:
        """The proxy: what every client under test talks to."""
        return f"http://127.0.0.1:{self.proxy_port}"

    @property
    def direct(self) -> str:
        return f"http://127.0.0.1:{self.server_port}"

    def options(self) -> dict[str, str]:
        return {
            "aws_endpoint": self.endpoint,
            "aws_region": REGION,
            "aws_access_key_id": KEY,
            "aws_secret_access_key": SECRET,
            "aws_allow_http": "true",
        }

    def _control(self, method: str, path: str) -> bytes:
        req = urllib.request.Request(self.endpoint + path, method=method)
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.read()

    def stats(self) -> dict:
        return json.loads(self._control("GET", "/__stats"))

    def set_latency(self, ms: float) -> None:
        self._control("PUT", f"/__latency/{ms}")

    def stop(self) -> None:
        for p in self.procs:
            p.kill()
            p.wait()
        shutil.rmtree(self.root, ignore_errors=True)


def start(bucket: str = "bench", tmp: str | None = None, cpus: set[int] | None = None) -> Servers:
    """Starts s3s-fs and the latency proxy; with ``cpus``, both run on those
    CPUs only (so that a client kept off them does not share its cores with
    the server)."""
    root = tempfile.mkdtemp(prefix="loaderx-s3s-", dir=tmp)

    def pin():
        if cpus:
            os.sched_setaffinity(0, cpus)

    os.makedirs(os.path.join(root, bucket))
    sport = _free_port()
    server = subprocess.Popen(
        [
            s3s_binary(),
            "--host",
            "127.0.0.1",
            "--port",
            str(sport),
            "--access-key",
            KEY,
            "--secret-key",
            SECRET,
            root,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=pin,
    )
    _wait(sport, server, "s3s-fs")
    port_file = os.path.join(root, ".proxy-port")
    proxy = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "proxy", str(sport), port_file],
        stdout=subprocess.DEVNULL,
        preexec_fn=pin,
    )
    deadline = time.time() + 30
    while not os.path.exists(port_file) and time.time() < deadline:
        time.sleep(0.05)
    pport = int(Path(port_file).read_text())
    _wait(pport, proxy, "the latency proxy")
    return Servers(root, bucket, sport, pport, [proxy, server])


# -- the proxy (its own process) ------------------------------------------------


class _Proxy:
    def __init__(self, upstream_port: int):
        self.upstream_port = upstream_port
        self.latency = 0.0
        self.requests = 0
        self.bytes = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        up_r = up_w = None
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                line, _, rest = head.partition(b"\r\n")
                method, target, _ = line.decode("latin-1").split(" ", 2)
                headers = _headers(rest)
                body = await _body(reader, headers)
                if target.startswith("/__"):
                    reply = self.control(method, target)
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                        + str(len(reply)).encode()
                        + b"\r\n\r\n"
                        + reply
                    )
                    await writer.drain()
                    continue
                self.requests += 1
                if self.latency:
                    await asyncio.sleep(self.latency)
                if up_w is None:
                    up_r, up_w = await asyncio.open_connection("127.0.0.1", self.upstream_port)
                up_w.write(head + body)
                await up_w.drain()
                rhead = await up_r.readuntil(b"\r\n\r\n")
                rheaders = _headers(rhead.partition(b"\r\n")[2])
                rbody = b"" if method == "HEAD" else await _body(up_r, rheaders)
                self.bytes += len(rbody)
                writer.write(rhead + rbody)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            if up_w is not None:
                up_w.close()

    def control(self, method: str, target: str) -> bytes:
        if target.startswith("/__latency/"):
            self.latency = float(target.rsplit("/", 1)[1]) / 1000
        return json.dumps(
            {"requests": self.requests, "bytes": self.bytes, "latency_ms": self.latency * 1000}
        ).encode()


def _headers(raw: bytes) -> dict:
    out = {}
    for h in raw.split(b"\r\n"):
        k, sep, v = h.partition(b":")
        if sep:
            out[k.strip().lower().decode("latin-1")] = v.strip().decode("latin-1")
    return out


async def _body(reader: asyncio.StreamReader, headers: dict) -> bytes:
    if headers.get("transfer-encoding", "").lower() == "chunked":
        out = bytearray()
        while True:
            line = await reader.readuntil(b"\r\n")
            out += line
            size = int(line.split(b";")[0].strip() or b"0", 16)
            chunk = await reader.readexactly(size + 2)
            out += chunk
            if size == 0:
                return bytes(out)
    n = int(headers.get("content-length", "0") or 0)
    return await reader.readexactly(n) if n else b""


async def _serve(upstream_port: int, port_file: str) -> None:
    proxy = _Proxy(upstream_port)
    server = await asyncio.start_server(proxy.handle, "127.0.0.1", 0, limit=1 << 24)
    port = server.sockets[0].getsockname()[1]
    Path(port_file).write_text(str(port))
    async with server:
        await server.serve_forever()


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "proxy":
    asyncio.run(_serve(int(sys.argv[2]), sys.argv[3]))
