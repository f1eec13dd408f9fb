"""The live repository: what Triton serves, mirrored from the one people edit by hand.

Shipping a model is dropping a numbered folder into ``model_repository/<model>/``,
by any means: ``cp -r``, ``rsync`` with its temporary files, a slow network copy.
Triton's poll mode loads whatever it sees when it polls, and a Python version
folder seen without its ``model.py`` wedges it for good (measured: it then ignores
SIGTERM and loads nothing more). So Triton never sees the folder people edit:
``kyc serve`` runs it, in poll mode, over a *live* repository that only this module
writes, and only by atomic renames of complete, checked folders:

- a version folder (or a config, or a whole new model) is taken once its content
  has not changed for ``quiet_s`` (sizes, mtimes and ctimes of every file: ctime,
  which no copy tool can set, moves on every write) and holds no temporary file of
  a copy in progress (rsync's ``.name.XXXXXX``, ``*.part``, ``*.tmp``);
- it is checked exactly as ``kyc repo check`` checks it (``kyc_tools.repo.check``); a
  folder that fails is *refused*: it is logged with the reason, counted, shown by
  ``kyc repo status``, and looked at again when its content changes (fixed in
  place);
- a taken folder is copied into a staging folder next to the live repository (the
  same filesystem; never inside it, where Triton would see it), its Python files
  precompiled, synced, and renamed into place;
- the live ``config.pbtxt`` is the edited one with its ``version_policy`` replaced by
  the exact versions to serve (``specific``), computed from the edited policy over
  the versions taken. Triton 2.51 reloads neither an unchanged version nor one whose
  config differs only in ``version_policy`` (core's ``ConfigChangeRequiresReload``),
  loads new versions before it unloads old ones, and keeps the old ones when a new
  one fails to load. So a version that Triton itself refuses (a ``model.py`` that
  fails at import or ``initialize``) is dropped from the policy and the previous one
  keeps serving; deleting a version folder takes it out of the policy (rollback);
- a stateful model (``sequence_batching``: ``liveness_sequence``) keeps a version it
  moved away from in its policy while that version still holds open sessions
  (``kyc_liveness_sessions_live``), or for its longest session at most: clients pin
  the version their session started on, new sessions go to the newest;
- folders are added before the policy names them and removed after it stops
  naming them, so Triton never reads a policy naming a missing folder.

This module decides and writes files only; ``kyc_tools.operator.watcher`` runs it against
a server (the repository index, the session counts, the clock, the metrics).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import secrets
import shutil
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from google.protobuf import text_format

from kyc.pipeline.modelconfig import served_numbers
from kyc_tools.repo.check import (
    CONFIG,
    CheckedModel,
    Problem,
    check_ensemble,
    check_model,
    check_version,
    is_version_name,
)
from kyc_tools.repo.config import ConfigError, ModelConfig, load_config, parse_config
from kyc_tools.repo.publish import fsync_path, fsync_tree, precompile_python_models
from kyc_tools.repo.safe_copy import UnsafeEntryError, copy_tree

log = logging.getLogger(__name__)

QUIET_S = 2.0
# How long a copy tool's temporary file may look like one: rsync writes
# ".<name>.<6 random characters>" and renames it when the file is complete.
_RSYNC_TEMP = re.compile(r"^\..+\.[A-Za-z0-9]{6}$")
_TEMP_SUFFIXES = (".part", ".partial", ".tmp", ".crdownload", ".filepart")
_IGNORED = ("__pycache__",)
# A stateful model keeps a version it moved away from for at most its longest
# session: the largest of these parameters (seconds) and its sequence idle timeout.
_SESSION_PARAMETERS = ("max_duration_s", "idle_ttl_s")
PIN_SETTLE_S = 3.0


# -- what a folder looks like now -------------------------------------------------
@dataclass(frozen=True)
class Drop:
    """A folder of the edited repository as it is now."""

    signature: tuple  # (relative path, size, mtime_ns, ctime_ns) of every entry
    busy: str | None  # why it is still being written (a copy tool's temporary file)


def _ignored(name: str) -> bool:
    return name in _IGNORED or name.endswith(".pyc")


def scan(path: Path) -> Drop:
    """The signature of ``path`` (a file or a folder, recursively) and whether a copy
    into it is visibly in progress."""
    entries, busy = [], None
    paths = [path, *sorted(path.rglob("*"))] if path.is_dir() else [path]
    for entry in paths:
        rel = entry.relative_to(path) if entry != path else Path(".")
        if any(_ignored(part) for part in rel.parts):
            continue
        try:
            st = entry.lstat()
        except FileNotFoundError:  # removed while we looked: changed
            entries.append((str(rel), -1, 0, 0))
            continue
        entries.append((str(rel), st.st_size if entry.is_file() else 0, st.st_mtime_ns,
                        st.st_ctime_ns))
        name = entry.name
        if entry.is_file() and (_RSYNC_TEMP.match(name) or name.endswith(_TEMP_SUFFIXES)):
            busy = f"{rel} looks like a copy in progress"
    return Drop(tuple(entries), busy)


def _copy_ignore(_dir: str, names: list[str]) -> list[str]:
    return [n for n in names if n.startswith(".") or _ignored(n)]


# -- what was decided -----------------------------------------------------------
@dataclass(frozen=True)
class Event:
    """One thing the live repository did: taken, refused, removed, loaded..."""

    kind: str  # see KINDS
    model: str
    version: int | None = None  # None: the model's config, or the whole model
    reason: str = ""
    at: float = field(default_factory=time.time)
    after_s: float | None = None  # "loaded": seconds since the drop stopped changing

    def __str__(self) -> str:
        what = self.model if self.version is None else f"{self.model} version {self.version}"
        if self.version is None and self.kind in ("config", "config_refused"):
            what = f"{self.model}/{CONFIG}"
        text = f"{what}: {KINDS[self.kind]}"
        if self.after_s is not None:
            text += f" {self.after_s:.1f} s after the copy ended"
        return f"{text}: {self.reason}" if self.reason else text


KINDS = {
    "taken": "checked and put in the live repository",
    "refused": "refused by the check, not served",
    "load_refused": "refused by Triton at load, the previous version keeps serving",
    "loaded": "serving",
    "removed": "folder deleted, taken out of service (rollback)",
    "pinned": "kept loaded for its open sessions",
    "unpinned": "unloaded, its sessions are over",
    "config": "edited config taken",
    "config_refused": "edited config refused, the previous one stays",
    "model": "new model taken",
    "model_refused": "new model refused",
    "model_removed": "model folder deleted, model unloaded",
}
REFUSALS = ("refused", "load_refused", "config_refused", "model_refused")


@dataclass
class _Seen:
    """When a folder's signature last changed (monotonic), to know it is quiet."""

    signature: tuple
    since: float


