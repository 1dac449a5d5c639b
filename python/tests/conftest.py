import os

import numpy as np
import pytest


@pytest.fixture
def root(tmp_path):
    """A temporary directory for stores."""
    return tmp_path


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """Runs the test with the current directory set to a temporary one."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def snapshot(path):
    """The bytes of every file of a store directory (to prove nothing changed)."""
    out = {}
    for name in sorted(os.listdir(path)):
        with open(os.path.join(path, name), "rb") as f:
            out[name] = f.read()
    return out


DTYPES = [
    np.bool_,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
]


def random_records(dtype, shape, rng):
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dt.kind == "f":
        return rng.standard_normal(size=shape).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)


@pytest.fixture(scope="module")
def ray_session():
    """Ray's environment for a test module; shuts Ray down after it
    (whichever test started it). The Ray tests importorskip ray first."""
    import ray

    import loaderx

    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(loaderx.__file__)))
    env = {
        "RAY_USAGE_STATS_ENABLED": "0",
        # Ray Train's v2 API needs pydantic; the v1 trainer runs without it.
        "RAY_TRAIN_V2_ENABLED": "0",
        # Workers import loaderx from the same place as this process.
        "PYTHONPATH": os.pathsep.join(
            p for p in [package_parent, os.environ.get("PYTHONPATH", "")] if p
        ),
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield
    ray.shutdown()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture
def local_ray(ray_session):
    """A local Ray instance of two CPUs, started once per module."""
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    # Ray yields finished blocks first unless told to keep the plan's order;
    # the record-order assertions need it.
    ctx.execution_options.preserve_order = True
    return ray


def pytest_sessionfinish(session, exitstatus):
    """With ``LOADERX_FORBID_SKIPS=1`` (scripts/test_free_threaded.sh) a
    skipped test fails the run: tests that cannot run there are deselected
    by name instead, so none is skipped silently."""
    if os.environ.get("LOADERX_FORBID_SKIPS") != "1":
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter is not None else []
    if skipped:
        for rep in skipped:
            reporter.write_line(f"LOADERX_FORBID_SKIPS: skipped {rep.nodeid}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def s3_server():
    """moto's S3-compatible server on 127.0.0.1 for the whole session."""
    from remote_servers import start_s3

    s3 = start_s3()
    yield s3
    s3.server.stop()


@pytest.fixture
def s3(s3_server, request):
    """The S3 server and a key prefix of this test's own."""
    import re
    import uuid

    name = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name)[:60]
    s3_server.prefix = f"{name}-{uuid.uuid4().hex[:8]}"
    return s3_server


@pytest.fixture(scope="session")
def gcs_server():
    """fake-gcs-server, the Google Cloud Storage emulator, on 127.0.0.1 for
    the whole session."""
    from remote_servers import start_gcs

    gcs = start_gcs()
    yield gcs
    gcs.stop()


@pytest.fixture
def gcs(gcs_server, request):
    """The GCS emulator and a key prefix of this test's own."""
    import re
    import uuid

    name = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name)[:60]
    gcs_server.prefix = f"{name}-{uuid.uuid4().hex[:8]}"
    return gcs_server
