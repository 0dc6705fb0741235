"""aic.stack.l2_dirs and module_utils/l2_dirs on real directories: creation, idempotence, check mode, owner and mode,
paths blocked for an unprivileged deploy user (run in a forked child that drops to ``nobody``), stale slot cleanup,
and input errors that name the option."""

from __future__ import annotations

import contextlib
import grp
import io
import json
import multiprocessing
import os
import pwd
import shutil
import stat
import tempfile
import traceback

import pytest

from ansible_collections.aic.stack.plugins.module_utils import l2_dirs
from ansible_collections.aic.stack.plugins.modules import l2_dirs as l2_dirs_module

NOBODY = pwd.getpwnam("nobody")
NOGROUP = grp.getgrgid(NOBODY.pw_gid)
ROOT_GROUP = grp.getgrgid(0).gr_name

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the tests chown and drop to nobody")


@pytest.fixture
def tree():
    """A tree an unprivileged user can see: ``<base>/mnt`` (root's, 0755: a mount point) and ``<base>/home``
    (nobody's, 0755: the deploy user's home). ``tmp_path`` lies under a 0700 directory, so it is made in /tmp."""
    base = tempfile.mkdtemp(prefix="l2-dirs-")
    os.chmod(base, 0o755)
    os.mkdir(os.path.join(base, "mnt"), 0o755)
    os.mkdir(os.path.join(base, "home"), 0o755)
    os.chmod(os.path.join(base, "mnt"), 0o755)
    os.chmod(os.path.join(base, "home"), 0o755)
    os.chown(os.path.join(base, "home"), NOBODY.pw_uid, NOBODY.pw_gid)
    try:
        yield base
    finally:
        shutil.rmtree(base)


def _owner_group_mode(path):
    st = os.stat(path)
    return pwd.getpwuid(st.st_uid).pw_name, grp.getgrgid(st.st_gid).gr_name, format(stat.S_IMODE(st.st_mode), "04o")


def _snapshot(root):
    """Every path under root with its owner, group and mode."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            out[path] = _owner_group_mode(path)
    return out


# -- running as an unprivileged user -----------------------------------------------------------------------------------


def _child(queue, func, args):
    try:
        os.setgroups([])
        os.setgid(NOBODY.pw_gid)
        os.setuid(NOBODY.pw_uid)
        queue.put(("ok", func(*args)))
    except BaseException:  # noqa: BLE001 - report anything to the parent
        queue.put(("error", traceback.format_exc()))


def as_nobody(func, *args):
    """``func(*args)`` in a forked child running as nobody:nogroup; its return value (or the child's traceback)."""
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(queue, func, args))
    proc.start()
    status, value = queue.get(timeout=60)
    proc.join(10)
    if status != "ok":
        pytest.fail(f"the child running as nobody failed:\n{value}")
    return value


def _run_module_here(args, check_mode=False):
    """The module's main() in this process: (exit status, the JSON it printed)."""
    from ansible.module_utils.testing import patch_module_args

    args = dict(args)
    if check_mode:
        args["_ansible_check_mode"] = True
    out = io.StringIO()
    with patch_module_args(args), contextlib.redirect_stdout(out):
        try:
            l2_dirs_module.main()
            rc = None
        except SystemExit as exc:
            rc = exc.code
    return rc, json.loads(out.getvalue())


# -- as root: creation, idempotence, check mode, owner and mode --------------------------------------------------------


@needs_root
def test_module_creates_the_tree_with_owner_group_and_mode(tree, run_module):
    l2, slab = f"{tree}/mnt/aic/nvme/lmcache", f"{tree}/mnt/aic/slab"
    result = run_module(
        l2_dirs_module, {"paths": [l2, slab], "owner": "nobody", "group": NOGROUP.gr_name, "mode": "0750"}
    )
    assert result.rc == 0, result.get("msg")
    assert result["changed"] is True
    assert result["created"] == [f"{tree}/mnt/aic", f"{tree}/mnt/aic/nvme", l2, slab]
    assert result["result"] == {l2: {"created_by": "user"}, slab: {"created_by": "user"}}
    assert result["blocked"] == [] and result["blocked_dirs"] == []
    assert (result["user"], result["owner"], result["group"], result["mode"]) == (
        "root",
        "nobody",
        NOGROUP.gr_name,
        "0750",
    )
    # Intermediate directories get the leaf's owner, group and mode; the existing parent is left alone.
    for path in result["created"]:
        assert _owner_group_mode(path) == ("nobody", NOGROUP.gr_name, "0750"), path
    assert _owner_group_mode(f"{tree}/mnt") == ("root", ROOT_GROUP, "0755")
    assert "diff" not in result


