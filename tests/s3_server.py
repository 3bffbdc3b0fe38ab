"""An S3 server on loopback for the tests: moto's server mode (ThreadedMotoServer) on 127.0.0.1,
reached by s3fs through AWS_ENDPOINT_URL with throwaway credentials, as a user's store would be
through their own variables. `s3_store` yields the bucket's URL; nothing leaves the machine."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

BUCKET = "hsi-test"


@contextmanager
def loopback_s3(patch: pytest.MonkeyPatch) -> Iterator[str]:
    """A running moto S3 server with one bucket; yields `s3://BUCKET`."""
    moto_server = pytest.importorskip("moto.server", reason="moto[server] is not installed (the dev extra)")
    pytest.importorskip("s3fs", reason="s3fs is not installed (the cluster extra)")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        # moto's state lives in this process, shared by every server started in it: start empty
        with urllib.request.urlopen(urllib.request.Request(f"http://{host}:{port}/moto-api/reset", method="POST")):
            pass
        for name, value in {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        }.items():
            patch.setenv(name, value)
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
            patch.delenv(name, raising=False)
        import fsspec

        fsspec.filesystem("s3").clear_instance_cache()  # no client of an earlier server
        fs = fsspec.filesystem("s3", skip_instance_cache=True)
        fs.mkdir(BUCKET)
        yield f"s3://{BUCKET}"
    finally:
        server.stop()
