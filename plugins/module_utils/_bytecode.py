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

It trusts nothing another user could have written: the cache directory must be the user's own (root running with
another user's HOME or XDG_CACHE_HOME keeps nothing there), the two directories below it (made 0700) and every entry
it reads must belong to the user and be writable by no one else, and it works through the descriptor of the
directory it checked, so a directory swapped for a symlink afterwards is never read, written or pruned. Else the file
is compiled as zipimport would. With ``PYTHONDONTWRITEBYTECODE`` (``python -B``) nothing is written. Entries not read
for 30 days are removed when a new one is written. Any failure of the cache falls back to compiling, so the cache
cannot break a module. Code objects carry the payload's file name, as zipimport's do. Imports from the file system
(the controller's action plugins, the tests) are Python's own business: outside an AnsiballZ payload this installs
nothing.
"""

from __future__ import annotations

import _imp
import hashlib
import importlib.util
import marshal
import os
import secrets
import stat
import sys
import time
import types
import zipfile
import zipimport

PACKAGE = __name__.rpartition(".")[0]  # ansible_collections.kubeupgrade.storage.plugins.module_utils
KEEP_SECONDS = 30 * 24 * 3600
TOUCH_SECONDS = 24 * 3600  # an entry read is dated again at most once a day: entries in use are not pruned
SUBDIRECTORIES = ("kubeupgrade.storage", "bytecode")
_DIGEST = 32  # bytes of SHA-256 at the head of every entry
_DIRECTORY = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def cache_base(environ=None):
    """The user's XDG cache directory (``$XDG_CACHE_HOME`` if absolute, else ``~/.cache``); None without an absolute
    home (a user with no HOME and no passwd entry): nothing is kept relative to the working directory."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return base if os.path.isabs(base) else None


def _private(st):
    """The user's own, and no one else can write it."""
    return st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _open_private(name, dir_fd, make):
    """The descriptor of the directory ``name`` in ``dir_fd`` (made 0700 if missing and ``make``), if it is a private
    directory and not a symlink; else None."""
    if make:
        try:
            os.mkdir(name, 0o700, dir_fd=dir_fd)
        except FileExistsError:
            pass
    fd = os.open(name, _DIRECTORY | _NOFOLLOW, dir_fd=dir_fd)
    st = os.fstat(fd)
    if stat.S_ISDIR(st.st_mode) and _private(st):
        return fd
    os.close(fd)
    return None


class CodeCache:
    """Code objects by (interpreter, path in the payload, source), in one private directory held open: every read,
    write and removal goes through its descriptor, so a directory swapped after the check is never written to."""

    def __init__(self, fd, write):
        self.fd = fd
        self.write = write
        self._pruned = False

    @classmethod
    def open(cls, base=None):
        """The cache in ``base``/kubeupgrade.storage/bytecode, or None: ``base`` (the user's cache directory, made
        0700 only where its parent is the user's) must be the user's own, and each directory below it private."""
        base = base or cache_base()
        write = not sys.dont_write_bytecode
        if not base or os.open not in os.supports_dir_fd:
            return None
        fds = []
        try:
            if write and not os.path.lexists(base) and os.stat(os.path.dirname(base)).st_uid == os.geteuid():
                os.mkdir(base, 0o700)
            fds.append(os.open(base, _DIRECTORY))
            if os.fstat(fds[0]).st_uid != os.geteuid():  # root with another user's HOME: not a place to write
                return None
            for name in SUBDIRECTORIES:
                fd = _open_private(name, fds[-1], write)
                if fd is None:
                    return None
                fds.append(fd)
            return cls(fds.pop(), write)
        except OSError:
            return None
        finally:
            for fd in fds:
                os.close(fd)

    def code(self, source, path, filename=None):
        """The code object of ``source`` (bytes) compiled as the file ``path``: read, else compiled (and kept); its
        file name is then ``filename`` (the payload's path, as zipimport names it) where given."""
        source = source.replace(b"\r\n", b"\n").replace(b"\r", b"\n")  # as zipimport compiles it
        digest = hashlib.sha256(b"\0".join((importlib.util.MAGIC_NUMBER, str(sys.flags.optimize).encode(),
                                            path.encode("utf-8", "surrogateescape"), source))).digest()
        code = self._read(digest)
        if code is None:
            code = compile(source, path, "exec", dont_inherit=True)
            if self.write:
                self._keep(digest, code)
        if filename and hasattr(_imp, "_fix_co_filename"):
            _imp._fix_co_filename(code, filename)  # pylint: disable=protected-access  # what importlib does for a .pyc
        return code

    def _read(self, digest):
        try:
            fd = os.open(digest.hex(), os.O_RDONLY | _NOFOLLOW, dir_fd=self.fd)
        except OSError:
            return None
        try:
            with os.fdopen(fd, "rb") as handle:
                st = os.fstat(handle.fileno())
                if not stat.S_ISREG(st.st_mode) or not _private(st):
                    return None
                data = handle.read()
                if self.write and st.st_mtime < time.time() - TOUCH_SECONDS:
                    os.utime(handle.fileno())
        except OSError:
            return None
        if data[:_DIGEST] != digest:
            return None
        try:
            code = marshal.loads(data[_DIGEST:])
        except (EOFError, ValueError, TypeError):
            return None
        return code if isinstance(code, types.CodeType) else None

    def _keep(self, digest, code):
        temp = f".new-{os.getpid()}-{secrets.token_hex(8)}"
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600, dir_fd=self.fd)
            with os.fdopen(fd, "wb") as handle:
                handle.write(digest + marshal.dumps(code))
            os.replace(temp, digest.hex(), src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except (OSError, ValueError):
            try:
                os.unlink(temp, dir_fd=self.fd)
            except OSError:
                pass
        self._prune()

    def _prune(self):
        """Entries not read or written for KEEP_SECONDS (an older collection's), once per process that writes."""
        if self._pruned:
            return
        self._pruned = True
        oldest = time.time() - KEEP_SECONDS
        try:
            with os.scandir(self.fd) as entries:
                for item in entries:
                    try:
                        if item.is_file(follow_symlinks=False) and item.stat(follow_symlinks=False).st_mtime < oldest:
                            os.unlink(item.name, dir_fd=self.fd)
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
        code = self.cache.code(self.zipped.get_data(self.origin), self.path, self.origin)
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