@needs_root
def test_module_second_call_changes_nothing(tree, run_module):
    args = {"paths": [f"{tree}/mnt/aic/l2", f"{tree}/mnt/aic/slab"], "mode": "0700"}
    assert run_module(l2_dirs_module, args)["changed"] is True
    before = _snapshot(tree)
    again = run_module(l2_dirs_module, args)
    assert again.rc == 0 and again["changed"] is False
    assert again["created"] == [] and again["fixed"] == []
    assert {v["created_by"] for v in again["result"].values()} == {"existing"}
    assert again["msg"] == "all directories in place"
    assert _snapshot(tree) == before


@needs_root
def test_module_check_mode_creates_nothing_and_predicts(tree, run_module):
    l2 = f"{tree}/mnt/aic/l2"
    before = _snapshot(tree)
    result = run_module(l2_dirs_module, {"paths": [l2], "owner": "nobody", "_ansible_diff": True}, check_mode=True)
    assert result.rc == 0 and result["changed"] is True
    assert result["created"] == [f"{tree}/mnt/aic", l2]
    assert result["result"] == {l2: {"created_by": "user"}}
    assert result["msg"].startswith("would create ")
    assert _snapshot(tree) == before
    assert result["diff"]["before"] == {f"{tree}/mnt/aic": {"state": "absent"}, l2: {"state": "absent"}}
    wanted = {"state": "directory", "owner": "nobody", "group": ROOT_GROUP, "mode": "0750"}
    assert result["diff"]["after"] == {f"{tree}/mnt/aic": wanted, l2: wanted}


@needs_root
def test_module_fixes_the_owner_and_mode_of_an_existing_directory(tree, run_module):
    l2 = f"{tree}/mnt/l2"
    os.mkdir(l2, 0o700)
    os.chmod(l2, 0o700)
    args = {"paths": [l2], "owner": "nobody", "group": NOGROUP.gr_name, "mode": "0750", "_ansible_diff": True}
    checked = run_module(l2_dirs_module, args, check_mode=True)
    assert checked["changed"] is True and checked["fixed"] == [l2]
    assert _owner_group_mode(l2) == ("root", ROOT_GROUP, "0700")
    result = run_module(l2_dirs_module, args)
    assert result["changed"] is True and result["fixed"] == [l2] and result["created"] == []
    assert result["result"] == {l2: {"created_by": "existing"}}
    assert _owner_group_mode(l2) == ("nobody", NOGROUP.gr_name, "0750")
    assert result["diff"]["before"][l2] == {"state": "directory", "owner": "root", "group": ROOT_GROUP, "mode": "0700"}
    assert result["diff"]["after"][l2] == {
        "state": "directory",
        "owner": "nobody",
        "group": NOGROUP.gr_name,
        "mode": "0750",
    }
    assert run_module(l2_dirs_module, args)["changed"] is False


@needs_root
def test_owner_and_group_as_ids(tree):
    l2 = f"{tree}/mnt/l2"
    result = l2_dirs.ensure([l2], owner=str(NOBODY.pw_uid), group=str(NOBODY.pw_gid), mode="750")
    assert (result["owner"], result["group"]) == ("nobody", NOGROUP.gr_name)
    assert _owner_group_mode(l2) == ("nobody", NOGROUP.gr_name, "0750")
    # An id the node has no name for is applied as it is (a container's runtime uid).
    free = 54321
    assert not any(u.pw_uid == free for u in pwd.getpwall())
    result = l2_dirs.ensure([l2], owner=str(free), group=str(free))
    assert (result["owner"], result["group"]) == (str(free), str(free)) and result["fixed"] == [l2]
    assert (os.stat(l2).st_uid, os.stat(l2).st_gid) == (free, free)


@needs_root
def test_a_path_listed_twice_or_inside_another_is_created_once(tree):
    l2, sub = f"{tree}/mnt/aic/l2", f"{tree}/mnt/aic"
    result = l2_dirs.ensure([l2, sub, l2], check_mode=True)
    assert result["created"] == [sub, l2]
    assert result["result"] == {l2: {"created_by": "user"}, sub: {"created_by": "user"}}


# -- as an unprivileged deploy user (nobody) ---------------------------------------------------------------------------


