"""kyc.decision.ledger at its edges: a spent token stays spent to the end of its life, the
folder holds only what this server wrote and reads nothing through a link, and a Redis
ledger reaches the database and password its URL names (make mutate found each of these
unheld by the other tests: docs/mutation-testing.md)."""

from __future__ import annotations

import hashlib
import os
import secrets
import time

import pytest

from kyc.decision import ledger as ledger_module
from kyc.decision.ledger import (
    ENV_LEDGER,
    KEY_PREFIX,
    FolderLedger,
    LedgerError,
    LedgerUnavailableError,
    MemoryLedger,
    RedisLedger,
    RespConnection,
    Spend,
    ledger_from_environ,
)
from kyc_testing import free_port


def _entry(token_id: str) -> str:
    """The file name of a token's entry in a folder ledger."""
    return hashlib.sha256(token_id.encode()).hexdigest()[:32]


@pytest.mark.parametrize("expires_at", [100.4, 100.6, 101.0])
def test_a_token_spent_in_a_folder_stays_spent_to_the_last_instant_of_its_life(tmp_path,
                                                                               expires_at):
    """The entry's expiry is kept rounded up: rounded to the nearest second, a sweep in
    the token's last half second freed it to be spent by another verification."""
    now = [50.0]
    ledger = FolderLedger(tmp_path / "ledger", clock=lambda: now[0])
    assert ledger.spend("t1", 50.0, expires_at, "a") is Spend.FIRST
    now[0] = expires_at - 0.05  # still valid (a token expires at now >= expires_at)
    assert ledger.spend("t2", 50.0, 300.0, "a") is Spend.FIRST  # a sweep has run
    assert ledger.spend("t1", 50.0, expires_at, "b") is Spend.TAKEN


def test_the_memory_ledger_forgets_a_token_at_its_expiry_and_not_an_instant_later():
    now = [100.0]
    ledger = MemoryLedger(lambda: now[0])
    assert ledger.spend("t1", 100.0, 150.0, "a") is Spend.FIRST
    now[0] = 149.0  # a sweep, at most one a second: the next may come at 150.0
    assert ledger.spend("t1", 100.0, 150.0, "b") is Spend.TAKEN
    now[0] = 150.0  # the token's own expiry refuses it from here: its entry goes
    assert ledger.spend("t1", 100.0, 400.0, "b") is Spend.FIRST


def test_a_sweep_leaves_files_being_written_and_sweeps_junk_it_cannot_read(tmp_path):
    folder = tmp_path / "ledger"
    FolderLedger(folder, clock=lambda: 1000.0)
    (folder / ".being-written.0a1b2c").write_text("1 holder")  # another process's _put
    (folder / "junk").write_bytes(b"\xff\xfe not ours")
    FolderLedger(folder, clock=lambda: 1000.0).spend("t1", 1000.0, 1100.0, "a")
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [".being-written.0a1b2c", "began", _entry("t1")])


def test_a_sweep_goes_on_past_a_file_another_process_swept_first(tmp_path, monkeypatch):
    now = [1000.0]
    ledger = FolderLedger(tmp_path / "ledger", clock=lambda: now[0])
    ledger.spend("t1", 1000.0, 1010.0, "a")
    read = FolderLedger._read

    def read_then_lose(self, name):  # the other process unlinks it right after this read
        text = read(self, name)
        if name != "began":
            os.unlink(self.folder / name)
        return text

    monkeypatch.setattr(FolderLedger, "_read", read_then_lose)
    now[0] = 2000.0
    assert ledger.spend("t2", 1000.0, 3000.0, "a") is Spend.FIRST


def test_an_entry_planted_as_a_link_is_neither_read_nor_written_through(tmp_path, monkeypatch):
    ledger = FolderLedger(tmp_path / "ledger", clock=lambda: 1000.0)
    outside = tmp_path / "outside"
    outside.write_text("9999999999 a")
    (ledger.folder / _entry("t1")).symlink_to(outside)
    with pytest.raises(OSError):  # read through, it would say "spent by a": AGAIN
        ledger.spend("t1", 1000.0, 1100.0, "a")
    import kyc.files  # where an entry is written aside before it is linked in

    monkeypatch.setattr(kyc.files.secrets, "token_hex", lambda n: "fixed")
    (ledger.folder / f".{_entry('t2')}.fixed").symlink_to(outside)
    with pytest.raises(OSError):
        ledger.spend("t2", 1000.0, 1100.0, "a")
    assert outside.read_text() == "9999999999 a"


