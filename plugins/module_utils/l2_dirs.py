# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Create the L2 / slab directories as the deploy user, and say exactly which ones need root and why.

:func:`ensure` is one pass over the requested directories, run either as the deploy user (``run_as="user"``) or as
root through privilege escalation (``run_as="sudo"``):

- As the deploy user, a directory is created (with its missing parents) when the user can: its first missing
  component lies in a directory the user can write and search, and the directory can be handed to the owner and
  group (an unprivileged user may only keep files for itself, and give them to a group it belongs to). Otherwise
  nothing is created for it and it is *blocked*: ``{path, why, dirs}``, ``path`` being what cannot be created
  (the first missing component, or the directory itself) and ``why`` what the user saw ("parent /mnt/nvme0 owned by
  root, mode 0755"). An existing directory whose owner, group or mode the user may not fix, and one whose stale
  slot files the user may not remove, is blocked too. When only the hand-over is denied, the user still creates the
  missing parents, for itself (it cannot give them away, and they are its way to the directory), and leaves only the
  directory itself to root.
- As root, every requested directory is created or fixed; nothing is blocked.

The deploy user sees the file system as it is: a directory behind one it cannot search reads as missing, and the
directory it cannot search is the parent named in ``why``.

Directories created here get the owner, group and mode, intermediate ones included (but for the case above) (created first with mode 0700,
then handed over leaf first, so a mode without write permission does not stop the deeper ones). An existing
directory gets them when it differs (only the requested directory, not its existing parents). Stale NIXL POSIX slot
files (``*.bin``, regular, not hidden, top level only) are removed from the listed directories that existed before.

Standard library only: the module that calls this runs on the managed node's Python.
"""

from __future__ import annotations

import contextlib
import errno
import grp
import os
import pwd
import re
import stat

# A normalized absolute path: no trailing slash, no empty, "." or ".." component, not "/" itself.
NORMALIZED_ABSOLUTE = re.compile(r"^(/(?!\.\.?(/|$))[^/]+)+$")
SLOT_SUFFIX = ".bin"
RUN_AS = ("user", "sudo")


class InputError(ValueError):
    """An option value the module refuses; the message starts with the option's name."""

    def __init__(self, option, message):
        self.option = option
        super().__init__(f"{option}: {message}")


class StateError(Exception):
    """The file system is in a state no privilege fixes (a file where a directory belongs, a read-only mount)."""


# -- inputs ------------------------------------------------------------------------------------------------------------


def check_paths(value, option="paths", allow_empty=False):
    """``value`` as a list of unique normalized absolute paths (order kept), or :class:`InputError` naming ``option``."""
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise InputError(option, f"expected a list of normalized absolute paths, got {value!r}")
    bad = [p for p in value if not isinstance(p, str) or not NORMALIZED_ABSOLUTE.match(p)]
    if bad or (not value and not allow_empty):
        raise InputError(
            option,
            "expected a non-empty list of normalized absolute paths (starting with /, no trailing /, no empty, . or .. "
            f"component); got {list(value)!r}" + (f", not normalized: {bad!r}" if bad else ""),
        )
    return list(dict.fromkeys(value))


def parse_mode(value, option="mode"):
    """A mode as an int: an octal string (``"0750"``, ``"750"``) or an int (already the value, as YAML reads 0750)."""
    if isinstance(value, bool):
        raise InputError(option, f"expected an octal mode such as '0750', got {value!r}")
    if isinstance(value, int):
        mode = value
    elif isinstance(value, str) and re.fullmatch(r"0?o?[0-7]{1,4}", value.strip()):
        mode = int(value.strip().replace("o", ""), 8)
    else:
        raise InputError(option, f"expected an octal mode such as '0750', got {value!r}")
    if not 0 <= mode <= 0o7777:
        raise InputError(option, f"expected an octal mode between 0000 and 7777, got {value!r}")
    return mode


def mode_text(mode):
    return format(mode & 0o7777, "04o")


def user_name(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def group_name(gid):
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def resolve_owner(value, option="owner"):
    """``(uid, name)`` of a user name or uid; empty means the running user."""
    value = "" if value is None else str(value).strip()
    if not value:
        uid = os.geteuid()
        return uid, user_name(uid)
    if value.isdigit():
        return int(value), user_name(int(value))
    try:
        return pwd.getpwnam(value).pw_uid, value
    except KeyError:
        raise InputError(option, f"no user {value!r} on this node (give a user name or a uid)")


def resolve_group(value, option="group"):
    """``(gid, name)`` of a group name or gid; empty means the running user's primary group."""
    value = "" if value is None else str(value).strip()
    if not value:
        gid = os.getegid()
        return gid, group_name(gid)
    if value.isdigit():
        return int(value), group_name(int(value))
    try:
        return grp.getgrnam(value).gr_gid, value
    except KeyError:
        raise InputError(option, f"no group {value!r} on this node (give a group name or a gid)")


# -- the pass ----------------------------------------------------------------------------------------------------------


def _components(path):
    """``/a/b/c`` -> ``["/a", "/a/b", "/a/b/c"]``."""
    parts = path.split("/")[1:]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def _parent(path):
    return os.path.dirname(path) or "/"


class _Pass:
    def __init__(self, uid, gid, owner, group, mode, check_mode):
        self.uid, self.gid, self.owner, self.group, self.mode = uid, gid, owner, group, mode
        self.check_mode = check_mode
        self.euid = os.geteuid()
        self.privileged = self.euid == 0
        self.user = user_name(self.euid)
        self.groups = set(os.getgroups()) | {os.getegid()}
        self.created = []  # directories created (would be, in check mode), in order, intermediate ones included
        self.changed_attrs = []  # existing requested directories whose owner, group or mode was (would be) fixed
        self.before = {}  # path -> state before, for --diff
        self.after = {}
        self._planned = set()  # created in this pass (in check mode: would be)

    # What the running user sees: a stat result, None (missing) or "hidden" (behind a directory it cannot search).
    def _look(self, path):
        if path in self._planned:
            return "planned"
        try:
            return os.stat(path)
        except FileNotFoundError:
            return None
        except PermissionError:
            return "hidden"
        except NotADirectoryError:
            raise StateError(f"{_parent(path)} exists and is not a directory")

    def describe(self, path):
        st = os.stat(path)
        return f"owned by {user_name(st.st_uid)}, mode {mode_text(st.st_mode)}"

    def seen(self, path):
        """The state of ``path`` as the running user sees it now (for --diff)."""
        if path in self.before:
            return self.before[path]
        try:
            st = os.stat(path)
        except OSError:
            return {"state": "absent"}
        return self._state(st)

    def _state(self, st):
        if st is None:
            return {"state": "absent"}
        return {
            "state": "directory" if stat.S_ISDIR(st.st_mode) else "file",
            "owner": user_name(st.st_uid),
            "group": group_name(st.st_gid),
            "mode": mode_text(st.st_mode),
        }

    def _wanted_state(self):
        return {"state": "directory", "owner": self.owner, "group": self.group, "mode": mode_text(self.mode)}

    def _may_hand_over(self):
        """Whether the running user may give a directory it owns to the owner and group."""
        return self.privileged or (self.uid == self.euid and self.gid in self.groups)

    def _hand_over_why(self):
        return f"{self.user} may not hand it to {self.owner}:{self.group} (chown needs root)"

    def ensure(self, path):
        """Create or fix ``path``: ``"existing"``, ``"created"``, or ``{"path", "why"}`` when blocked."""
        parent = "/"
        for comp in _components(path):
            st = self._look(comp)
            if st == "planned":
                parent = comp
                continue
            if st is None or st == "hidden":
                # Missing, or out of sight behind ``parent`` (which the user cannot search, so it is named in why).
                return self._create(path, comp, parent)
            if not stat.S_ISDIR(st.st_mode):
                raise StateError(f"{comp} exists and is not a directory")
            parent = comp
        if path in self._planned:
            return "created"
        return self._fix(path)

    def _create(self, path, top, parent):
        missing = _components(path)[_components(path).index(top) :]
        uid, gid = self.uid, self.gid
        blocked = None
        if not self.privileged:
            if parent not in self._planned and not os.access(parent, os.W_OK | os.X_OK):
                return {"path": top, "why": f"parent {parent} {self.describe(parent)}"}
            if not self._may_hand_over():
                # Only the directory itself needs root: its missing parents are the deploy user's way to it, so the
                # user creates them for itself (it cannot give them away) and can still reach the directory later.
                blocked = {"path": path, "why": self._hand_over_why()}
                missing = missing[:-1]
                uid, gid = self.euid, self.gid if self.gid in self.groups else os.getegid()
                if not missing:
                    return blocked
        if self.check_mode:
            self._record_created(missing, uid, gid)
            return blocked or "created"
        made = []
        try:
            for comp in missing:
                os.mkdir(comp, 0o700)
                made.append(comp)
            for comp in reversed(made):
                os.chown(comp, uid, gid)
                os.chmod(comp, self.mode)
        except PermissionError as exc:
            # Denied although it looked possible (an ACL, a security module, a root-squashed mount): undo, then
            # leave the directory to root.
            for comp in reversed(made):
                with contextlib.suppress(OSError):
                    os.rmdir(comp)
            if self.privileged:
                raise StateError(f"cannot create {path}: {exc.strerror} ({exc.filename})")
            return {"path": path if made else top, "why": f"{exc.strerror}: {exc.filename}"}
        except OSError as exc:
            if exc.errno == errno.EEXIST:
                raise StateError(f"{exc.filename} appeared while it was being created; run again")
            raise StateError(f"cannot create {path}: {exc.strerror} ({exc.filename})")
        self._record_created(made, uid, gid)
        return blocked or "created"

    def _record_created(self, comps, uid, gid):
        for comp in comps:
            self._planned.add(comp)
            self.created.append(comp)
            self.before[comp] = {"state": "absent"}
            self.after[comp] = dict(self._wanted_state(), owner=user_name(uid), group=group_name(gid))

    def _fix(self, path):
        st = os.stat(path)
        self.before[path] = self._state(st)
        self.after[path] = self._wanted_state()
        change_owner = st.st_uid != self.uid
        change_group = st.st_gid != self.gid
        change_mode = stat.S_IMODE(st.st_mode) != self.mode
        if not (change_owner or change_group or change_mode):
            return "existing"
        if not self.privileged and (
            change_owner or st.st_uid != self.euid or (change_group and not self._may_hand_over())
        ):
            self.after[path] = self.before[path]
            return {
                "path": path,
                "why": f"owned by {user_name(st.st_uid)}:{group_name(st.st_gid)}, mode {mode_text(st.st_mode)}; "
                f"{self.user} may not change it to {self.owner}:{self.group}, mode {mode_text(self.mode)}",
            }
        self.changed_attrs.append(path)
        if not self.check_mode:
            try:
                if change_owner or change_group:
                    os.chown(path, self.uid if change_owner else -1, self.gid if change_group else -1)
                os.chmod(path, self.mode)
            except PermissionError as exc:
                if self.privileged:
                    raise StateError(f"cannot change {path}: {exc.strerror}")
                self.changed_attrs.remove(path)
                self.after[path] = self._state(os.stat(path))
                return {"path": path, "why": f"{exc.strerror}: {exc.filename}"}
        return "existing"

    def clean_slots(self, path):
        """Remove the stale slot files of ``path``: the removed names, or ``{"path", "why"}`` when blocked."""
        try:
            names = sorted(
                entry.name
                for entry in os.scandir(path)
                if entry.name.endswith(SLOT_SUFFIX)
                and not entry.name.startswith(".")
                and entry.is_file(follow_symlinks=False)
            )
        except PermissionError:
            return {"path": path, "why": f"{self.describe(path)}; {self.user} may not list its stale slot files"}
        if not names:
            return []
        if not self.privileged and not os.access(path, os.W_OK | os.X_OK):
            return {"path": path, "why": f"{self.describe(path)}; {self.user} may not remove its stale slot files"}
        if not self.check_mode:
            for name in names:
                try:
                    os.unlink(os.path.join(path, name))
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    raise StateError(f"cannot remove the stale slot file {exc.filename}: {exc.strerror}")
        self.before.setdefault(path, self._state(os.stat(path)))
        self.after.setdefault(path, dict(self.before[path]))
        self.before[path] = dict(self.before[path], stale_slots=names)
        self.after[path] = dict(self.after[path], stale_slots=[])
        return names


def ensure(
    paths,
    owner="",
    group="",
    mode="0750",
    run_as="user",
    clean_stale_slots=False,
    stale_slot_dirs=None,
    check_mode=False,
):
    """Create ``paths`` (see the module docstring); the module's return values, ``changed`` and ``diff`` included.

    :raises InputError: an option is invalid (the message names it).
    :raises StateError: a directory cannot be created or fixed, whatever the privileges.
    """
    paths = check_paths(paths)
    if stale_slot_dirs is None:
        stale_slot_dirs = paths[:1]
    stale_slot_dirs = check_paths(stale_slot_dirs, "stale_slot_dirs", allow_empty=True)
    outside = [d for d in stale_slot_dirs if d not in paths]
    if outside:
        raise InputError("stale_slot_dirs", f"expected directories among paths {paths!r}, not {outside!r}")
    if run_as not in RUN_AS:
        raise InputError("run_as", f"expected one of {', '.join(RUN_AS)}, got {run_as!r}")
    mode = parse_mode(mode)
    if run_as == "sudo" and os.geteuid() != 0:
        raise InputError(
            "run_as",
            f"sudo: the module must run as root (become: true, become_user: root); it runs as {user_name(os.geteuid())}",
        )
    uid, owner_name = resolve_owner(owner)
    gid, group_label = resolve_group(group)

    run = _Pass(uid, gid, owner_name, group_label, mode, check_mode)
    blocked = {}  # (path, why) -> [dirs]
    result = {}
    for path in paths:
        seen = run.seen(path)
        outcome = run.ensure(path)
        run.before.setdefault(path, seen)
        run.after.setdefault(path, seen)  # blocked: left as it was
        if isinstance(outcome, dict):
            blocked.setdefault((outcome["path"], outcome["why"]), []).append(path)
            result[path] = {"created_by": "blocked"}
        else:
            result[path] = {"created_by": run_as if outcome == "created" else "existing"}

    removed = []
    if clean_stale_slots:
        for path in stale_slot_dirs:
            if result[path]["created_by"] == "blocked":
                continue
            if result[path]["created_by"] != "existing":
                # Created by this pass: no slots (and in check mode it does not exist yet).
                result[path]["stale_slots_removed"] = 0
                continue
            outcome = run.clean_slots(path)
            if isinstance(outcome, dict):
                blocked.setdefault((outcome["path"], outcome["why"]), []).append(path)
                result[path] = {"created_by": "blocked"}
                continue
            result[path]["stale_slots_removed"] = len(outcome)
            removed.extend(os.path.join(path, name) for name in outcome)

    blocked_list = [{"path": p, "why": why, "dirs": dirs} for (p, why), dirs in blocked.items()]
    changed = bool(run.created or run.changed_attrs or removed)
    return {
        "changed": changed,
        "user": run.user,
        "owner": owner_name,
        "group": group_label,
        "mode": mode_text(mode),
        "created": run.created,
        "fixed": run.changed_attrs,
        "blocked": blocked_list,
        "blocked_dirs": [d for entry in blocked_list for d in entry["dirs"]],
        "result": result,
        "stale_slots": removed,
        "stale_slots_removed": len(removed),
        "diff": {"before": dict(run.before), "after": {p: run.after.get(p, run.before[p]) for p in run.before}},
    }


def summary(outcome, check_mode=False):
    """One line for ``msg``."""
    would = "would " if check_mode else ""
    parts = []
    if outcome["created"]:
        parts.append("{}create {}".format(would, ", ".join(outcome["created"])))
    if outcome["fixed"]:
        parts.append("{}fix owner/group/mode of {}".format(would, ", ".join(outcome["fixed"])))
    if outcome["stale_slots_removed"]:
        parts.append(f"{would}remove {outcome['stale_slots_removed']} stale slot file(s)")
    if outcome["blocked"]:
        parts.append(
            "blocked for {}: {}".format(
                outcome["user"], "; ".join("{} ({})".format(b["path"], b["why"]) for b in outcome["blocked"])
            )
        )
    return "; ".join(parts) or "all directories in place"