@needs_root
def test_blocked_under_a_root_owned_parent_then_created_as_root(tree):
    mnt, home = f"{tree}/mnt", f"{tree}/home"
    l2, slab, mine = f"{mnt}/aic/nvme/lmcache", f"{mnt}/aic/slab", f"{home}/slab/l2"
    args = {"paths": [l2, slab, mine], "mode": "0750"}

    rc, checked = as_nobody(_run_module_here, args, True)
    assert rc == 0 and checked["changed"] is True
    assert checked["blocked"] == [
        {"path": f"{mnt}/aic", "why": f"parent {mnt} owned by root, mode 0755", "dirs": [l2, slab]}
    ]
    assert not os.path.exists(f"{home}/slab")

    rc, as_user = as_nobody(_run_module_here, args)
    assert rc == 0, as_user.get("msg")
    assert as_user["changed"] is True and as_user["user"] == "nobody"
    assert (as_user["owner"], as_user["group"]) == ("nobody", NOGROUP.gr_name)
    assert as_user["blocked"] == checked["blocked"]
    assert as_user["blocked_dirs"] == [l2, slab]
    assert as_user["result"] == {
        l2: {"created_by": "blocked"},
        slab: {"created_by": "blocked"},
        mine: {"created_by": "user"},
    }
    assert as_user["created"] == [f"{home}/slab", mine]
    assert "blocked for nobody: " in as_user["msg"]
    assert os.listdir(mnt) == []  # nothing created under the mount point
    assert _owner_group_mode(mine) == ("nobody", NOGROUP.gr_name, "0750")

    # The role's second task: root creates exactly the blocked ones, for the deploy user.
    as_root = l2_dirs.ensure(
        as_user["blocked_dirs"], owner=as_user["owner"], group=as_user["group"], mode="0750", run_as="sudo"
    )
    assert as_root["changed"] is True and as_root["blocked"] == []
    assert as_root["result"] == {l2: {"created_by": "sudo"}, slab: {"created_by": "sudo"}}
    for path in (f"{mnt}/aic", f"{mnt}/aic/nvme", l2, slab):
        assert _owner_group_mode(path) == ("nobody", NOGROUP.gr_name, "0750"), path
    assert _owner_group_mode(mnt) == ("root", ROOT_GROUP, "0755")

    rc, again = as_nobody(_run_module_here, args)
    assert rc == 0 and again["changed"] is False and again["blocked"] == []
    assert {v["created_by"] for v in again["result"].values()} == {"existing"}


@needs_root
def test_blocked_when_the_owner_is_another_user(tree):
    runtime = f"{tree}/home/runtime/l2"
    checked = as_nobody(l2_dirs.ensure, [runtime], "root", "", "0750", "user", False, None, True)
    assert checked["created"] == [f"{tree}/home/runtime"] and checked["blocked_dirs"] == [runtime]
    assert not os.path.exists(f"{tree}/home/runtime")

    outcome = as_nobody(l2_dirs.ensure, [runtime], "root", "", "0750")
    assert outcome["blocked"] == [
        {
            "path": runtime,
            "why": f"nobody may not hand it to root:{NOGROUP.gr_name} (chown needs root)",
            "dirs": [runtime],
        }
    ]
    assert outcome["result"] == {runtime: {"created_by": "blocked"}}
    # Its parent is the deploy user's way to it: created for the user itself, only the directory is left to root.
    assert outcome["changed"] is True and outcome["created"] == [f"{tree}/home/runtime"]
    assert _owner_group_mode(f"{tree}/home/runtime") == ("nobody", NOGROUP.gr_name, "0750")
    assert not os.path.exists(runtime)

    as_root = l2_dirs.ensure([runtime], owner="root", group=NOGROUP.gr_name, run_as="sudo")
    assert as_root["created"] == [runtime] and as_root["result"] == {runtime: {"created_by": "sudo"}}
    assert _owner_group_mode(runtime) == ("root", NOGROUP.gr_name, "0750")
    # The deploy user still sees it, in place: no root needed on the next run.
    again = as_nobody(l2_dirs.ensure, [runtime], "root", "", "0750")
    assert again["changed"] is False and again["blocked"] == []
    assert again["result"] == {runtime: {"created_by": "existing"}}


