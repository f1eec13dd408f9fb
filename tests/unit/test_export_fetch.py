"""Downloading pinned archives with pip, checking sha256, reading members."""

from __future__ import annotations

import hashlib
import itertools
import sys
from pathlib import Path

import pytest

from kyc_export import synthetic
from kyc_tools.assets import fetch
from kyc_tools.assets.errors import ChecksumError, FetchError
from kyc_tools.assets.manifest import ArchiveSource, Member, parse_manifest

MEMBER = "kyc_fixture_pkg/model.bin"
CONTENT = b"not really a model"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def local_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A find-links folder with one tiny wheel; pip is isolated from every real index."""
    links = tmp_path / "links"
    links.mkdir()
    synthetic.build_wheel(links, "kyc-fixture-pkg", "1.0", {MEMBER: CONTENT})
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    monkeypatch.setenv("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    return links


def _source(links: Path, sha256: str | None = None, version: str = "1.0") -> ArchiveSource:
    wheel = links / "kyc_fixture_pkg-1.0-py3-none-any.whl"
    return ArchiveSource(
        package="kyc-fixture-pkg",
        version=version,
        kind="wheel",
        filename=wheel.name,
        sha256=sha256 or _sha(wheel.read_bytes()),
    )


def test_download_fetches_the_pinned_wheel_with_pip_into_the_cache(local_index, tmp_path):
    source = _source(local_index)

    path = fetch.download(source, tmp_path / "cache")

    assert path == tmp_path / "cache" / "archives" / source.filename
    assert fetch.sha256_file(path) == source.sha256
    assert fetch.read_member(path, MEMBER) == CONTENT


def test_download_rejects_archive_with_wrong_sha256(local_index, tmp_path):
    source = _source(local_index, sha256="0" * 64)

    with pytest.raises(ChecksumError, match=r"kyc-fixture-pkg==1\.0: downloaded .* pins 0000"):
        fetch.download(source, tmp_path / "cache")

    leftovers = list((tmp_path / "cache" / "archives").rglob("*"))
    assert leftovers == []  # a rejected file never lands in the cache


def test_download_reuses_a_cached_archive_without_running_pip(local_index, tmp_path, monkeypatch):
    source = _source(local_index)
    fetch.download(source, tmp_path / "cache")

    def no_pip(*args, **kwargs):
        raise AssertionError("pip should not run")

    monkeypatch.setattr(fetch, "_run_pip", no_pip)
    assert fetch.download(source, tmp_path / "cache").is_file()


def test_download_replaces_a_cached_archive_whose_sha256_is_wrong(local_index, tmp_path):
    source = _source(local_index)
    stale = tmp_path / "cache" / "archives" / source.filename
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"truncated")

    path = fetch.download(source, tmp_path / "cache")

    assert fetch.sha256_file(path) == source.sha256


def test_download_reports_a_pip_failure_in_one_clear_error(local_index, tmp_path):
    source = _source(local_index, version="9.9")

    with pytest.raises(FetchError, match=r"pip download kyc-fixture-pkg==9\.9 failed \(exit"):
        fetch.download(source, tmp_path / "cache")


def test_pip_command_asks_for_wheels_or_sdists_only_and_no_dependencies(tmp_path):
    wheel = ArchiveSource("pkg", "1.0", "wheel", "pkg-1.0-py3-none-any.whl", "0" * 64)
    sdist = ArchiveSource("pkg", "1.0", "sdist", "pkg-1.0.tar.gz", "0" * 64)

    cmd = fetch.pip_download_command(wheel, tmp_path)
    assert cmd[:4] == [sys.executable, "-m", "pip", "download"]
    assert "--no-deps" in cmd and "--only-binary=:all:" in cmd
    assert cmd[-1] == "pkg==1.0" and cmd[cmd.index("-d") + 1] == str(tmp_path)
    assert "--no-binary=:all:" in fetch.pip_download_command(sdist, tmp_path)
    assert "--python-version" not in cmd  # a pure wheel: whatever Python runs pip


def test_pip_checks_the_pinned_sha256_before_it_prepares_an_sdist(tmp_path):
    """An sdist's metadata is read by running its build backend: pip must compare the
    archive with the pin first (--require-hashes), not leave it to us afterwards."""
    sdist = ArchiveSource("pkg", "1.0", "sdist", "pkg-1.0.tar.gz", "ab" * 32)
    pinned = fetch.pinned_requirement(sdist, tmp_path / "pinned.txt")
    assert pinned.read_text() == f"pkg==1.0 --hash=sha256:{'ab' * 32}\n"
    cmd = fetch.pip_download_command(sdist, tmp_path / "out", pinned)
    assert "--require-hashes" in cmd and cmd[-2:] == ["-r", str(pinned)]
    assert "pkg==1.0" not in cmd


def test_a_wheel_built_for_one_python_is_asked_for_that_python_whatever_runs_pip(tmp_path):
    """The image builds on Python 3.10; mediapipe's pinned wheel is CPython 3.11's."""
    built = ArchiveSource("pkg", "1.0", "wheel", "pkg-1.0-cp311-cp311-x.whl", "0" * 64,
                          python="3.11", platform="manylinux2014_x86_64")
    cmd = fetch.pip_download_command(built, tmp_path)
    flags = dict(itertools.pairwise(cmd))
    assert flags["--python-version"] == "3.11" and flags["--abi"] == "cp311"
    assert flags["--implementation"] == "cp" and flags["--platform"] == "manylinux2014_x86_64"
    assert "--only-binary=:all:" in cmd  # pip refuses --platform without it


def test_read_member_reads_from_a_zip_archive(tmp_path):
    wheel = synthetic.build_wheel(tmp_path, "pkg", "1.0", {"pkg/a.txt": b"A", "pkg/b.txt": b"B"})

    assert fetch.read_member(wheel, "pkg/b.txt") == b"B"


def test_read_member_reads_from_a_tar_gz_archive(tmp_path):
    sdist = synthetic.build_tar_gz(tmp_path / "pkg-1.0.tar.gz", {"pkg-1.0/tests/x.jpg": b"JPEG"})

    assert fetch.read_member(sdist, "pkg-1.0/tests/x.jpg") == b"JPEG"


def test_read_member_names_the_archive_and_member_that_are_missing(tmp_path):
    wheel = synthetic.build_wheel(tmp_path, "pkg", "1.0", {"pkg/a.txt": b"A"})
    sdist = synthetic.build_tar_gz(tmp_path / "pkg-1.0.tar.gz", {"pkg-1.0/a": b"A"})

    with pytest.raises(FetchError, match=r"pkg-1.0-py3-none-any.whl has no member 'pkg/zzz'"):
        fetch.read_member(wheel, "pkg/zzz")
    with pytest.raises(FetchError, match=r"pkg-1.0.tar.gz has no member 'pkg-1.0/zzz'"):
        fetch.read_member(sdist, "pkg-1.0/zzz")


def test_read_member_rejects_a_file_that_is_no_archive(tmp_path):
    junk = tmp_path / "junk.whl"
    junk.write_bytes(b"plain bytes")
    with pytest.raises(FetchError, match="neither a zip"):
        fetch.read_member(junk, "x")


def test_read_verified_member_rejects_a_member_with_wrong_sha256(tmp_path):
    wheel = synthetic.build_wheel(tmp_path, "pkg", "1.0", {"pkg/a.txt": b"A"})

    assert fetch.read_verified_member(wheel, Member("a", "pkg/a.txt", _sha(b"A"))) == b"A"
    with pytest.raises(ChecksumError, match=r"pkg/a\.txt has sha256"):
        fetch.read_verified_member(wheel, Member("a", "pkg/a.txt", _sha(b"B")))


def test_default_cache_dir_follows_kyc_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("KYC_CACHE_DIR", str(tmp_path / "c"))
    assert fetch.default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("KYC_CACHE_DIR")
    assert fetch.default_cache_dir() == Path.home() / ".cache" / "kyc"


def test_fetch_test_photos_extracts_pinned_files_and_reuses_them(tmp_path, monkeypatch):
    files = {"pkg-1.0/tests/fixtures/a.jpg": b"JPEG-A", "pkg-1.0/tests/fixtures/CREDITS.md": b"C"}
    sdist = synthetic.build_tar_gz(tmp_path / "pkg-1.0.tar.gz", files)
    manifest = parse_manifest(
        {
            "models": {},
            "test_data": {
                "test_photos": {
                    "license": "per file",
                    "source": {
                        "package": "pkg",
                        "version": "1.0",
                        "kind": "sdist",
                        "filename": sdist.name,
                        "sha256": _sha(sdist.read_bytes()),
                    },
                    "members": {
                        "a": {"path": "pkg-1.0/tests/fixtures/a.jpg", "sha256": _sha(b"JPEG-A")},
                        "CREDITS": {
                            "path": "pkg-1.0/tests/fixtures/CREDITS.md",
                            "sha256": _sha(b"C"),
                        },
                    },
                }
            },
        }
    )
    cache = tmp_path / "cache"
    (cache / "archives").mkdir(parents=True)
    sdist.rename(cache / "archives" / sdist.name)  # already downloaded: no pip needed

    photos = fetch.fetch_test_photos(cache, manifest)

    assert photos["a"] == cache / "photos" / "pkg-1.0" / "a.jpg"
    assert photos["a"].read_bytes() == b"JPEG-A"
    assert photos["CREDITS"].name == "CREDITS.md"

    monkeypatch.setattr(fetch, "download", lambda *a, **k: pytest.fail("should reuse files"))
    assert fetch.fetch_test_photos(cache, manifest) == photos


TREE = {"pkg/faces/s1/1.pgm": b"P5 a", "pkg/faces/s1/2.pgm": b"P5 b", "pkg/faces/s2/1.pgm": b"P5 c",
        "pkg/faces/README": b"not a face", "pkg/other/1.pgm": b"elsewhere"}


def _tree_manifest(source: ArchiveSource, files: int, digest: str):
    entry = {"license": "x", "source": source.__dict__, "members": {},
             "tree": {"path": "pkg/faces", "suffix": ".pgm", "files": files, "sha256": digest}}
    return parse_manifest({"models": {}, "test_data": {"faces": entry}})


@pytest.mark.parametrize("archive", ["wheel", "tar"])
def test_a_tree_is_extracted_with_its_paths_and_checked_whole(tmp_path, archive):
    path = (synthetic.build_wheel(tmp_path, "pkg", "1.0", TREE) if archive == "wheel" else
            synthetic.build_tar_gz(tmp_path / "pkg-1.0.tar.gz", TREE))
    from kyc_tools.assets.manifest import Tree, tree_digest

    wanted = {k[len("pkg/faces/"):]: v for k, v in TREE.items() if k.startswith("pkg/faces/")
              and k.endswith(".pgm")}
    tree = Tree("pkg/faces", ".pgm", 3, tree_digest(wanted))
    assert fetch.read_tree(path, tree) == wanted
    for wrong in (Tree("pkg/faces", ".pgm", 4, tree.sha256),
                  Tree("pkg/faces", ".pgm", 3, "0" * 64)):
        with pytest.raises(ChecksumError, match="but the manifest pins"):
            fetch.read_tree(path, wrong)


def test_fetch_test_tree_extracts_once_and_reuses_the_folder(local_index, tmp_path, monkeypatch):
    from kyc_tools.assets.manifest import tree_digest

    synthetic.build_wheel(local_index, "kyc-fixture-pkg", "1.0", TREE)
    wanted = {k[len("pkg/faces/"):]: v for k, v in TREE.items() if k.startswith("pkg/faces/")
              and k.endswith(".pgm")}
    manifest = _tree_manifest(_source(local_index), 3, tree_digest(wanted))
    folder = fetch.fetch_test_tree("faces", tmp_path / "cache", manifest)
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*.pgm")) == sorted(wanted)
    assert (folder / "s2" / "1.pgm").read_bytes() == b"P5 c"
    monkeypatch.setattr(fetch, "download", lambda *a, **k: pytest.fail("downloaded again"))
    assert fetch.fetch_test_tree("faces", tmp_path / "cache", manifest) == folder
