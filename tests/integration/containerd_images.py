# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""OCI images built from the real binaries, and a private containerd holding them (no registry).

Shared by the kubeadm test node (tests/integration/kubeadm_node.py), which runs its static pods from these images,
and by the tests that only need images in containerd's ``k8s.io`` namespace, as ``kubeadm config images pull`` leaves
them on a control-plane host (the rehearsal takes the target kube-apiserver from there).

- ``OciArchive``: an OCI image layout (several named images, one uncompressed layer each) written as one tar for
  ``ctr images import``; the binary of a kube-apiserver image at ``/usr/local/bin/kube-apiserver``, as in the
  upstream images.
- ``Containerd``: Debian's containerd (``scripts/setup-containerd.sh``) with its own root, state directory and socket
  (a short directory of its own: a unix socket path has at most 104 bytes, and containerd adds ``.ttrpc``); its CRI
  plugin is off unless a configuration for it is given. ``stop()`` stops it and its shims by PID.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

NAMESPACE = "k8s.io"  # the CRI plugin's namespace: the images kubelet and kubeadm see
START_TIMEOUT = 60


class ContainerdError(RuntimeError):
    """containerd, ctr or an image build did not do what was asked; the message says what and why."""


def log_tail(path, lines=40) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return "".join(handle.readlines()[-lines:])
    except OSError as error:
        return f"({path}: {error})"


def with_libraries(files):
    """``files`` plus the shared libraries and loader a dynamically linked one needs (etcd 3.5's release build)."""
    found = dict(files)
    for source in files.values():
        proc = subprocess.run(["ldd", source], capture_output=True, text=True, check=False)
        if proc.returncode != 0:  # "not a dynamic executable"
            continue
        for line in proc.stdout.splitlines():
            parts = line.split()
            path = parts[2] if "=>" in parts and len(parts) > 2 else parts[0]
            if path.startswith("/"):
                found[path] = path
    return found