@needs_root
def test_blocked_when_the_group_is_not_the_users(tree):
    runtime = f"{tree}/home/l2"
    outcome = as_nobody(l2_dirs.ensure, [runtime], "", ROOT_GROUP, "0750")
    assert outcome["blocked_dirs"] == [runtime] and outcome["created"] == []
    assert outcome["changed"] is False and not os.path.exists(runtime)


@needs_root
def test_blocked_behind_a_directory_the_user_cannot_search(tree):
    secret = f"{tree}/mnt/secret"
    os.mkdir(secret, 0o700)
    os.chmod(secret, 0o700)
    os.makedirs(f"{secret}/aic/l2")  # there, but out of sight
    outcome = as_nobody(l2_dirs.ensure, [f"{secret}/aic/l2"])
    assert outcome["blocked"] == [
        {"path": f"{secret}/aic", "why": f"parent {secret} owned by root, mode 0700", "dirs": [f"{secret}/aic/l2"]}
    ]
    # Root sees it is there.
    as_root = l2_dirs.ensure([f"{secret}/aic/l2"], owner="nobody", group=NOGROUP.gr_name, run_as="sudo")
    assert as_root["result"] == {f"{secret}/aic/l2": {"created_by": "existing"}}
    assert as_root["fixed"] == [f"{secret}/aic/l2"]


@needs_root
def test_an_existing_directory_the_user_may_not_fix_is_blocked(tree):
    l2 = f"{tree}/mnt/l2"
    os.mkdir(l2, 0o755)
    os.chmod(l2, 0o755)
    outcome = as_nobody(l2_dirs.ensure, [l2], "", "", "0750")
    assert outcome["blocked"] == [
        {
            "path": l2,
            "why": f"owned by root:{ROOT_GROUP}, mode 0755; nobody may not change it to nobody:{NOGROUP.gr_name}, "
            "mode 0750",
            "dirs": [l2],
        }
    ]
    assert outcome["changed"] is False and _owner_group_mode(l2) == ("root", ROOT_GROUP, "0755")


@needs_root
def test_run_as_sudo_needs_root(tree):
    rc, result = as_nobody(_run_module_here, {"paths": [f"{tree}/home/l2"], "run_as": "sudo"})
    assert rc == 1 and result["failed"] is True and result["option"] == "run_as"
    assert result["msg"].startswith("run_as: sudo: the module must run as root")
    assert not os.path.exists(f"{tree}/home/l2")


# -- stale slot files ----------------------------------------------------------------------------------------------------


def _slots(directory):
    os.makedirs(directory, exist_ok=True)
    for name in ("a.bin", "b.bin", "keep.txt", ".hidden.bin"):
        with open(os.path.join(directory, name), "w") as handle:
            handle.write("slot\n")
    os.mkdir(os.path.join(directory, "sub.bin"))
    os.symlink("keep.txt", os.path.join(directory, "link.bin"))


@needs_root
def test_stale_slots_are_counted_and_removed(tree, run_module):
    l2, slab, fresh = f"{tree}/mnt/l2", f"{tree}/mnt/slab", f"{tree}/mnt/fresh"
    for directory in (l2, slab):
        _slots(directory)
        os.chmod(directory, 0o750)
    args = {"paths": [l2, slab, fresh], "clean_stale_slots": True, "stale_slot_dirs": [l2, fresh]}

    checked = run_module(l2_dirs_module, args, check_mode=True)
    assert checked["stale_slots_removed"] == 2 and checked["stale_slots"] == [f"{l2}/a.bin", f"{l2}/b.bin"]
    assert os.path.exists(f"{l2}/a.bin")

    result = run_module(l2_dirs_module, args)
    assert result.rc == 0 and result["changed"] is True
    assert result["result"] == {
        l2: {"created_by": "existing", "stale_slots_removed": 2},
        slab: {"created_by": "existing"},  # not among stale_slot_dirs: left alone
        fresh: {"created_by": "user", "stale_slots_removed": 0},
    }
    assert result["stale_slots_removed"] == 2 and "remove 2 stale slot file(s)" in result["msg"]
    assert sorted(os.listdir(l2)) == [".hidden.bin", "keep.txt", "link.bin", "sub.bin"]
    assert "a.bin" in os.listdir(slab)

    again = run_module(l2_dirs_module, args)
    assert again["changed"] is False and again["stale_slots_removed"] == 0
    assert again["result"][l2] == {"created_by": "existing", "stale_slots_removed": 0}


