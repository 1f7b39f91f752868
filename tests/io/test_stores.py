"""The path layer (offline_prelearner.io.stores) behaves the same on a local disk, S3 (SeaweedFS)
and Azure Blob (Azurite): listing, globbing, questions, bytes; a bad store fails in one line,
within seconds."""

from __future__ import annotations

import glob
import itertools
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from offline_prelearner.io.stores import StorageError, is_remote, locate, storage_error

STORES = ["local", "s3", "azure"]
_FRESH = itertools.count()


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty folder (prefix) on each store, as the URI a user writes."""
    if request.param == "local":
        return str(tmp_path / "store")
    return str(request.getfixturevalue(f"{request.param}_store"))


def put_tree(root: str, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        locate(root).join(*name.split("/")).write_bytes(data)


def relative(root: str, found: list[Any]) -> list[str]:
    base = locate(root).path.rstrip("/") + "/"
    return [f.path[len(base) :].replace(os.sep, "/") for f in found]


TREE = {
    "a.txt": b"a",
    "b.parquet": b"bb",
    "d/c.txt": b"ccc",
    "d/e/f.parquet": b"ffff",
    "d/e/g.txt": b"",
    "d2/h.json": b"{}",
    "z/y/x/w.txt": b"w",
}
PATTERNS = [
    "*",
    "*.txt",
    "**",
    "**/*",
    "**/*.txt",
    "**/*.parquet",
    "d/*",
    "d/**",
    "d/**/*.txt",
    "*/*",
    "*/*/*",
    "?.txt",
    "[ab].*",
    "[!a]*",
    "d?/*",
    "**/e/*",
    "z/**/w.txt",
    "nothing*",
]


def python_glob(root: Path, pattern: str) -> list[str]:
    """What :func:`glob.glob` finds (files only, each once: ``**/**`` lists a file twice there),
    relative, in name order."""
    found = glob.glob(str(root / pattern), recursive=True)
    return sorted(
        {os.path.relpath(p, root).replace(os.sep, "/") for p in found if os.path.isfile(p)}
    )


def test_walk_and_glob_match_the_local_tree(store: str, tmp_path: Path) -> None:
    put_tree(store, TREE)
    local = tmp_path / "copy"
    put_tree(str(local), TREE)
    assert relative(store, locate(store).walk()) == sorted(TREE)
    for pattern in PATTERNS:
        assert relative(store, locate(store).glob(pattern)) == python_glob(local, pattern), pattern


def test_questions_bytes_and_delete(store: str) -> None:
    root = locate(store)
    put_tree(store, TREE)
    f = root.join("d", "e", "f.parquet")
    assert (f.exists(), f.is_file(), f.is_dir(), f.size()) == (True, True, False, 4)
    assert f.read_bytes() == b"ffff" and f.read_bytes(limit=1) == b"ff"
    assert f.name == "f.parquet" and f.parent.name == "e"
    folder = root.join("d")
    assert (folder.exists(), folder.is_dir(), folder.is_file()) == (True, True, False)
    assert [(c.name, is_dir) for c, is_dir in folder.children()] == [("c.txt", False), ("e", True)]
    empty = root.join("d", "e", "g.txt")
    assert empty.is_file() and empty.size() == 0 and empty.read_bytes() == b""
    nothing = root.join("nope")
    assert (nothing.exists(), nothing.is_dir(), nothing.is_file()) == (False, False, False)
    assert nothing.missing() == "not found" and nothing.walk() == []
    with pytest.raises(StorageError, match="not found"):
        nothing.read_bytes()
    f.write_bytes(b"new")  # overwrite
    assert f.read_bytes() == b"new" and f.size() == 3
    f.delete()
    assert not f.exists()
    f.delete()  # a missing file is no error
    folder.delete_tree()
    # no file is left; SeaweedFS may keep the emptied prefix as a folder (its filer's
    # directories), and pyarrow leaves a parent marker, so only the files are asserted
    assert folder.walk() == [] and not root.join("d", "c.txt").exists()
    assert relative(store, root.walk()) == ["a.txt", "b.parquet", "d2/h.json", "z/y/x/w.txt"]
    root.join("nope").delete_tree()  # a missing folder is no error
    assert is_remote(store) == (not root.local)
    assert locate(root.uri).path == root.path  # the URI names the same place


def test_file_uris_are_local_paths(tmp_path: Path) -> None:
    target = tmp_path / "with space" / "x.bin"
    loc = locate("file://" + str(target).replace(" ", "%20"))
    assert loc.local and loc.path == str(target) and not is_remote(loc)
    loc.write_bytes(b"xyz")
    assert target.read_bytes() == b"xyz"
    assert locate(f"file://{tmp_path}").walk() == [loc]
    assert not is_remote(f"file://{tmp_path}") and is_remote("s3://b/k")


names = st.sampled_from(["a", "b", "ab", "a.txt", "b.txt", "c.parquet", "x_1", "e"])
trees = st.lists(st.lists(names, min_size=1, max_size=3), min_size=1, max_size=6).map(
    lambda paths: {"/".join(p) for p in paths}
)
patterns = st.lists(
    st.sampled_from(["*", "**", "a*", "*.txt", "?", "[ab]*", "e", "ab"]), min_size=1, max_size=3
).map("/".join)


def _no_file_is_a_folder(paths: set[str]) -> bool:
    return not any(q.startswith(p + "/") for p in paths for q in paths)


@pytest.mark.parametrize("kind", STORES)
def test_glob_matches_python_glob_on_random_trees(
    kind: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Hypothesis draws trees of names and patterns; every store globs like glob.glob."""
    base = (
        str(tmp_path_factory.mktemp("trees"))
        if kind == "local"
        else str(request.getfixturevalue(f"{kind}_store"))
    )

    @settings(
        max_examples=8 if kind != "local" else 40,
        deadline=None,
    )
    @given(tree=trees.filter(_no_file_is_a_folder), pattern_list=st.lists(patterns, max_size=4))
    def check(tree: set[str], pattern_list: list[str]) -> None:
        n = next(_FRESH)
        root = locate(base).join(f"t{n}").uri
        local = tmp_path_factory.mktemp("copy")
        files = {p: b"x" for p in tree}
        put_tree(root, files)
        put_tree(str(local), files)
        assert relative(root, locate(root).walk()) == sorted(tree)
        for pattern in pattern_list:
            assert relative(root, locate(root).glob(pattern)) == python_glob(local, pattern)

    check()


# ---------------------------------------------------------------------------------------------
# bad stores: one StorageError line, never a retry loop
# ---------------------------------------------------------------------------------------------
#: A bad store's error must come before this (the clients' default retries take minutes).
HANG_SECONDS = 60


@pytest.fixture
def quick() -> Iterator[Any]:
    """Asserts the block raises one StorageError line, and does not sit in a store client's
    retry loop (those back off for minutes): the bound is a hang guard, far above the second or
    so it takes when idle, so a loaded machine never fails it; speed is not tested here."""

    def check(call: Any, match: str) -> StorageError:
        t0 = time.monotonic()
        with pytest.raises(StorageError, match=match) as info:
            call()
        took = time.monotonic() - t0
        assert took < HANG_SECONDS, f"{took:.1f} s: a retry loop?"
        text = str(info.value)
        assert "\n" not in text and len(text) < 400, text
        return info.value

    yield check


def _bucket_of(uri: str) -> str:
    scheme, rest = uri.split("://", 1)
    return f"{scheme}://{rest.split('/', 1)[0]}"


@pytest.mark.parametrize("kind", ["s3", "azure"])
def test_no_such_bucket(kind: str, request: pytest.FixtureRequest, quick: Any) -> None:
    uri = str(request.getfixturevalue(f"{kind}_store"))
    word = "bucket" if kind == "s3" else "container"
    scheme = uri.split("://", 1)[0]
    missing = locate(f"{scheme}://no-such-{word}-here/prefix")
    assert missing.missing() == f"no such {word}"
    assert not missing.exists()
    quick(missing.walk, f"no such {word}")
    quick(missing.join("x").read_bytes, "not found|no such")
    if kind == "azure":  # SeaweedFS makes the bucket on a put to it (and fails the put)
        quick(lambda: missing.join("x").write_bytes(b"x"), "no such container")
    assert locate(_bucket_of(uri)).is_dir()  # the session's bucket is there


@pytest.mark.parametrize("kind", ["s3", "azure"])
def test_wrong_credentials(
    kind: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, quick: Any
) -> None:
    uri = str(request.getfixturevalue(f"{kind}_store"))
    if kind == "s3":
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    else:
        conn = os.environ["AZURE_STORAGE_CONNECTION_STRING"]
        key = conn.split("AccountKey=", 1)[1].split(";", 1)[0]
        monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", conn.replace(key, "A" * len(key)))
    loc = locate(uri)
    write = lambda: loc.join("x").write_bytes(b"x")  # noqa: E731
    for call in (loc.exists, loc.walk, loc.join("x").read_bytes, write, loc.join("x").delete):
        quick(call, "credentials|denied")


def test_write_denied(
    s3_store: str, s3_server: Any, monkeypatch: pytest.MonkeyPatch, quick: Any
) -> None:
    """An identity that may read but not write: reading works, a write fails in one line."""
    locate(s3_store).join("x").write_bytes(b"x")
    for name, value in s3_server.reader_env.items():
        monkeypatch.setenv(name, value)
    assert locate(s3_store).join("x").read_bytes() == b"x"
    quick(lambda: locate(s3_store).join("y").write_bytes(b"y"), "denied|credentials")
    quick(lambda: locate(s3_store).join("x").delete(), "denied|credentials")


@pytest.mark.parametrize("kind", ["s3", "azure"])
def test_endpoint_down(
    kind: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, quick: Any
) -> None:
    from stores import free_ports

    uri = str(request.getfixturevalue(f"{kind}_store"))
    (closed,) = free_ports(1)  # nothing listens there
    if kind == "s3":
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{closed}")
    else:
        conn = os.environ["AZURE_STORAGE_CONNECTION_STRING"]
        down = re.sub(r"127\.0\.0\.1:\d+", f"127.0.0.1:{closed}", conn)
        monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", down)
    quick(lambda: locate(uri).exists(), "cannot be reached")
    quick(lambda: locate(uri).walk(), "cannot be reached")


def test_unknown_scheme(quick: Any) -> None:
    quick(lambda: locate("nosuchscheme://bucket/key").exists(), "nosuchscheme")
    quick(lambda: locate("s3:///key"), "no bucket")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("AWS Error ACCESS_DENIED during PutObject operation", "access denied"),
        ("HTTP status 403 Forbidden", "access denied"),
        ("AWS Error UNKNOWN (HTTP status 403) during HeadObject", "access denied"),
        # A job id holds "403" (T024032): a timeout on its staging is not "access denied".
        (
            "When uploading part for key 'out/_staging/20261127T024032-0be835017dafbc72/job.json'"
            " in bucket 'b': AWS Error NETWORK_CONNECTION during UploadPart: curlCode: 28, Timeout",
            "cannot be reached",
        ),
    ],
)
def test_storage_error_names_what_failed(text: str, words: str) -> None:
    assert words in str(storage_error(OSError(text), "s3://b/out"))
