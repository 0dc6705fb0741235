"""aic.stack.run_lock and module_utils/run_lock on a real directory: take, wait, stale takeover, release, races."""

from __future__ import annotations

import datetime
import json
import multiprocessing
import os
import time

import pytest

from ansible_collections.aic.stack.plugins.module_utils import run_lock
from ansible_collections.aic.stack.plugins.modules import run_lock as run_lock_module

OLD = "2026-01-01T00:00:00+00:00"


def _owner(lock):
    return json.loads((lock / "owner").read_text())


def _stale_lock(lock, owner="bob@controller-2", token="old-run"):
    lock.mkdir()
    (lock / "owner").write_text(json.dumps({"owner": owner, "token": token, "since": OLD, "pid": 1, "host": "x"}))


def _tree(root):
    return sorted(
        (str(p.relative_to(root)), p.stat().st_mtime_ns, p.read_bytes() if p.is_file() else None)
        for p in root.rglob("*")
    )


def test_take_then_release(tmp_path):
    lock = tmp_path / "rollout.lock"
    taken = run_lock.take(str(lock), "alice@controller", token="t1", wait=0)
    assert taken["action"] == "taken" and taken["held"] is True and taken["taken_over"] is None
    assert (taken["owner"], taken["token"]) == ("alice@controller", "t1")
    record = _owner(lock)
    assert record["owner"] == "alice@controller" and record["token"] == "t1"
    assert record["pid"] == os.getpid() and record["host"]
    since = datetime.datetime.fromisoformat(record["since"])
    assert since.tzinfo is not None and abs((datetime.datetime.now(datetime.UTC) - since).total_seconds()) < 5
    assert taken["since"] == record["since"]
    # Only the owner file is in the lock (the temporary file was renamed), the guard file beside it.
    assert sorted(p.name for p in lock.iterdir()) == ["owner"]
    assert (tmp_path / "rollout.lock.guard").is_file()

    released = run_lock.release(str(lock), "t1")
    assert released["released"] is True and released["action"] == "released" and released["owner"] == "alice@controller"
    assert not lock.exists()
    assert run_lock.release(str(lock), "t1")["action"] == "absent"


def test_a_token_is_made_when_none_is_given(tmp_path):
    lock = tmp_path / "rollout.lock"
    taken = run_lock.take(str(lock), "alice")
    assert taken["token"] and _owner(lock)["token"] == taken["token"]
    # Taking it again with the same token is this run's own lock: kept as it is.
    again = run_lock.take(str(lock), "alice", token=taken["token"])
    assert again["action"] == "kept" and again["since"] == taken["since"]


def test_a_second_taker_waits_then_fails_naming_the_holder(tmp_path):
    lock = tmp_path / "rollout.lock"
    first = run_lock.take(str(lock), "alice@controller", token="t1")
    start = time.monotonic()
    with pytest.raises(run_lock.LockHeld) as excinfo:
        run_lock.take(str(lock), "bob@controller-2", token="t2", wait=1, poll=0.2)
    took = time.monotonic() - start
    assert 0.9 <= took < 3
    assert str(excinfo.value) == (
        f"another rollout holds {lock}: alice@controller since {first['since']} run t1 - waited 1 s"
    )
    assert excinfo.value.holder["token"] == "t1" and excinfo.value.waited >= 0.9
    assert _owner(lock)["token"] == "t1"


def test_a_waiter_gets_the_lock_once_it_is_released(tmp_path):
    lock = tmp_path / "rollout.lock"
    run_lock.take(str(lock), "alice", token="t1")
    ctx = multiprocessing.get_context("fork")
    releaser = ctx.Process(target=_release_later, args=(str(lock), "t1", 0.5))
    releaser.start()
    try:
        taken = run_lock.take(str(lock), "bob", token="t2", wait=10, poll=0.1)
    finally:
        releaser.join(10)
    assert taken["action"] == "taken" and 0.3 <= taken["waited"] < 5
    assert _owner(lock)["token"] == "t2"


def _release_later(path, token, delay):
    time.sleep(delay)
    run_lock.release(path, token)