@needs_root
def test_the_first_path_is_cleaned_by_default(tree):
    l2, slab = f"{tree}/mnt/l2", f"{tree}/mnt/slab"
    for directory in (l2, slab):
        _slots(directory)
        os.chmod(directory, 0o750)
    result = l2_dirs.ensure([l2, slab], clean_stale_slots=True)
    assert result["result"] == {
        l2: {"created_by": "existing", "stale_slots_removed": 2},
        slab: {"created_by": "existing"},
    }
    # Without clean_stale_slots nothing is counted.
    assert l2_dirs.ensure([slab])["result"] == {slab: {"created_by": "existing"}}


@needs_root
def test_slots_the_user_may_not_remove_are_blocked(tree):
    l2, empty = f"{tree}/mnt/l2", f"{tree}/mnt/empty"
    _slots(l2)
    os.mkdir(empty)
    for directory in (l2, empty):
        os.chmod(directory, 0o755)
    # Root's directories, as root wants them (owner, group and mode): only the slots are out of nobody's reach.
    args = ([l2, empty], "root", ROOT_GROUP, "0755", "user", True, [l2, empty])
    outcome = as_nobody(l2_dirs.ensure, *args)
    assert outcome["blocked"] == [
        {"path": l2, "why": "owned by root, mode 0755; nobody may not remove its stale slot files", "dirs": [l2]}
    ]
    assert outcome["result"] == {
        l2: {"created_by": "blocked"},
        empty: {"created_by": "existing", "stale_slots_removed": 0},  # no slots: nothing to ask root for
    }
    assert os.path.exists(f"{l2}/a.bin")
    as_root = l2_dirs.ensure([l2], "root", ROOT_GROUP, "0755", "sudo", True, [l2])
    assert as_root["result"] == {l2: {"created_by": "existing", "stale_slots_removed": 2}}


# -- errors ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "option"),
    [
        ({"paths": []}, "paths"),
        ({"paths": ["relative/l2"]}, "paths"),
        ({"paths": ["/mnt/l2/"]}, "paths"),
        ({"paths": ["/mnt//l2"]}, "paths"),
        ({"paths": ["/mnt/../l2"]}, "paths"),
        ({"paths": ["/mnt/./l2"]}, "paths"),
        ({"paths": ["/"]}, "paths"),
        ({"paths": ["/mnt/l2"], "stale_slot_dirs": ["/mnt/other"]}, "stale_slot_dirs"),
        ({"paths": ["/mnt/l2"], "stale_slot_dirs": ["rel"]}, "stale_slot_dirs"),
        ({"paths": ["/mnt/l2"], "mode": "rwxr-x---"}, "mode"),
        ({"paths": ["/mnt/l2"], "mode": "08"}, "mode"),
        ({"paths": ["/mnt/l2"], "mode": 0o17777}, "mode"),
        ({"paths": ["/mnt/l2"], "owner": "no-such-user-l2"}, "owner"),
        ({"paths": ["/mnt/l2"], "group": "no-such-group-l2"}, "group"),
    ],
)
def test_bad_input_fails_naming_the_option(args, option, run_module, tmp_path):
    result = run_module(l2_dirs_module, args)
    assert result.failed and result.rc == 1 and result["changed"] is False
    assert result["msg"].startswith(option + ": "), result["msg"]
    assert result["option"] == option
    assert not os.path.exists("/mnt/l2")


def test_the_path_error_lists_what_was_given(run_module):
    result = run_module(l2_dirs_module, {"paths": ["/ok", "rel"]})
    assert result["msg"] == (
        "paths: expected a non-empty list of normalized absolute paths (starting with /, no trailing /, no empty, . or "
        ".. component); got ['/ok', 'rel'], not normalized: ['rel']"
    )


def test_mode_accepts_octal_strings_and_ints():
    assert l2_dirs.parse_mode("0750") == l2_dirs.parse_mode("750") == l2_dirs.parse_mode(0o750) == 0o750
    assert l2_dirs.parse_mode("2770") == 0o2770


def test_a_file_in_the_way_fails(tmp_path, run_module):
    (tmp_path / "mnt").write_text("not a directory\n")
    result = run_module(l2_dirs_module, {"paths": [f"{tmp_path}/mnt/l2"]})
    assert result.failed and result["msg"] == f"{tmp_path}/mnt exists and is not a directory"
    result = run_module(l2_dirs_module, {"paths": [f"{tmp_path}/mnt"]})
    assert result.failed and result["msg"] == f"{tmp_path}/mnt exists and is not a directory"
