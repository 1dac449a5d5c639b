"""Tables over plain HTTP(S): a local server that honours ``Range`` and
answers WebDAV ``PROPFIND`` (remote_servers.RangeServer, standard library
only) serves a table that reads bit-exactly like the local one; http
locations are read-only."""

import numpy as np
import pytest
from remote_servers import make_table, same_batch

import loaderx


@pytest.fixture
def local_table(tmp_path):
    return make_table(str(tmp_path / "t"))


def test_http_tables_read_through_range_requests(tmp_path, local_table):
    from remote_servers import RangeServer

    served = tmp_path / "www"
    loaderx.copy_table(local_table, str(served / "t"))
    server = RangeServer(str(served))
    try:
        with loaderx.open_table(f"{server.url}/t") as ht, loaderx.open_table(local_table) as lt:
            idx = np.random.default_rng(4).integers(0, 300, 50)
            same_batch({k: ht[k][idx] for k in ht}, {k: lt[k][idx] for k in lt})
        with pytest.raises(ValueError, match="read-only"):
            loaderx.copy_table(local_table, f"{server.url}/copy")
        with pytest.raises(FileNotFoundError):
            loaderx.open_table(f"{server.url}/absent")
    finally:
        server.stop()


def test_a_server_that_sends_no_etag_is_pinned_by_size_and_last_modified(tmp_path, local_table):
    import os

    from remote_servers import RangeServer

    served = tmp_path / "www"
    loaderx.copy_table(local_table, str(served / "t"))
    server = RangeServer(str(served), etags=False)
    try:
        with loaderx.open_table(f"{server.url}/t") as ht, loaderx.open_table(local_table) as lt:
            idx = np.random.default_rng(5).integers(0, 300, 50)
            same_batch({k: ht[k][idx] for k in ht}, {k: lt[k][idx] for k in lt})
            # Rewritten in place with the same size: only its Last-Modified
            # (whole seconds) tells, and it does.
            data = served / "t" / "image" / "data.zr"
            body = data.read_bytes()
            st = os.stat(data)
            data.write_bytes(body[::-1])
            os.utime(data, (st.st_atime, st.st_mtime + 10))
            with pytest.raises(loaderx.Corrupted, match="Last-Modified"):
                ht["image"][idx]
    finally:
        server.stop()
