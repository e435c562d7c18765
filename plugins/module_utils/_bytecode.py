# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's module_utils compiled once per host and user, not at every task.

AnsiballZ sends a module's module_utils as .py files in a zip, and zipimport compiles every one of them at every
run (Python keeps no ``__pycache__`` for a zip): for ``storage_migration`` 50 files, most of what a task with
nothing to do costs beyond ``ansible.builtin.ping``. Imported first by every module of the collection, this puts a
finder ahead of zipimport for the collection's module_utils alone and keeps each file's code object in the user's
cache directory (``$XDG_CACHE_HOME/kubeupgrade.storage/bytecode``, else ``~/.cache/kubeupgrade.storage/bytecode``),
named by the SHA-256 of the interpreter's bytecode magic number and optimization level, the file's path in the
payload and its source: a changed file, collection or Python never reads another's code (the check of PEP 552's
hash-based .pyc files, made on the source itself).

It trusts nothing another user could have written: the directory (made 0700) and every entry it reads must belong
to the user and be writable by no one else, else the file is compiled as zipimport would. With
``PYTHONDONTWRITEBYTECODE`` (``python -B``) nothing is written. Entries older than 30 days are removed when a new one
is written. Any failure of the cache falls back to compiling, so the cache cannot break a module. Imports from the
file system (the controller's action plugins, the tests) are Python's own business: outside an AnsiballZ payload
this installs nothing.
"""

from __future__ import annotations

import hashlib
import importlib.util
import marshal
import os
import stat
import sys
import tempfile
import time
import zipfile
import zipimport

PACKAGE = __name__.rpartition(".")[0]  # ansible_collections.kubeupgrade.storage.plugins.module_utils
KEEP_SECONDS = 30 * 24 * 3600
_DIGEST = 32  # bytes of SHA-256 at the head of every entry


def cache_directory(environ=None):
    """Where the entries live: the XDG cache directory of the user running the module."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "kubeupgrade.storage", "bytecode")


def _private(st):
    """The user's own, and no one else can write it."""
    return st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


class CodeCache:
    """Code objects by (interpreter, path in the payload, source), in one private directory."""

    def __init__(self, directory, write):
        self.directory = directory
        self.write = write
        self._pruned = False

    @classmethod
    def open(cls, directory=None):
        """The cache, or None when its directory cannot be made, or is not the user's own or writable by others."""
        directory = directory or cache_directory()
        write = not sys.dont_write_bytecode
        try:
            if write:
                os.makedirs(directory, mode=0o700, exist_ok=True)
            st = os.lstat(directory)
        except OSError:
            return None
        if not stat.S_ISDIR(st.st_mode) or not _private(st):
            return None
        return cls(directory, write)

    def code(self, source, path):
        """The code object of ``source`` (bytes) compiled as the file ``path``: read, else compiled (and kept)."""
        source = source.replace(b"\r\n", b"\n").replace(b"\r", b"\n")  # as zipimport compiles it
        digest = hashlib.sha256(b"\0".join((importlib.util.MAGIC_NUMBER, str(sys.flags.optimize).encode(),
                                            path.encode("utf-8", "surrogateescape"), source))).digest()
        entry = os.path.join(self.directory, digest.hex())
        code = self._read(entry, digest)
        if code is None:
            code = compile(source, path, "exec", dont_inherit=True)
            if self.write:
                self._keep(entry, digest, code)
        return code

    def _read(self, entry, digest):
        try:
            fd = os.open(entry, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            return None
        try:
            with os.fdopen(fd, "rb") as handle:
                if not _private(os.fstat(handle.fileno())):
                    return None
                data = handle.read()
        except OSError:
            return None
        if data[:_DIGEST] != digest:
            return None
        try:
            return marshal.loads(data[_DIGEST:])
        except (EOFError, ValueError, TypeError):
            return None

    def _keep(self, entry, digest, code):
        temp = None
        try:
            fd, temp = tempfile.mkstemp(dir=self.directory, prefix=".new-")  # 0600
            with os.fdopen(fd, "wb") as handle:
                handle.write(digest + marshal.dumps(code))
            os.replace(temp, entry)
            temp = None
        except (OSError, ValueError):
            pass
        finally:
            if temp:
                try:
                    os.unlink(temp)
                except OSError:
                    pass
        self._prune()

    def _prune(self):
        """Entries older than KEEP_SECONDS (an older collection's), once per process that writes."""
        if self._pruned:
            return
        self._pruned = True
        oldest = time.time() - KEEP_SECONDS
        try:
            with os.scandir(self.directory) as entries:
                for item in entries:
                    try:
                        if item.is_file(follow_symlinks=False) and item.stat(follow_symlinks=False).st_mtime < oldest:
                            os.unlink(item.path)
                    except OSError:
                        pass
        except OSError:
            pass


class _CachedLoader:
    """zipimport's loader for one file, with the code object from the cache."""

    def __init__(self, zipped, origin, path, cache):
        self.zipped = zipped
        self.origin = origin
        self.path = path
        self.cache = cache

    def create_module(self, spec):  # noqa: ARG002  importlib's signature: the default module
        return None

    def exec_module(self, module):
        code = self.cache.code(self.zipped.get_data(self.origin), self.path)
        exec(code, module.__dict__)  # pylint: disable=exec-used

    def get_source(self, fullname):  # noqa: ARG002  importlib's signature; tracebacks show the lines with it
        return importlib.util.decode_source(self.zipped.get_data(self.origin))


class _Finder:
    """Finds the collection's module_utils in the payload and loads them through the cache.

    It looks the file up in the zip's directory itself: zipimport's own find_spec asks its loader for the file name,
    and zipimport compiles the module to answer (Python 3.13), which would cost the compile this saves."""

    def __init__(self, cache, archive, names):
        self.cache = cache
        self.archive = archive
        self.names = names
        self.zipped = zipimport.zipimporter(archive)

    def find_spec(self, fullname, path=None, target=None):  # noqa: ARG002  importlib's signature
        if not fullname.startswith(PACKAGE + "."):
            return None
        inner = fullname.replace(".", "/")
        package = inner + "/__init__.py" in self.names
        path = inner + "/__init__.py" if package else inner + ".py"
        if path not in self.names:
            return None  # not in the payload: the other finders answer
        origin = self.archive + "/" + path
        return importlib.util.spec_from_file_location(
            fullname, origin, loader=_CachedLoader(self.zipped, origin, path, self.cache),
            submodule_search_locations=[self.archive + "/" + inner] if package else None)


def install(spec=None):
    """Put the finder first on ``sys.meta_path`` when this file came from an AnsiballZ payload; True if it did."""
    spec = spec or __spec__
    loader = getattr(spec, "loader", None)
    if not isinstance(loader, zipimport.zipimporter):
        return False
    if any(isinstance(finder, _Finder) for finder in sys.meta_path):
        return True
    cache = CodeCache.open()
    if cache is None:
        return False
    try:
        with zipfile.ZipFile(loader.archive) as archive:
            names = frozenset(archive.namelist())
    except (OSError, zipfile.BadZipFile):
        return False
    sys.meta_path.insert(0, _Finder(cache, loader.archive, names))
    return True


install()