def compile_static(source, output):
    """``source`` (C) compiled with gcc into the static program ``output``."""
    src = output.with_suffix(".c")
    src.write_text(source, encoding="utf-8")
    proc = subprocess.run(["gcc", "-static", "-O2", "-o", str(output), str(src)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ContainerdError(f"gcc {src}: {proc.stderr[-2000:]}")
    return output


class OciArchive:
    """An OCI image layout (several named images) written as one tar for ``ctr images import``."""

    def __init__(self, workdir, created_by="kubeupgrade tests/integration/containerd_images.py"):
        self.workdir = Path(workdir)
        self.blobs = self.workdir / "blobs" / "sha256"
        self.blobs.mkdir(parents=True, exist_ok=True)
        self.manifests = []
        self.created_by = created_by

    def _blob(self, data: bytes):
        digest = hashlib.sha256(data).hexdigest()
        (self.blobs / digest).write_bytes(data)
        return f"sha256:{digest}", len(data)

    def layer(self, files):
        """An uncompressed layer of ``{path in image: host file}`` plus /etc/passwd, /etc/group and /tmp; (digest, size)."""
        scratch = self.workdir / "layer.tar"
        made = set()
        with tarfile.open(scratch, "w", format=tarfile.PAX_FORMAT) as tar:
            for directory, mode in (("etc", 0o755), ("tmp", 0o1777), ("usr", 0o755), ("usr/local", 0o755),
                                    ("usr/local/bin", 0o755), ("var", 0o755)):
                info = tarfile.TarInfo(directory)
                info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, 0
                tar.addfile(info)
            for name, text in (("etc/passwd", "root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/:/sbin/nologin\n"),
                               ("etc/group", "root:x:0:\nnogroup:x:65534:\n")):
                data = text.encode()
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(data), 0o644, 0
                tar.addfile(info, io.BytesIO(data))
            for name, source in files.items():
                source = os.path.realpath(source)
                made_above = (".", "etc", "tmp", "usr", "usr/local", "usr/local/bin", "var")
                parents = [str(p) for p in Path(name.lstrip("/")).parents if str(p) not in made_above]
                for parent in reversed(parents):
                    if parent not in made:
                        made.add(parent)
                        info = tarfile.TarInfo(parent)
                        info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
                        tar.addfile(info)
                info = tar.gettarinfo(source, arcname=name.lstrip("/"))
                info.mode, info.mtime, info.uid, info.gid, info.uname, info.gname = 0o755, 0, 0, 0, "", ""
                with open(source, "rb") as handle:
                    tar.addfile(info, handle)
        sha = hashlib.sha256()
        with open(scratch, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                sha.update(chunk)
        digest = sha.hexdigest()
        size = scratch.stat().st_size
        scratch.rename(self.blobs / digest)
        return f"sha256:{digest}", size

    def image(self, name, layer, entrypoint, labels=None):
        """Name ``registry/repo:tag`` for the image of ``layer`` (digest, size) started with ``entrypoint``."""
        layer_digest, layer_size = layer
        config = {"architecture": "amd64", "os": "linux",
                  "config": {"Env": ["PATH=/usr/local/bin:/usr/bin:/bin"], "Entrypoint": entrypoint, "Labels": labels or {}},
                  "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
                  "history": [{"created_by": self.created_by}]}
        config_digest, config_size = self._blob(json.dumps(config, sort_keys=True).encode())
        manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config_size},
                    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer_digest, "size": layer_size}]}
        digest, size = self._blob(json.dumps(manifest, sort_keys=True).encode())
        self.manifests.append({"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest, "size": size,
                               "platform": {"architecture": "amd64", "os": "linux"},
                               "annotations": {"io.containerd.image.name": name,
                                               "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1]}})

    def write(self, path):
        (self.workdir / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}', encoding="utf-8")
        (self.workdir / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": self.manifests}), encoding="utf-8")
        with tarfile.open(path, "w") as tar:
            for name in ("oci-layout", "index.json", "blobs"):
                tar.add(self.workdir / name, arcname=name)
        return path


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().split(b"\0")
    except OSError:
        return []


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in "ZX"
    except (OSError, IndexError):
        return False


def stop_pids(pids, timeout=20.0):
    """SIGTERM, then SIGKILL what is still there after ``timeout``: only the given PIDs."""
    pids = [pid for pid in pids if alive(pid)]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in pids:
        if alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def mounts():
    """(mount point, filesystem type, source) of every mount of this process's namespace."""
    found = []
    with open("/proc/self/mountinfo") as handle:
        for line in handle:
            fields = line.split()
            separator = fields.index("-")
            found.append((fields[4], fields[separator + 1], fields[separator + 2]))
    return found


def missing_requirements() -> list:
    """What this machine lacks to run a private containerd and mount its images (empty: it can)."""
    missing = [] if os.geteuid() == 0 else ["root (containerd and ctr images mount run as root)"]
    for tool in ("containerd", "ctr"):
        if not shutil.which(tool):
            missing.append(f"{tool} (run 'bash scripts/setup-containerd.sh' as root)")
    return missing


class Containerd:
    """One containerd of this machine's, in ``directory`` (root, state, configuration), listening on a socket of its
    own; ``start()`` it, ``ctr()`` talks to it in the ``k8s.io`` namespace, ``stop()`` stops it and its shims."""

    def __init__(self, directory, log):
        self.directory = Path(directory)
        self.log = Path(log)
        self.socket_dir = Path(tempfile.mkdtemp(prefix="kubeupgrade-ctr-"))
        self.socket = self.socket_dir / "containerd.sock"
        self.config = self.directory / "config.toml"
        self.process = None

    def write_config(self, cri=None):
        """The configuration: ``cri``, the ``[plugins."io.containerd.grpc.v1.cri"]`` section (TOML) of a node that runs
        pods; without it the CRI plugin is disabled (images only)."""
        root, state = self.directory / "root", self.directory / "state"
        for directory in (root, state, self.directory / "opt"):
            directory.mkdir(parents=True, exist_ok=True)
        text = f"""version = 2
root = "{root}"
state = "{state}"
oom_score = 0
{'' if cri else 'disabled_plugins = ["io.containerd.grpc.v1.cri"]'}
[grpc]
  address = "{self.socket}"
[ttrpc]
  address = "{self.socket}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{self.directory / 'opt'}"
{cri or ''}"""
        self.config.write_text(text, encoding="utf-8")
        return self.config

    def start(self, timeout=START_TIMEOUT):
        if not self.config.exists():
            self.write_config()
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(["containerd", "--config", str(self.config)], stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            if self.socket.exists() and self.ctr("version", check=False).returncode == 0:
                return self
            time.sleep(0.3)
        raise ContainerdError(f"containerd did not answer on {self.socket}:\n{log_tail(self.log)}")

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def ctr(self, *args, check=True, timeout=300):
        proc = subprocess.run(["ctr", "--address", str(self.socket), "-n", NAMESPACE, *args], capture_output=True,
                              text=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise ContainerdError(f"ctr {' '.join(args)}: {proc.stderr[-2000:]}")
        return proc

    def import_images(self, archive, snapshotter=None):
        """Import an OCI archive; with ``snapshotter``, imported without unpacking, then unpacked there (the CRI's)."""
        if snapshotter is None:
            self.ctr("images", "import", str(archive))
            return self.images()
        self.ctr("images", "import", "--no-unpack", str(archive))
        names = self.images()
        for name in names:
            self.ctr("images", "unpack", "--snapshotter", snapshotter, name, check=False)
        return names

    def images(self) -> list:
        return [line.split()[0] for line in self.ctr("images", "ls", "-q").stdout.splitlines() if line.strip()]

    def snapshots(self) -> list:
        """The snapshot keys of the default snapshotter (an image mounted with ctr adds an active one)."""
        lines = self.ctr("snapshots", "ls").stdout.splitlines()[1:]
        return sorted(line.split()[0] for line in lines if line.strip())

    def leases(self) -> list:
        return sorted(line.split()[0] for line in self.ctr("leases", "ls", "-q").stdout.splitlines() if line.strip())

    def stop(self, remove_socket_dir=True):
        """Stop containerd and the shims started for its socket, by PID; then remove the socket's directory."""
        if self.running():
            stop_pids([self.process.pid])
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=5)
        address = str(self.socket).encode()
        shims = [pid for pid in (int(entry) for entry in os.listdir("/proc") if entry.isdigit())
                 if (cmd := cmdline(pid)) and cmd[0].endswith(b"containerd-shim-runc-v2") and address in cmd]
        stop_pids(shims, timeout=10)
        if remove_socket_dir:
            shutil.rmtree(self.socket_dir, ignore_errors=True)


def upstream_images(workdir, images, containerd, created_by="kubeupgrade tests/integration/containerd_images.py"):
    """Import into ``containerd`` the images ``{name: (binary in image, host binary)}``, each one layer holding the
    binary (and the libraries it links) at the upstream image's path, started with it; the names imported."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    archive = OciArchive(workdir / "oci", created_by=created_by)
    for name, (in_image, source) in images.items():
        archive.image(name, archive.layer(with_libraries({in_image: source})), [in_image])
    path = archive.write(workdir / "images.tar")
    shutil.rmtree(workdir / "oci")
    try:
        return containerd.import_images(path)
    finally:
        path.unlink()
