"""kyc.files: a small file put in place whole or not at all, never over another."""

from __future__ import annotations

import os

import pytest

from kyc.files import put_new_file


def test_a_new_file_is_put_whole_for_its_owner_alone_and_the_first_writer_wins(tmp_path):
    path = tmp_path / "key"
    assert put_new_file(path, b"first\n") is True
    assert put_new_file(path, b"second\n") is False
    assert path.read_bytes() == b"first\n" and os.stat(path).st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["key"]  # nothing left aside


def test_a_write_that_fails_raises_its_own_error_and_leaves_nothing_behind(tmp_path,
                                                                             monkeypatch):
    def full(fd, mode):
        os.close(fd)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fdopen", full)
    with pytest.raises(OSError, match="No space left"):
        put_new_file(tmp_path / "key", b"data")
    assert list(tmp_path.iterdir()) == []
