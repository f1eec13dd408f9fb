"""kyc_tools.repo.safe_copy: folders dropped into the repository are copied as folders and
regular files only; links, fifos, devices and sockets are refused, never followed."""

from __future__ import annotations

import os
import socket
import stat

import pytest

from kyc_tools.repo.safe_copy import UnsafeEntryError, check_plain_name, copy_file, copy_tree


def test_folders_and_regular_files_are_copied_with_their_bits_and_times(tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "model.onnx").write_bytes(b"weights")
    (src / "run.sh").write_text("#!/bin/sh\n")
    (src / "run.sh").chmod(0o4755)  # set-uid: never carried over
    copy_tree(src, tmp_path / "dest")
    assert (tmp_path / "dest" / "sub" / "model.onnx").read_bytes() == b"weights"
    assert stat.S_IMODE((tmp_path / "dest" / "run.sh").stat().st_mode) == 0o755
    assert (tmp_path / "dest" / "run.sh").stat().st_mtime_ns == (src / "run.sh").stat().st_mtime_ns


def _socket(folder):
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(folder / "sock"))  # the file stays once closed


def _device(folder):
    if os.geteuid() != 0:
        pytest.skip("only root can make a device file")
    os.mknod(folder / "null", stat.S_IFCHR | 0o600, os.makedev(1, 3))


@pytest.mark.parametrize(("place", "kind"), [
    (lambda d: (d / "etc").symlink_to("/etc"), "symbolic link"),
    (lambda d: (d / "passwd").symlink_to("/etc/passwd"), "symbolic link"),
    (lambda d: os.mkfifo(d / "pipe"), "fifo"),
    (_socket, "socket"),
    (_device, "character device"),
], ids=["link to a folder", "link to a file", "fifo", "socket", "device"])
def test_a_link_or_a_special_file_anywhere_in_the_tree_is_refused_by_name(tmp_path, place, kind):
    src = tmp_path / "src"
    (src / "1").mkdir(parents=True)
    (src / "1" / "model.py").write_text("X = 1\n")
    place(src / "1")
    with pytest.raises(UnsafeEntryError, match=f"src/1/.*refused, a {kind}"):
        copy_tree(src, tmp_path / "dest")


def test_a_source_that_is_itself_a_link_is_refused(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(UnsafeEntryError, match="not a plain folder"):
        copy_tree(tmp_path / "link", tmp_path / "dest")
    with pytest.raises(UnsafeEntryError, match="not a plain file"):
        copy_file(tmp_path / "link", tmp_path / "one")


def test_ignored_names_are_not_looked_at(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / ".hidden").symlink_to("/etc")
    copy_tree(src, tmp_path / "dest", ignore=lambda _d, names: [n for n in names if n[0] == "."])
    assert list((tmp_path / "dest").iterdir()) == []


@pytest.mark.parametrize("name", ["", ".", "..", "../x", "/etc", "a/b"])
def test_a_name_that_is_a_path_is_refused(name):
    with pytest.raises(UnsafeEntryError, match="one plain name"):
        check_plain_name(name)
    assert check_plain_name("face_embedding") == "face_embedding"
