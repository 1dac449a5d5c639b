"""Runs the Python examples of the docs against the built extension.

    python scripts/check_docs_examples.py          (after scripts/test.sh or maturin develop)

Each page's ```python blocks run as one script, in a scratch directory: the
user guide pages in their nav order in one directory (a later page reads the
tables an earlier one wrote), README.md and docs/index.md each in a fresh
one. A block that moves data to CUDA is left out. The object-storage page
runs against moto's S3-compatible server on 127.0.0.1 (a dev requirement),
reached through the environment variables a training job would set. Exits
non-zero if any page fails, printing its error.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
GUIDE = [
    "stores",
    "tables",
    "evolving",
    "editing",
    "loader",
    "images",
    "image-captions",
    "arrow",
    "sql-parquet",
    "cli",
    "processes-threads",
    "free-threaded",
    "ray",
    "remote",
]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def s3_env() -> dict:
    """Starts moto's S3 server with the bucket the remote page uses and
    returns the environment that points at it."""
    import logging

    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "docs",
        "AWS_SECRET_ACCESS_KEY": "docs-secret",
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
    }
    boto3.client(
        "s3",
        endpoint_url=env["AWS_ENDPOINT_URL"],
        region_name="us-east-1",
        aws_access_key_id="docs",
        aws_secret_access_key="docs-secret",
    ).create_bucket(Bucket="loaderx-docs")
    return env


def run(page: pathlib.Path, cwd: str, env: dict | None = None) -> bool:
    blocks = [b for b in BLOCK.findall(page.read_text()) if "cuda" not in b]
    proc = subprocess.run(
        [sys.executable, "-c", "\n".join(blocks)],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    name = page.relative_to(ROOT)
    if proc.returncode:
        print(f"{name}: FAILED\n{proc.stderr[-3000:]}")
        return False
    print(f"{name}: ok ({len(blocks)} blocks)")
    return True


def main() -> int:
    ok = True
    with tempfile.TemporaryDirectory() as guide_dir:
        for name in GUIDE:
            env = s3_env() if name == "remote" else None
            ok &= run(ROOT / "docs" / "guide" / f"{name}.md", guide_dir, env)
    for page in (ROOT / "README.md", ROOT / "docs" / "index.md"):
        with tempfile.TemporaryDirectory() as d:
            ok &= run(page, d)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
