# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Replace a file atomically: readers see the old file or the new one, never a part; a failure leaves the old one."""

from __future__ import annotations

import os
import shutil
import tempfile


def replace_file(dest, text=None, source=None, mode=0o644, make_dirs=False):
    """Replace ``dest`` with ``text`` (str, written as UTF-8) or with a copy of the file ``source`` (its content and
    mode; ``mode`` is then ignored). The new content goes to a temporary file in ``dest``'s directory, is flushed to
    disk, then renamed over ``dest``; on any failure the temporary file is removed and ``dest`` is untouched.
    ``make_dirs`` creates ``dest``'s directory first."""
    if (text is None) == (source is None):
        raise ValueError("replace_file: give exactly one of text and source")
    directory = os.path.dirname(os.path.abspath(dest))
    if make_dirs:
        os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(dest)}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            if text is not None:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
        if source is not None:
            shutil.copy2(source, tmp)
        else:
            os.chmod(tmp, mode)
        os.replace(tmp, dest)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