@dataclass
class LiveModel:
    """A model in the live repository."""

    config: ModelConfig
    config_hash: str
    versions: dict[int, tuple] = field(default_factory=dict)  # taken -> source signature
    policy: list[int] = field(default_factory=list)  # named by the live config now
    pins: dict[int, float] = field(default_factory=dict)  # version -> pinned at (monotonic)
    load_failed: dict[int, tuple] = field(default_factory=dict)  # version -> signature
    loading: dict[int, float] = field(default_factory=dict)  # version -> named at (monotonic)
    quiet_at: dict[int, float] = field(default_factory=dict)  # version -> copy ended at
    config_changed_at: float | None = None  # an edited config taken, not written yet
    ready_since: float | None = None  # every served version READY since (monotonic)
    idle_since: dict[int, float] = field(default_factory=dict)  # pinned, no session since

    @property
    def stateful(self) -> bool:
        return self.config.HasField("sequence_batching")

    def session_bound_s(self) -> float:
        seq = self.config.sequence_batching
        bound = seq.max_sequence_idle_microseconds / 1e6 or 1.0
        for key in _SESSION_PARAMETERS:
            if key in self.config.parameters:
                with contextlib.suppress(ValueError):
                    bound = max(bound, float(self.config.parameters[key].string_value))
        return bound


def _hash_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def live_config_text(config: ModelConfig, versions: Iterable[int]) -> str:
    """The edited config with ``version_policy`` naming exactly ``versions``."""
    live = ModelConfig()
    live.CopyFrom(config)
    live.version_policy.Clear()
    live.version_policy.specific.versions.extend(sorted(versions))
    return text_format.MessageToString(live)


def _problems_text(problems: list[Problem]) -> str:
    return "; ".join(str(p) for p in problems)


