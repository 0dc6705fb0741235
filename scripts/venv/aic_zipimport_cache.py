"""A compiled-code cache for modules imported from zip archives (installed into the controller venv by
scripts/setup-venv.sh, loaded at interpreter start by aic_zipimport_cache.pth).

Every Ansible module runs as an AnsiballZ payload: a zip of the module and its module_utils that the interpreter imports
with ``zipimport``, which finds no bytecode in the archive and compiles every source file it imports (ansible's
``module_utils.basic`` and its dependencies, community.docker's client, ...) at every task: about a third of a
module's CPU time on the controller's own nodes. This keeps each compiled file by the sha256 of its source, so a
source compiles once per interpreter version; a hit gives the same code with the file name of this import (tracebacks
name the archive the module really ran from).

Content-addressed, per interpreter (``sys.implementation.cache_tag``, as ``__pycache__`` names) and ``-O`` level, each
entry headed by the bytecode's magic number, so an entry can never be stale; an entry that cannot be read is compiled
again and rewritten; a cache that cannot be written only costs the compile. ``AIC_ZIPIMPORT_CACHE``: the directory
(default ``$XDG_CACHE_HOME/aic-stack/zipimport``, else ``~/.cache/aic-stack/zipimport``), or ``off``. It changes
nothing but where the code comes from. Molecule's instance image installs it too (molecule/shared/instance/); other
interpreters (a node's own Python) compile as before.
"""

import os
import sys
import zipimport

# Every interpreter of the venv loads this module at its start: it imports nothing more until the first import from a
# zip archive (hashlib alone would cost a few milliseconds at every start).
ENV = "AIC_ZIPIMPORT_CACHE"


def cache_dir(environ=None):
    """This interpreter's cache directory (from ``environ``, default the process environment), or None when off."""
    environ = os.environ if environ is None else environ
    configured = environ.get(ENV, "")
    if configured.lower() == "off":
        return None
    base = configured or os.path.join(
        environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "aic-stack", "zipimport"
    )
    return os.path.join(base, f"{sys.implementation.cache_tag}-O{sys.flags.optimize}")


def refile(code, filename):
    """``code`` and every code object nested in it, with ``co_filename`` set to ``filename``."""
    consts = tuple(refile(c, filename) if isinstance(c, type(code)) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def cached_compile(compile_source, directory):
    """A replacement for ``zipimport._compile_source(pathname, source)`` that keeps what ``compile_source`` compiles
    under ``directory``, by the sha256 of the source, each entry headed by the bytecode's magic number."""

    def compile_cached(pathname, source):
        import hashlib
        import importlib.util
        import marshal

        magic = importlib.util.MAGIC_NUMBER
        entry = os.path.join(directory, hashlib.sha256(source).hexdigest())
        try:
            with open(entry, "rb") as fh:
                if fh.read(len(magic)) == magic:
                    code = marshal.load(fh)
                    if type(code).__name__ == "code":
                        return refile(code, pathname)
        except (OSError, EOFError, ValueError, TypeError):
            pass
        code = compile_source(pathname, source)
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
            partial = f"{entry}.{os.getpid()}.partial"
            with open(partial, "wb") as fh:
                fh.write(magic)
                marshal.dump(code, fh)
            os.replace(partial, entry)  # whole or absent: a concurrent reader never sees half an entry
        except OSError:
            pass
        return code

    compile_cached.aic_zipimport_cache = directory
    return compile_cached


def install(environ=None):
    """Put the cache in front of zipimport's compile (once); returns the directory, or None when off."""
    directory = cache_dir(environ)
    current = zipimport._compile_source
    if directory is None or getattr(current, "aic_zipimport_cache", None):
        return getattr(current, "aic_zipimport_cache", None) if directory else None
    zipimport._compile_source = cached_compile(current, directory)
    return directory


try:  # noqa: SIM105 - contextlib would be one more import at every interpreter start
    install()
except Exception:  # noqa: BLE001, S110 - never the reason an interpreter does not start  # pragma: no cover
    pass
