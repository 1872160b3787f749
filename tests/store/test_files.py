"""The image file store: type and size checks, owner scoping, no path traversal."""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxstack.errors import InputError
from ctxstack.store import SessionFactory, UserRecord
from ctxstack.store.errors import FileRejectedError, NotFoundError, StorageError
from ctxstack.store.files import ENV_FILES_DIR, FileStore, sniff_image_type, valid_file_id
from tests.store.samples import GIF, JPEG, WEBP, png


@pytest.fixture
def store(sf: SessionFactory, tmp_path: Path) -> FileStore:
    return FileStore(sf, tmp_path / "files", max_bytes=4096)


@pytest.mark.parametrize(
    ("data", "mime"),
    [(png(), "image/png"), (JPEG, "image/jpeg"), (GIF, "image/gif"), (WEBP, "image/webp")],
)
async def test_accepted_images_round_trip(
    store: FileStore, alice: UserRecord, data: bytes, mime: str
) -> None:
    record = await store.save(alice.id, data, filename="../../holiday photo.bin")
    assert record.mime_type == mime  # by content, whatever the name says
    assert record.size == len(data)
    assert record.sha256 == hashlib.sha256(data).hexdigest()
    assert record.original_name == "holiday photo.bin"  # display only, path parts gone
    assert valid_file_id(record.id)
    loaded = await store.load(alice.id, record.id)
    assert loaded.data == data
    assert loaded.data_url() == f"data:{mime};base64,{base64.b64encode(data).decode()}"
    # The bytes live under the store's directory, named by our id only.
    on_disk = [p for p in (store.directory).rglob("*") if p.is_file()]
    assert len(on_disk) == 1
    assert on_disk[0].name.startswith(record.id)
    assert store.directory in on_disk[0].parents


@pytest.mark.parametrize(
    ("data", "reason", "words"),
    [
        (b"", "empty", "empty"),
        (b"%PDF-1.7\n...", "type", "a PDF document"),
        (b'<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg"/>', "type", "SVG"),
        (b"just some text", "type", "an unrecognised format"),
        (b"BM\x00\x00", "type", "a BMP image"),
        (png()[:8] + b"\x00" * 5000, "size", "over the 4,096-byte limit"),
    ],
)
async def test_unacceptable_uploads_are_refused_before_anything_is_written(
    store: FileStore, alice: UserRecord, data: bytes, reason: str, words: str
) -> None:
    with pytest.raises(FileRejectedError, match=words) as info:
        await store.save(alice.id, data, filename="photo.png")
    assert info.value.reason == reason
    assert isinstance(info.value, InputError)
    assert isinstance(info.value, ValueError)
    assert not store.directory.exists() or not any(store.directory.rglob("*.*"))
    assert await store.list_files(alice.id) == []


async def test_another_owners_file_looks_missing(
    store: FileStore, alice: UserRecord, bob: UserRecord
) -> None:
    record = await store.save(alice.id, png())
    for call in (store.load(bob.id, record.id), store.info(bob.id, record.id),
                 store.delete(bob.id, record.id)):
        with pytest.raises(NotFoundError, match="not found"):
            await call
    assert await store.infos(bob.id, [record.id]) == {}
    assert (await store.load(alice.id, record.id)).data == png()  # untouched


@pytest.mark.parametrize(
    "file_id",
    ["../secret", "../../etc/passwd", "/etc/passwd", "..%2f..%2fsecret", "ab/../../secret",
     "0" * 31, "0" * 33, "G" * 32, "ABCDEF" + "0" * 26, "", "0" * 32 + "\n"],
)
async def test_path_like_ids_never_reach_the_disk(
    store: FileStore, alice: UserRecord, tmp_path: Path, file_id: str
) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(png())
    with pytest.raises(NotFoundError):
        await store.load(alice.id, file_id)
    assert await store.infos(alice.id, [file_id]) == {}


async def test_missing_or_altered_bytes_are_reported(store: FileStore, alice: UserRecord) -> None:
    gone = await store.save(alice.id, png(seed=1))
    altered = await store.save(alice.id, png(seed=2))
    for path in store.directory.rglob(f"{gone.id}.*"):
        path.unlink()
    for path in store.directory.rglob(f"{altered.id}.*"):
        path.write_bytes(png(seed=3))
    with pytest.raises(NotFoundError, match="missing"):
        await store.load(alice.id, gone.id)
    with pytest.raises(NotFoundError, match="checksum"):
        await store.load(alice.id, altered.id)


async def test_list_and_delete(store: FileStore, alice: UserRecord) -> None:
    first = await store.save(alice.id, png(seed=1))
    second = await store.save(alice.id, png(seed=2))
    assert {f.id for f in await store.list_files(alice.id)} == {first.id, second.id}
    await store.delete(alice.id, first.id)
    assert [f.id for f in await store.list_files(alice.id)] == [second.id]
    assert not list(store.directory.rglob(f"{first.id}.*"))
    with pytest.raises(NotFoundError):
        await store.load(alice.id, first.id)


def test_directory_comes_from_the_environment(sf: SessionFactory, tmp_path: Path) -> None:
    store = FileStore(sf, env={ENV_FILES_DIR: str(tmp_path / "uploads")})
    assert store.directory == (tmp_path / "uploads").resolve()
    default = FileStore(sf, env={})
    assert default.directory.name == "files"
    assert "ctxstack" in str(default.directory)


def test_sniffing_needs_the_magic_bytes_not_just_a_prefix() -> None:
    assert sniff_image_type(b"RIFF\x00\x00\x00\x00WAVE") is None
    assert sniff_image_type(b"GIF88a") is None
    assert sniff_image_type(b"\x89PNG") is None
    assert sniff_image_type(os.urandom(0)) is None


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=64))
def test_only_32_lowercase_hex_ids_are_valid(candidate: str) -> None:
    expected = len(candidate) == 32 and all(c in "0123456789abcdef" for c in candidate)
    assert valid_file_id(candidate) is expected


async def test_a_failed_write_records_nothing_and_a_failed_record_leaves_no_file(
        sf: SessionFactory, tmp_path: Path, alice: UserRecord) -> None:
    """The disk refusing the bytes is a StorageError naming the directory and nothing is
    recorded; the database refusing the row (here: an owner that does not exist) is an
    error too, and the bytes already written are removed — no orphan file on disk."""
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("a file where the upload directory should be")
    broken = FileStore(sf, blocked / "files", max_bytes=4096)
    with pytest.raises(StorageError, match="not-a-directory"):
        await broken.save(alice.id, png(seed=4))
    assert await broken.list_files(alice.id) == []

    store = FileStore(sf, tmp_path / "files", max_bytes=4096)
    with pytest.raises(StorageError):
        await store.save(10**9, png(seed=5))
    assert [p for p in (tmp_path / "files").rglob("*") if p.is_file()] == []
    kept = await store.save(alice.id, png(seed=6))  # the store still works
    assert (await store.load(alice.id, kept.id)).data == png(seed=6)