class LiveRepository:
    """Mirrors ``source`` (edited by people) into ``live`` (read by Triton).

    ``staging`` must be on the same filesystem as ``live`` and outside it.
    """

    def __init__(self, source: Path, live: Path, staging: Path, *, quiet_s: float = QUIET_S,
                 clock=time.monotonic) -> None:
        self.source, self.live, self.staging = source, live, staging
        self.quiet_s, self.clock = quiet_s, clock
        self.models: dict[str, LiveModel] = {}
        self.refused: dict[tuple[str, int | None], tuple[tuple, Event]] = {}
        self.waiting: dict[tuple[str, int | None], str] = {}
        self._seen: dict[tuple[str, int | None], _Seen] = {}
        self._first = True
        self._last_states: Mapping[tuple[str, int], tuple[str, str]] = {}
        live.mkdir(parents=True, exist_ok=True)
        staging.mkdir(parents=True, exist_ok=True)

    # -- quiet ------------------------------------------------------------------
    def _quiet(self, key: tuple[str, int | None], drop: Drop, now: float) -> bool:
        """True once ``drop`` has not changed for ``quiet_s`` (at the first sync, what
        is there is taken as it is: a folder copied while the server was down is not
        being copied now, and a half one is refused, then looked at again when it
        changes)."""
        seen = self._seen.get(key)
        if seen is None or seen.signature != drop.signature:
            self._seen[key] = _Seen(drop.signature, now)
            if not self._first:
                self.waiting[key] = "being copied"
                return False
            seen = self._seen[key]
        if drop.busy:
            self.waiting[key] = drop.busy
            return False
        if not self._first and now - seen.since < self.quiet_s:
            self.waiting[key] = "being copied"
            return False
        self.waiting.pop(key, None)
        return True

    def _refuse(self, key: tuple[str, int | None], signature: tuple, event: Event) -> Event:
        self.refused[key] = (signature, event)
        return event

    def _is_refused(self, key: tuple[str, int | None], signature: tuple) -> bool:
        entry = self.refused.get(key)
        return entry is not None and entry[0] == signature

    # -- file operations ----------------------------------------------------------
    def _stage(self, name: str) -> Path:
        return self.staging / f"{name}-{secrets.token_hex(4)}"

    def _discard(self, path: Path) -> None:
        """Rename ``path`` out of the live repository (atomic), then delete it."""
        if not path.exists():
            return
        trash = self._stage("trash")
        os.rename(path, trash)
        shutil.rmtree(trash, ignore_errors=True)

    def _copy_out(self, src: Path, *parts: str) -> tuple[Path, Path]:
        """Copy ``src`` to ``<staging>/<token>/<source name>/<parts>``: what is checked
        and then served is this copy, never the folder that may still change. Returns
        the staged repository root (problems name paths as in the source) and the copy."""
        root = self._stage("copy") / self.source.name
        target = root.joinpath(*parts)
        target.parent.mkdir(parents=True)
        try:
            copy_tree(src, target, ignore=_copy_ignore)
        except UnsafeEntryError:
            self._drop_copy(root)
            raise
        return root, target

    def _drop_copy(self, root: Path) -> None:
        shutil.rmtree(root.parent, ignore_errors=True)

    def _put_version(self, name: str, version: int, staged: Path) -> None:
        precompile_python_models(staged)
        fsync_tree(staged)
        target = self.live / name / str(version)
        self._discard(target)  # changed in place: the new content replaces it
        os.rename(staged, target)
        fsync_path(target.parent)

    def _write_config(self, name: str, model: LiveModel, policy: list[int]) -> None:
        staged = self._stage(f"{name}-config")
        staged.write_text(live_config_text(model.config, policy), encoding="utf-8")
        fsync_path(staged)
        os.rename(staged, self.live / name / CONFIG)
        fsync_path(self.live / name)
        model.policy = sorted(policy)

    # -- the checks ---------------------------------------------------------------
    def _checked_models(self, replace: dict[str, CheckedModel] | None = None
                        ) -> dict[str, CheckedModel]:
        models = {n: CheckedModel(n, m.config, [str(v) for v in m.versions])
                  for n, m in self.models.items()}
        models.update(replace or {})
        return models

    def _ensemble_problems(self, models: dict[str, CheckedModel]) -> list[Problem]:
        """Every live ensemble (and any in ``models``) wired to what ``models`` holds."""
        problems = []
        for name, checked in models.items():
            if checked.config is not None and checked.config.platform == "ensemble":
                problems.extend(check_ensemble(self.source / name, checked.config, models,
                                               self.source))
        return problems

    # -- one pass ---------------------------------------------------------------
    def sync(self, states: Mapping[tuple[str, int], tuple[str, str]] | None = None,
             sessions: Mapping[tuple[str, int], float] | None = None,
             *, poll_s: float = 2.0) -> list[Event]:
        """Look at the edited repository once and bring the live one in line.

        ``states``: Triton's repository index, ``(model, version) -> (state, reason)``
        (None when the server does not answer). ``sessions``: open sessions per
        ``(model, version)`` of stateful models (None: unknown). ``poll_s``: how often
        Triton polls the live repository (a state read sooner may be the old one).
        """
        now = self.clock()
        events: list[Event] = []
        names = sorted(p.name for p in self.source.iterdir()
                       if p.is_dir() and not p.name.startswith(".")) if self.source.is_dir() else []
        for name in names:
            if name in self.models:
                events.extend(self._sync_model(name, now))
        events.extend(self._new_models([n for n in names if n not in self.models], now))
        for name in sorted(set(self.models) - set(names)):
            events.extend(self._remove_model(name))
        for name, model in self.models.items():
            if states is not None:
                events.extend(self._loads(name, model, states, now, poll_s))
            events.extend(self._apply_policy(name, model, states, sessions, now))
        if states is not None:
            self._last_states = dict(states)
        self._first = False
        for event in events:
            (log.warning if event.kind in REFUSALS else log.info)("%s", event)
        return events

    def _new_models(self, names: list[str], now: float) -> list[Event]:
        """New model folders; an ensemble is taken once the models it calls are, so
        the models go first and the rest is tried again while more get taken."""
        said: dict[str, list[Event]] = {}
        while names:
            before = len(self.models)
            for name in sorted(names, key=self._is_ensemble):
                result = self._new_model(name, now)
                if result or name in self.models:  # [] also means "refused as before"
                    said[name] = result
            names = [n for n in names if n not in self.models]
            if len(self.models) == before:
                break
        return [event for name in sorted(said) for event in said[name]]

    def _is_ensemble(self, name: str) -> bool:
        try:
            return load_config(self.source / name / CONFIG).platform == "ensemble"
        except (OSError, ConfigError):
            return False

    def _new_model(self, name: str, now: float) -> list[Event]:
        model_dir = self.source / name
        drop = scan(model_dir)
        key = (name, None)
        signature = (*drop.signature, tuple(sorted(self.models)))
        if self._is_refused(key, signature) or not self._quiet(key, drop, now):
            return []
        try:
            root, staged = self._copy_out(model_dir, name)
        except UnsafeEntryError as exc:  # the live copy is left as it is
            return [self._refuse(key, signature, Event("model_refused", name, reason=str(exc)))]
        try:
            if scan(model_dir).signature != drop.signature:  # written to while copied
                self._seen[key] = _Seen(scan(model_dir).signature, now)
                self.waiting[key] = "being copied"
                return []
            return self._take_model(name, key, signature, root, staged, now)
        finally:
            self._drop_copy(root)

    def _take_model(self, name: str, key: tuple[str, int | None], signature: tuple,
                    root: Path, staged: Path, now: float) -> list[Event]:
        """Check the staged copy of a new model; rename what passes into place."""
        checked, problems = check_model(staged, root=root, versions=[])
        config = checked.config
        if config is None or problems:
            return [self._refuse(key, signature, Event("model_refused", name,
                                                      reason=_problems_text(problems)))]
        present = {int(p.name): p for p in staged.iterdir()
                   if p.is_dir() and is_version_name(p.name)}
        served = set(served_numbers(config, present))
        events, good = [], {}
        for version, path in sorted(present.items()):
            found = check_version(config, path, root, against_config=version in served)
            version_signature = scan(self.source / name / str(version)).signature
            if found:
                events.append(self._refuse((name, version), version_signature, Event(
                    "refused", name, version, _problems_text(found))))
                shutil.rmtree(path)
            else:
                good[version] = version_signature
        if config.platform != "ensemble" and not good:
            return [*events, self._refuse(key, signature, Event(
                "model_refused", name, reason="no version folder passes the check"))]
        ensemble = self._ensemble_problems(
            self._checked_models({name: CheckedModel(name, config, [str(v) for v in good])}))
        if ensemble:
            return [*events, self._refuse(key, signature, Event(
                "model_refused", name, reason=_problems_text(ensemble)))]
        model = LiveModel(config, _hash_file(staged / CONFIG))
        for version, version_signature in sorted(good.items()):
            model.versions[version] = version_signature
            if not self._first:
                model.quiet_at[version] = self._seen[key].since
        policy = served_numbers(config, good)
        (staged / CONFIG).write_text(live_config_text(config, policy), encoding="utf-8")
        model.policy = policy
        model.loading = {v: now for v in policy}
        precompile_python_models(staged)
        fsync_tree(staged)
        os.rename(staged, self.live / name)
        fsync_path(self.live)
        self.models[name] = model
        self.refused.pop(key, None)
        if not self._first:
            events.append(Event("model", name, reason=f"versions {sorted(good)}"))
        return events

    def _remove_model(self, name: str) -> list[Event]:
        self._discard(self.live / name)
        del self.models[name]
        for key in [k for k in self.refused if k[0] == name]:
            del self.refused[key]
        return [Event("model_removed", name)]

    def _sync_model(self, name: str, now: float) -> list[Event]:
        """An edited config and the version folders dropped with it are judged together
        (a 512-d embedding's new version and the config that says 512 arrive as two
        files: each alone fits nothing), once every changed part is quiet."""
        model_dir, model = self.source / name, self.models[name]
        present = {int(p.name): p for p in model_dir.iterdir()
                   if p.is_dir() and is_version_name(p.name)} if model_dir.is_dir() else {}
        drops = {}
        for version, path in sorted(present.items()):
            drop = scan(path)
            if model.versions.get(version) != drop.signature and not self._is_refused(
                    (name, version), drop.signature):
                drops[version] = drop
        quiet = {v: d for v, d in drops.items() if self._quiet((name, v), d, now)}
        edit = self._config_edit(name, model, drops, now)
        if edit == "wait" or (edit is not None and len(quiet) < len(drops)):
            return self._removals(name, model, present, now)
        events: list[Event] = []
        staged: dict[int, tuple[Path, Path]] = {}
        try:
            for version, drop in quiet.items():
                try:
                    root, copy = self._copy_out(present[version], name, str(version))
                except UnsafeEntryError as exc:  # the served versions are left as they are
                    events.append(self._refuse((name, version), drop.signature, Event(
                        "refused", name, version, str(exc))))
                    continue
                staged[version] = (root, copy)
                written = scan(present[version]).signature
                if written != drop.signature:  # written to while copied
                    self._seen[(name, version)] = _Seen(written, now)
                    self.waiting[(name, version)] = "being copied"
                    del staged[version]
                    self._drop_copy(root)
            if edit is not None:
                events.extend(self._judge_config(name, model, edit, staged, drops, now))
            for version, (root, copy) in sorted(staged.items()):
                key = (name, version)
                problems = check_version(model.config, copy, root)
                if problems:
                    events.append(self._refuse(key, drops[version].signature, Event(
                        "refused", name, version, _problems_text(problems))))
                    continue
                self._put_version(name, version, copy)
                model.versions[version] = drops[version].signature
                model.load_failed.pop(version, None)
                model.quiet_at[version] = self._seen[key].since
                self.refused.pop(key, None)
                events.append(Event("taken", name, version))
        finally:
            for root, _ in staged.values():
                self._drop_copy(root)
        return events + self._removals(name, model, present, now)

    def _removals(self, name: str, model: LiveModel, present: dict[int, Path],
                  now: float) -> list[Event]:
        """Version folders deleted from the source: out of service (a rollback)."""
        events = []
        for version in sorted(set(model.versions) - set(present)):
            del model.versions[version]
            model.load_failed.pop(version, None)
            events.append(Event("removed", name, version))
            for back in served_numbers(model.config, set(model.versions) - set(model.load_failed)):
                if back not in model.policy:  # the rollback's version: timed from now
                    model.quiet_at[back] = now
        for table in (self._seen, self.refused):
            for key in [k for k in table if k[0] == name and k[1] is not None
                        and k[1] >= 0 and k[1] not in present]:
                del table[key]
                self.waiting.pop(key, None)
        return events

    def _config_edit(self, name: str, model: LiveModel, drops: dict[int, Drop], now: float):
        """The edited config to judge: None (unchanged, or refused as it is), "wait"
        (still being written), or (data, digest, signature)."""
        path = self.source / name / CONFIG
        try:
            data = path.read_bytes()  # read once: hashed, parsed and served the same
        except OSError:
            return None  # the whole folder is going: _remove_model, or it comes back
        digest = hashlib.sha256(data).hexdigest()
        if digest == model.config_hash:
            return None
        key = (name, -1)  # the config's own key
        # refused with these very version folders: judged again when one changes
        signature = (digest, tuple(sorted((v, d.signature) for v, d in drops.items())))
        if self._is_refused(key, signature):
            return None
        if not self._quiet(key, scan(path), now):
            return "wait"
        return data, digest, signature

    def _judge_config(self, name: str, model: LiveModel, edit: tuple,
                      staged: dict[int, tuple[Path, Path]], drops: dict[int, Drop],
                      now: float) -> list[Event]:
        """Take the edited config if it fits the versions it would serve, among those
        taken and those dropped with it, and the ensembles that call the model."""
        data, digest, signature = edit
        key = (name, -1)
        try:
            config = parse_config(data.decode("utf-8"))
        except (ConfigError, UnicodeDecodeError) as exc:
            return [self._refuse(key, signature, Event("config_refused", name,
                                                      reason=f"not a valid model config: {exc}"))]
        fitting = {v for v, (root, copy) in staged.items() if not check_version(config, copy, root)}
        served = set(served_numbers(config, set(model.versions) | fitting))
        problems: list[Problem] = []
        if config.name and config.name != name:
            problems.append(Problem(f"{name}/{CONFIG}", f"name '{config.name}' differs from "
                                    f"its folder '{name}'"))
        for v in sorted(set(model.versions) - set(staged)):
            problems.extend(check_version(config, self.live / name / str(v), self.live,
                                          against_config=v in served))
        versions = [str(v) for v in sorted(set(model.versions) | fitting)]
        problems.extend(self._ensemble_problems(self._checked_models(
            {name: CheckedModel(name, config, versions)})))
        if problems:
            return [self._refuse(key, signature, Event("config_refused", name,
                                                      reason=_problems_text(problems)))]
        model.config, model.config_hash = config, digest
        for version in model.load_failed:  # a new config: Triton may load them now
            self.refused.pop((name, version), None)
        model.load_failed.clear()
        self.refused.pop(key, None)
        model.config_changed_at = self._seen[key].since  # written by _apply_policy
        return [Event("config", name)]

    # -- Triton's answers ------------------------------------------------------------
    def _loads(self, name: str, model: LiveModel,
               states: Mapping[tuple[str, int], tuple[str, str]], now: float,
               poll_s: float) -> list[Event]:
        """Versions named for loading that Triton has loaded or refused since."""
        events = []
        for version, named_at in sorted(model.loading.items()):
            state, reason = states.get((name, version), ("", ""))
            fresh = state == "READY" and self._last_states.get((name, version), ("",))[0] != "READY"
            if now - named_at < poll_s + 1.0 and not fresh:
                continue  # Triton may not have polled since: what it says is older
            if state == "READY":
                del model.loading[version]
                if not self._first_load(model, version):
                    quiet = model.quiet_at.get(version)
                    events.append(Event("loaded", name, version,
                                        after_s=None if quiet is None else now - quiet))
            elif state == "UNAVAILABLE" and reason and reason != "unloaded":
                del model.loading[version]
                model.load_failed[version] = model.versions.get(version, ())
                event = Event("load_refused", name, version, reason=self._one_line(reason))
                events.append(self._refuse((name, version), model.load_failed[version], event))
        return events

    def _one_line(self, reason: str) -> str:
        """Triton's load error on one line, where it happened named in the source:
        its first line and the innermost frame of a Python traceback."""
        lines = [line.strip() for line in reason.splitlines() if line.strip()]
        text = lines[0] if lines else reason
        if "At:" in lines[1:]:
            frames = lines[lines.index("At:") + 1:]
            if frames:
                text += f" (at {frames[0]})"
        return text.replace(str(self.live), str(self.source))

    @staticmethod
    def _first_load(model: LiveModel, version: int) -> bool:
        return model.quiet_at.get(version) is None

    def _apply_policy(self, name: str, model: LiveModel,
                      states: Mapping[tuple[str, int], tuple[str, str]] | None,
                      sessions: Mapping[tuple[str, int], float] | None,
                      now: float) -> list[Event]:
        events = []
        candidates = set(model.versions) - set(model.load_failed)
        served = served_numbers(model.config, candidates)
        if not served:
            served = [v for v in model.policy if v in model.versions] or model.policy
        if model.stateful:
            events.extend(self._pins(name, model, served, states, sessions, now))
        policy = sorted(set(served) | set(model.pins))
        edited = model.config_changed_at
        if policy != model.policy or edited is not None:
            before = set(model.policy)
            self._write_config(name, model, policy)  # with the versions it names in place
            model.config_changed_at = None
            for v in policy:
                if v in served and (v not in before or edited is not None):
                    model.loading.setdefault(v, now)
                    if v in before and edited is not None:  # reloaded for the config
                        model.quiet_at[v] = edited
            for v in list(model.loading):
                if v not in policy:
                    del model.loading[v]
        for version_dir in (self.live / name).iterdir():
            if (is_version_name(version_dir.name) and int(version_dir.name) not in policy
                    and int(version_dir.name) not in model.versions):
                self._discard(version_dir)
        return events

    def _pins(self, name: str, model: LiveModel, served: list[int],
              states: Mapping[tuple[str, int], tuple[str, str]] | None,
              sessions: Mapping[tuple[str, int], float] | None, now: float) -> list[Event]:
        events = []
        for version in model.policy:
            if version not in served and version not in model.pins:
                ready = states is None or states.get((name, version), ("",))[0] == "READY"
                open_now = (sessions or {}).get((name, version))
                if ready and (open_now is None or open_now > 0):
                    model.pins[version] = now
                    events.append(Event("pinned", name, version,
                                        reason=f"{open_now:g} open sessions" if open_now else ""))
        all_ready = states is not None and all(
            states.get((name, v), ("",))[0] == "READY" for v in served)
        # From the moment the new versions are READY, a START goes to them; one routed to
        # an old version just before may still wait in its queue, not yet counted as a
        # session (measured in CI: the old version was unloaded under such a session).
        # So a pin ends only after the old version has had no open session and no
        # pending request for PIN_SETTLE_S since the new ones were READY.
        model.ready_since = (model.ready_since or now) if all_ready else None
        settled = model.ready_since is not None and now - model.ready_since >= PIN_SETTLE_S
        for version, since in list(model.pins.items()):
            if version in served:
                del model.pins[version]
                continue
            open_now = (sessions or {}).get((name, version))
            if open_now != 0:
                model.idle_since.pop(version, None)
            idle = open_now == 0 and now - model.idle_since.setdefault(version, now) >= PIN_SETTLE_S
            over = now - since >= model.session_bound_s()
            if settled and (idle or over):
                del model.pins[version]
                model.idle_since.pop(version, None)
                events.append(Event("unpinned", name, version,
                                    reason="no open session" if idle else
                                    f"held {model.session_bound_s():g} s, its longest session"))
        return events

    # -- what is going on ---------------------------------------------------------------
    def status(self) -> dict:
        """What is live, waiting and refused, per model (names, versions, reasons)."""
        out: dict[str, dict] = {}
        for name in sorted(set(self.models) | {k[0] for k in self.refused}
                           | {k[0] for k in self.waiting}):
            model = self.models.get(name)
            out[name] = {
                "live": model is not None,
                "versions": sorted(model.versions) if model else [],
                "policy": model.policy if model else [],
                "pinned": sorted(model.pins) if model else [],
                "loading": sorted(model.loading) if model else [],
                "load_refused": sorted(model.load_failed) if model else [],
                "waiting": {("config" if k[1] == -1 else "model" if k[1] is None else str(k[1])):
                            why for k, why in self.waiting.items() if k[0] == name},
                "refused": [asdict(e) | {"text": str(e)} for k, (_, e) in self.refused.items()
                            if k[0] == name],
            }
        return out