def test_a_release_with_another_token_leaves_the_lock(tmp_path):
    lock = tmp_path / "rollout.lock"
    run_lock.take(str(lock), "alice@controller", token="t1")
    result = run_lock.release(str(lock), "t2")
    assert result["released"] is False and result["action"] == "not_ours"
    assert (result["owner"], result["token"]) == ("alice@controller", "t1")
    assert _owner(lock)["token"] == "t1"


def test_a_stale_lock_is_taken_over_and_reported(tmp_path):
    lock = tmp_path / "rollout.lock"
    _stale_lock(lock)
    taken = run_lock.take(str(lock), "alice", token="t1", wait=0, stale_after=3600)
    assert taken["action"] == "taken_over" and taken["held"] is True
    assert taken["taken_over"]["owner"] == "bob@controller-2" and taken["taken_over"]["token"] == "old-run"
    assert taken["taken_over"]["since"] == OLD and taken["taken_over"]["age"] > 3600
    assert _owner(lock)["token"] == "t1"


def test_a_fresh_lock_is_not_stale(tmp_path):
    lock = tmp_path / "rollout.lock"
    run_lock.take(str(lock), "alice", token="t1")
    with pytest.raises(run_lock.LockHeld):
        run_lock.take(str(lock), "bob", token="t2", wait=0, stale_after=3600)


def test_the_shell_versions_owner_line_is_read_and_judged_by_mtime(tmp_path):
    # What tests/integration/test_rollback.py writes (the shell version's format): its 'since' is days old, but the
    # directory was made now, so the lock is held, not stale, and the message names the holder.
    lock = tmp_path / "rollout.lock"
    lock.mkdir()
    (lock / "owner").write_text("alice@controller-2 since 2026-11-29T10:00:00 run 42\n")
    with pytest.raises(run_lock.LockHeld) as excinfo:
        run_lock.take(str(lock), "bob", token="t2", wait=0, stale_after=7200)
    assert str(excinfo.value) == (
        f"another rollout holds {lock}: alice@controller-2 since 2026-11-29T10:00:00 run 42 - waited 0 s"
    )
    assert run_lock.release(str(lock), "t2")["released"] is False
    assert (lock / "owner").read_text().startswith("alice@")
    # Old by mtime: taken over.
    os.utime(lock, (time.time() - 9000, time.time() - 9000))
    taken = run_lock.take(str(lock), "bob", token="t2", wait=0, stale_after=7200)
    assert taken["action"] == "taken_over" and taken["taken_over"]["token"] == "42"


def test_a_lock_without_owner_file_is_judged_by_mtime(tmp_path):
    lock = tmp_path / "rollout.lock"
    lock.mkdir()
    with pytest.raises(run_lock.LockHeld) as excinfo:
        run_lock.take(str(lock), "bob", token="t2", wait=0, stale_after=60)
    assert "another rollout holds" in str(excinfo.value) and "unknown since" in str(excinfo.value)
    os.utime(lock, (time.time() - 120, time.time() - 120))
    assert run_lock.take(str(lock), "bob", token="t2", wait=0, stale_after=60)["action"] == "taken_over"


def _race(path, token, barrier, results):
    barrier.wait()
    try:
        taken = run_lock.take(path, "racer-" + token, token=token, wait=0.5, stale_after=3600, poll=0.05)
        results.put((token, taken["action"]))
    except run_lock.LockHeld as exc:
        results.put((token, "held:" + (exc.holder["token"] or "")))


@pytest.mark.parametrize("round_", range(5))
def test_racers_on_a_stale_lock_exactly_one_holds_it(tmp_path, round_):
    lock = tmp_path / "rollout.lock"
    _stale_lock(lock)
    ctx = multiprocessing.get_context("fork")
    racers = 4
    barrier = ctx.Barrier(racers)
    results = ctx.Queue()
    procs = [ctx.Process(target=_race, args=(str(lock), f"r{i}", barrier, results)) for i in range(racers)]
    for proc in procs:
        proc.start()
    outcome = dict(results.get(timeout=20) for _dummy in procs)
    for proc in procs:
        proc.join(10)
        assert proc.exitcode == 0
    winners = [token for token, action in outcome.items() if action == "taken_over"]
    assert len(winners) == 1, outcome
    # Every loser saw the winner's fresh lock, never the stale one, and the lock on disk is the winner's.
    assert {action for token, action in outcome.items() if token not in winners} == {"held:" + winners[0]}
    assert _owner(lock)["token"] == winners[0]


