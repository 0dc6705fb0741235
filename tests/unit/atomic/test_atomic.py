"""module_utils/atomic.replace_file on real files: text and copies, modes, a failure that leaves the old file."""

from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.aic.stack.plugins.module_utils.atomic import replace_file


def test_text_replaces_the_file_with_the_given_mode_and_leaves_no_temporary_file(tmp_path):
    dest = tmp_path / "manifest.json"
    dest.write_text("old\n")
    replace_file(str(dest), text="new\n", mode=0o600)
    assert dest.read_text() == "new\n"
    assert stat.S_IMODE(dest.stat().st_mode) == 0o600
    assert os.listdir(tmp_path) == ["manifest.json"]


def test_a_copy_keeps_the_sources_content_and_mode_and_can_make_the_directory(tmp_path):
    source = tmp_path / "run.sh"
    source.write_text("#!/bin/sh\n")
    source.chmod(0o755)
    dest = tmp_path / "a" / "b" / "run.sh"
    replace_file(str(dest), source=str(source), make_dirs=True)
    assert dest.read_text() == "#!/bin/sh\n" and stat.S_IMODE(dest.stat().st_mode) == 0o755


def test_a_failed_copy_leaves_the_old_file_and_no_temporary_file(tmp_path):
    dest = tmp_path / "stamp.json"
    dest.write_text("old\n")
    with pytest.raises(FileNotFoundError):
        replace_file(str(dest), source=str(tmp_path / "missing"))
    assert dest.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["stamp.json"]


@pytest.mark.parametrize("kwargs", [{}, {"text": "x", "source": "y"}])
def test_exactly_one_of_text_and_source(tmp_path, kwargs):
    with pytest.raises(ValueError, match="exactly one"):
        replace_file(str(tmp_path / "f"), **kwargs)