def test_the_folder_is_made_for_its_owner_alone_before_any_chmod(tmp_path, monkeypatch):
    """/dev/shm is every local user's: the folder is never open to them, not even in the
    instant between its mkdir and its chmod."""
    monkeypatch.setattr(os, "chmod", lambda path, mode: None)
    previous = os.umask(0)  # nothing taken away but what mkdir's own mode takes
    try:
        FolderLedger(tmp_path / "ledger")
    finally:
        os.umask(previous)
    assert (tmp_path / "ledger").stat().st_mode & 0o777 == 0o700


def test_a_folder_of_another_user_is_refused_even_when_only_its_owner_may_enter(tmp_path,
                                                                               monkeypatch):
    folder = tmp_path / "ledger"
    folder.mkdir(mode=0o700)
    uid = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: uid + 1)
    with pytest.raises(LedgerError, match="refused"):
        FolderLedger(folder)


def test_in_a_server_the_ledger_is_the_folder_named_after_the_server(tmp_path, monkeypatch):
    shm_folder = ledger_module.shm_folder
    monkeypatch.setattr(ledger_module, "shm_folder",
                        lambda pid: shm_folder(pid, tmp_path))
    ledger = ledger_from_environ({}, in_server=True)
    assert isinstance(ledger, FolderLedger)
    assert ledger.folder == tmp_path / f"kyc_{os.getppid()}_ledger"


def test_without_an_environment_given_the_ledger_is_the_one_the_process_environment_names(
        monkeypatch):
    monkeypatch.delenv(ENV_LEDGER, raising=False)
    assert isinstance(ledger_from_environ(None), MemoryLedger)
    monkeypatch.setenv(ENV_LEDGER, "http://not-redis")
    with pytest.raises(ValueError, match="redis://"):
        ledger_from_environ(None)


def test_a_redis_url_gives_the_host_port_password_and_database():
    named = RespConnection("redis://:s3cret@ledger.internal:6390/3")
    assert (named.address, named.password, named.db) == (("ledger.internal", 6390), "s3cret", 3)
    plain = RespConnection("redis://ledger.internal")
    assert (plain.address, plain.password, plain.db) == (("ledger.internal", 6379), None, 0)


def test_a_decision_waits_at_most_a_second_for_a_redis_that_does_not_answer():
    assert RespConnection("redis://ledger.internal").timeout_s == 1.0
    closed = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens: refused at once
    assert RedisLedger(closed).connection.timeout_s == 1.0


def test_a_redis_ledger_keeps_its_tokens_in_the_database_its_url_names(redis_url):
    assert redis_url.endswith("/0")
    token = secrets.token_hex(16)
    assert RedisLedger(redis_url[:-1] + "5").spend(token, time.time(), 4e9, "h") is Spend.FIRST
    in_5, in_0 = RespConnection(redis_url[:-1] + "5"), RespConnection(redis_url)
    assert (in_5.command("GET", KEY_PREFIX + token), in_0.command("GET", KEY_PREFIX + token)) \
        == ("h", None)
    in_5.close()
    in_0.close()


def test_a_redis_ledger_with_a_password_authenticates_before_its_first_command(redis_url):
    admin = RespConnection(redis_url)
    admin.command("CONFIG", "SET", "requirepass", "s3cret")
    try:
        with_password = redis_url.replace("redis://", "redis://:s3cret@")
        assert RedisLedger(with_password).spend(secrets.token_hex(16), time.time(), 4e9, "") \
            is Spend.FIRST
        # refused by Redis (NOAUTH, WRONGPASS): unavailable, as a ledger that does not answer
        for url in (redis_url, redis_url.replace("redis://", "redis://:wrong@")):
            with pytest.raises(LedgerUnavailableError, match="did not answer"):
                RedisLedger(url).spend(secrets.token_hex(16), time.time(), 4e9, "")
    finally:
        admin.command("CONFIG", "SET", "requirepass", "")
        admin.close()