def test_check_mode_touches_nothing(tmp_path):
    lock = tmp_path / "rollout.lock"
    would = run_lock.take(str(lock), "alice", token="t1", check_mode=True)
    assert would["action"] == "would_take" and would["held"] is False
    assert list(tmp_path.iterdir()) == []  # not even the guard file

    _stale_lock(lock)
    before = _tree(tmp_path)
    would = run_lock.take(str(lock), "alice", token="t1", stale_after=3600, check_mode=True)
    assert would["action"] == "would_take_over" and would["taken_over"]["token"] == "old-run"
    with pytest.raises(run_lock.LockHeld):
        run_lock.take(str(lock), "alice", token="t1", stale_after=10**9, check_mode=True)
    released = run_lock.release(str(lock), "old-run", check_mode=True)
    assert released["released"] is True
    assert _tree(tmp_path) == before


# -- the module, through AnsibleModule -----------------------------------------------------------------------------


def test_module_take_and_release(tmp_path, run_module, warned):
    lock = tmp_path / "rollout.lock"
    result = run_module(run_lock_module, {"path": str(lock), "owner": "alice@controller", "wait": 0})
    assert result.rc == 0, result.get("msg")
    assert result["changed"] is False and result["held"] is True and result["released"] is False
    assert result["owner"] == "alice@controller" and result["token"] and result["taken_over"] is None
    assert isinstance(result["waited"], float)
    token = result["token"]
    assert _owner(lock)["token"] == token

    other = run_module(run_lock_module, {"path": str(lock), "state": "absent", "token": "someone-else"})
    assert other.rc == 0 and other["released"] is False and other["changed"] is False
    assert other["owner"] == "alice@controller" and other["token"] == token
    assert any("held by alice@controller" in w for w in warned), warned
    assert lock.is_dir()

    released = run_module(run_lock_module, {"path": str(lock), "state": "absent", "token": token})
    assert released.rc == 0 and released["released"] is True and released["changed"] is False
    assert not lock.exists()


def test_module_fails_naming_the_holder(tmp_path, run_module):
    lock = tmp_path / "rollout.lock"
    first = run_module(run_lock_module, {"path": str(lock), "owner": "alice@controller-2", "token": "42"})
    assert first.rc == 0
    result = run_module(run_lock_module, {"path": str(lock), "owner": "bob", "wait": 1, "poll": 0.2})
    assert result.failed and result.rc == 1 and result["changed"] is False
    assert result["msg"] == (
        f"another rollout holds {lock}: alice@controller-2 since {first['since']} run 42 - waited 1 s"
    )
    assert result["held"] is False and result["token"] == "42" and result["waited"] >= 0.9


def test_module_takes_over_a_stale_lock_with_a_warning(tmp_path, run_module, warned):
    lock = tmp_path / "rollout.lock"
    _stale_lock(lock)
    result = run_module(run_lock_module, {"path": str(lock), "owner": "alice", "stale_after": 60})
    assert result.rc == 0, result.get("msg")
    assert result["taken_over"]["owner"] == "bob@controller-2" and result["changed"] is False
    assert any("took over a stale lock" in w and "bob@controller-2" in w for w in warned), warned


def test_module_check_mode_touches_nothing(tmp_path, run_module):
    lock = tmp_path / "rollout.lock"
    result = run_module(run_lock_module, {"path": str(lock), "owner": "alice"}, check_mode=True)
    assert result.rc == 0 and result["changed"] is False and result["held"] is False
    assert result["msg"].startswith("would take")
    assert list(tmp_path.iterdir()) == []


def test_module_absent_needs_a_token(tmp_path, run_module):
    result = run_module(run_lock_module, {"path": str(tmp_path / "rollout.lock"), "state": "absent"})
    assert result.failed and "token" in result["msg"]
