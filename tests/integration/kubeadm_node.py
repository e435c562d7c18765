# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A real kubeadm control-plane node for tests: containerd, the kubelet and ``kubeadm init``, on this machine.

What it runs, all from ``KUBEUPGRADE_TEST_K8S_ASSETS`` (no registry, no package of Kubernetes):

- containerd (Debian's, ``scripts/setup-containerd.sh``) with its own root, state directory and socket, cgroupfs,
  ``restrict_oom_score_adj`` (a container's root may lack CAP_SYS_RESOURCE: runc could not set a sandbox's
  oom_score_adj), and the sandbox image kubeadm names;
- OCI images built here from the real binaries, under the names ``kubeadm config images list`` gives, imported into
  containerd's ``k8s.io`` namespace: kube-apiserver, kube-controller-manager and kube-scheduler of both releases
  (the binary at ``/usr/local/bin/<name>``, as in the real images); etcd's tags hold **etcd 3.5** behind the 3.6 tag
  kubeadm asks for, with an entrypoint mapping the two etcd 3.6 flags kubeadm writes to their 3.5 names (kubeadm's
  etcd upgrade path - its data backup, the manifest swap - runs; a 3.5 -> 3.6 data change does not); pause is a small
  static program (compiled here with gcc); kube-proxy and coredns are placeholders holding that program, never run
  (their addons are skipped: no CNI, static pods on the host network);
- ``/etc/kubernetes`` and ``/var/lib/kubelet`` bind-mounted from private directories (kubeadm writes fixed paths);
- the kubelet run as kubeadm expects it from systemd, through a ``systemctl`` stand-in first on ``PATH`` (it also
  answers what Ansible's systemd_service module asks: ``show``, ``is-active``, ``daemon-reload``, ``restart``);
- ``kubeadm init`` of ``FROM_VERSION`` with encryption at rest and the beta APIs an operator enables.

Teardown always runs and puts the host back: ``kubeadm reset -f``, what is left of the pods' processes, the kubelet,
containerd and its shims stopped by PID, every mount below the node's directories and the bind mounts undone, the
``kubepods`` cgroups removed, the kernel settings the kubelet changes restored, the host directories it created
removed. ``host_state()`` is what the tests compare before and after.

The node uses kubeadm's fixed ports (6443, 2379-2381, 10248-10259): they are checked free first, and a lock file
keeps two nodes of this machine (two pytest workers) apart; the second waits. A node whose test process was killed
before its teardown (a timeout, a cancelled run) is undone by the next node, from the ledger it wrote before it
changed the host.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml
from containerd_images import Containerd, OciArchive, cmdline, compile_static, mounts, stop_pids, with_libraries
from realcp.plane import log_tail

ASSETS_ENV = "KUBEUPGRADE_TEST_K8S_ASSETS"
FROM_VERSION, TO_VERSION = "1.35.3", "1.36.2"
ETCD_VERSION = "3.5.30"
NODE_NAME = "kubeadm-test-node"
# kubeadm's fixed ports: apiserver, etcd client/peer/metrics, kubelet healthz/API, scheduler, controller-manager
PORTS = (6443, 2379, 2380, 2381, 10248, 10250, 10257, 10259)
# The kernel settings the kubelet sets (setupKernelTunables, protectKernelDefaults false): restored at teardown.
SYSCTLS = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
           "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes")
# Host paths kubeadm, the kubelet or containerd's shims write besides the bind mounts: removed when they created them.
HOST_PATHS = ("/etc/kubernetes", "/var/lib/kubelet", "/var/log/containers", "/var/log/pods", "/var/run/kubernetes",
              "/run/containerd", "/var/lib/etcd")
LOCK = os.path.join(tempfile.gettempdir(), "kubeupgrade-kubeadm-node.lock")
# What a node is about to change on the host, written (under the lock) before it changes anything and removed once its
# teardown put the host back: a node whose test process was killed (a timeout, a cancelled run) leaves it behind, and
# the next node undoes what that one left before it starts (undo_a_killed_node).
LEDGER = os.path.join(tempfile.gettempdir(), "kubeupgrade-kubeadm-node.json")
# The bind mounts a node puts over kubeadm's fixed paths.
BIND_TARGETS = ("/etc/kubernetes", "/var/lib/kubelet")
# Bounded waits (seconds); the machine runs other tests at the same time.
CONTAINERD_TIMEOUT, INIT_TIMEOUT, READY_TIMEOUT, COMMAND_TIMEOUT = 60, 600, 300, 900
# How long a node waits for another node of this machine (another pytest worker's test, up to about 8 minutes here).
LOCK_TIMEOUT = 1800
PAUSE_C = r"""
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
static void stop(int s) { (void)s; _exit(0); }
static void reap(int s) { (void)s; while (waitpid(-1, NULL, WNOHANG) > 0) {} }
int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "-v") == 0) { puts("pause (kubeupgrade test image)"); return 0; }
    signal(SIGINT, stop); signal(SIGTERM, stop); signal(SIGCHLD, reap);
    for (;;) pause();
}
"""
# kubeadm 1.35/1.36 write etcd 3.6 flags; etcd 3.5 has them under their experimental names.
ETCD_ENTRYPOINT_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    char **out = calloc(argc + 1, sizeof(char *));
    int n = 0;
    /* etcd-3.5 beside this program: /usr/local/bin in the container, the mount point when the image is mounted */
    char self[4096];
    ssize_t length = readlink("/proc/self/exe", self, sizeof(self) - 16);
    if (length <= 0) { perror("readlink /proc/self/exe"); return 127; }
    self[length] = 0;
    strcpy(strrchr(self, '/') + 1, "etcd-3.5");
    out[n++] = self;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--feature-gates=InitialCorruptCheck=true") == 0) {
            out[n++] = "--experimental-initial-corrupt-check=true";
        } else if (strncmp(arg, "--watch-progress-notify-interval=", 33) == 0) {
            char *mapped = malloc(strlen(arg) + 16);
            sprintf(mapped, "--experimental-%s", arg + 2);
            out[n++] = mapped;
        } else {
            out[n++] = (char *)arg;
        }
    }
    out[n] = NULL;
    execv(out[0], out);
    perror("exec etcd 3.5");
    return 127;
}
"""
SYSTEMCTL = r"""#!/bin/bash
# systemctl stand-in of the kubeadm test node (no systemd here): runs the kubelet as kubeadm's systemd drop-in does.
state=@STATE@
cmd= unit=
for arg in "$@"; do
    case $arg in -*) ;; *) if [ -z "$cmd" ]; then cmd=$arg; elif [ -z "$unit" ]; then unit=${arg%.service}; fi ;; esac
done
pidfile=$state/kubelet.pid
running() {
    local pid
    pid=$(cat "$pidfile" 2>/dev/null) || return 1
    [ -n "$pid" ] && tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q "^@KUBELET@ "
}
start() {
    running && return 0
    KUBELET_KUBEADM_ARGS=
    [ -f /var/lib/kubelet/kubeadm-flags.env ] && . /var/lib/kubelet/kubeadm-flags.env
    echo "=== $(date -u +%FT%TZ) systemctl $cmd kubelet" >> "$state/kubelet.log"
    # shellcheck disable=SC2086
    setsid @KUBELET@ --bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf \
        --config=/var/lib/kubelet/config.yaml $KUBELET_KUBEADM_ARGS >> "$state/kubelet.log" 2>&1 < /dev/null &
    echo $! > "$pidfile"
}
stop() {
    local pid i
    if running; then
        pid=$(cat "$pidfile")
        kill "$pid" 2>/dev/null
        for i in $(seq 1 100); do [ -e "/proc/$pid" ] || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null
    fi
    rm -f "$pidfile"
}
echo "$(date -u +%FT%TZ) $*" >> "$state/systemctl.log"
if [ "$unit" != kubelet ]; then
    case $cmd in
        show) echo "Id=$unit.service"; echo "LoadState=not-found"; echo "ActiveState=inactive" ;;
        is-active) echo inactive; exit 3 ;;
        status) echo "Loaded: not-found"; exit 4 ;;
        *) exit 0 ;;
    esac
    exit 0
fi
case $cmd in
    daemon-reload|daemon-reexec|enable|disable|reset-failed) ;;
    start) start ;;
    stop) stop ;;
    restart|try-restart|reload-or-restart) stop; start ;;
    is-enabled) echo enabled ;;
    is-active) if running; then echo active; else echo inactive; exit 3; fi ;;
    status) echo "Loaded: loaded"; if running; then echo "Active: active (running)"; else echo "Active: inactive (dead)"; exit 3; fi ;;
    show)
        echo "Id=kubelet.service"; echo "LoadState=loaded"; echo "UnitFileState=enabled"
        if running; then echo "ActiveState=active"; echo "SubState=running"; echo "MainPID=$(cat "$pidfile")"
        else echo "ActiveState=inactive"; echo "SubState=dead"; echo "MainPID=0"; fi ;;
    *) ;;
esac
"""


class NodeError(RuntimeError):
    """A step of the node did not complete; the message holds the tail of the logs that say why."""


def asset(version, name) -> str:
    """``$KUBEUPGRADE_TEST_K8S_ASSETS/v<version>/<name>``; FileNotFoundError naming it when missing."""
    root = os.environ.get(ASSETS_ENV)
    if not root:
        raise FileNotFoundError(f"{ASSETS_ENV} is not set")
    path = os.path.join(root, f"v{version}", name)
    if not os.access(path, os.X_OK):
        raise FileNotFoundError(path)
    return path


def missing_requirements() -> list:
    """What this machine lacks to run a node (empty: it can)."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (kubeadm, the kubelet and containerd run as root)")
    for tool in ("containerd", "ctr", "runc", "containerd-shim-runc-v2"):
        if not shutil.which(tool):
            missing.append(f"{tool} (run 'bash scripts/setup-containerd.sh' as root)")
    if not shutil.which("gcc"):
        missing.append("gcc (builds the pause and etcd entrypoint programs of the images)")
    wanted = [(FROM_VERSION, n) for n in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")]
    wanted += [(TO_VERSION, n) for n in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubeadm", "kubelet")]
    wanted += [(ETCD_VERSION, "etcd")]
    for version, name in wanted:
        try:
            asset(version, name)
        except FileNotFoundError as error:
            missing.append(f"{name} {version} ({error})")
    return missing


# --- host state ----------------------------------------------------------------------------------------------


def _read_sysctl(name):
    with open(f"/proc/sys/{name}") as handle:
        return handle.read().strip()


def _kubepods_cgroups():
    root = "/sys/fs/cgroup"
    found = []
    for hierarchy in sorted(os.listdir(root)) if os.path.isdir(root) else ():
        for entry in os.listdir(os.path.join(root, hierarchy)) if os.path.isdir(os.path.join(root, hierarchy)) else ():
            if entry.startswith("kubepods"):
                found.append(os.path.join(root, hierarchy, entry))
    return sorted(found)


def _on_host_paths(point) -> bool:
    """A mount point at or below one of ``HOST_PATHS``: where a node mounts (the other tests of the run mount
    elsewhere at the same time: a tmpfs, a private containerd's snapshots)."""
    return any(point == path or point.startswith(path + "/") for path in HOST_PATHS)


def host_state() -> dict:
    """What a node changes on the host and must put back: kernel settings, the mounts on its paths, kubepods cgroups,
    host paths (lists only: the same after a round trip through the ledger's JSON)."""
    return {"sysctls": {name: _read_sysctl(name) for name in SYSCTLS if os.path.exists(f"/proc/sys/{name}")},
            "mounts": [list(mount) for mount in sorted(mounts()) if _on_host_paths(mount[0])], "cgroups": _kubepods_cgroups(),
            "paths": sorted(path for path in HOST_PATHS if os.path.lexists(path))}


def _kubepods_pids() -> list:
    """The processes in the kubepods cgroups (only a node's kubelet makes them)."""
    pids = set()
    for cgroup in _kubepods_cgroups():
        for dirpath, _dirs, files in os.walk(cgroup):
            if "cgroup.procs" in files:
                with open(os.path.join(dirpath, "cgroup.procs")) as handle:
                    pids.update(int(line) for line in handle if line.strip())
    return sorted(pids)


def machine_lock():
    """The lock that keeps nodes of this machine apart (another pytest worker's node holds the fixed ports and paths):
    an open file, locked until it is closed; waits up to ``LOCK_TIMEOUT``."""
    handle = open(LOCK, "w")
    deadline = time.monotonic() + LOCK_TIMEOUT
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return handle
        except OSError:
            if time.monotonic() > deadline:
                handle.close()
                raise NodeError(f"another kubeadm test node held {LOCK} for {LOCK_TIMEOUT} s") from None
            time.sleep(2)


def undo_host_changes(workdir, socket_dir, host_before, created_paths, bind_mounts) -> list:
    """Undo what a node changed on the host, whatever it reached, its processes already stopped: the problems met, and
    any difference of ``host_state()`` from ``host_before`` (empty: the host is as it was)."""
    problems = []
    for what, action in (("unmount", lambda: _unmount(workdir, bind_mounts)),
                         ("remove the kubepods cgroups", lambda: _remove_cgroups((host_before or {}).get("cgroups", []))),
                         ("restore the kernel settings", lambda: _restore_sysctls((host_before or {}).get("sysctls", {}))),
                         ("remove the host paths the node created", lambda: _remove_paths(created_paths)),
                         ("remove containerd's socket directory", lambda: shutil.rmtree(socket_dir, ignore_errors=True))):
        try:
            action()
        except Exception as error:  # every step is tried whatever the one before met
            problems.append(f"{what}: {error}")
    if host_before is not None:
        after = host_state()
        for key, before in host_before.items():
            if after[key] != before:
                problems.append(f"the host's {key} changed: before {before}, after {after[key]}")
    return problems


def undo_a_killed_node() -> list:
    """Undo what a node whose test process was killed left on this machine (``LEDGER``), called under the lock: the
    processes naming its directories (kubelet, containerd, shims) and its pods stopped, then ``undo_host_changes``.
    The problems left (empty: there was none, or it is undone and the ledger removed)."""
    try:
        with open(LEDGER, encoding="utf-8") as handle:
            left = json.load(handle)
        marks = (left["workdir"].encode(), left["socket_dir"].encode())
        mounted_before = {mount[0] for mount in left["host_before"]["mounts"]}
    except FileNotFoundError:
        return []
    except (ValueError, KeyError, TypeError) as error:
        return [f"{LEDGER} is not a node's ledger ({error!r}): check the host by hand (mounts on {BIND_TARGETS}, "
                f"kubepods cgroups), then remove it"]
    own = os.getpid()
    pids = [pid for pid in (int(entry) for entry in os.listdir("/proc") if entry.isdigit())
            if pid != own and any(mark in part for part in cmdline(pid) for mark in marks)]
    stop_pids(pids + _kubepods_pids(), timeout=10)
    problems = undo_host_changes(left["workdir"], left["socket_dir"], left["host_before"], left["created_paths"],
                                 [target for target in BIND_TARGETS if target not in mounted_before])
    if not problems:
        os.unlink(LEDGER)
    return problems


def _unmount(workdir, bind_mounts):
    """Every mount below the node's directories (lazily), then its bind mounts, each as many times as it is stacked
    (the kubelet binds its root directory onto itself to make it shared)."""
    prefixes = [str(workdir) + "/", "/var/lib/kubelet/", "/etc/kubernetes/", "/run/containerd/"]
    below = [point for point, _fs, _src in mounts() if any(point.startswith(p) for p in prefixes)]
    for point in sorted(set(below), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)
    errors = []
    for target in reversed(bind_mounts):
        for _attempt in range(10):
            if target not in {point for point, _fs, _src in mounts()}:
                break
            proc = subprocess.run(["umount", target], capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                errors.append(f"umount {target}: {proc.stderr.strip()}")
                subprocess.run(["umount", "-l", target], capture_output=True, check=False)
                time.sleep(1)
    left = [point for point, _fs, _src in mounts()
            if point in bind_mounts or any(point.startswith(p) for p in prefixes)]
    if left:
        raise NodeError(f"still mounted: {left} ({'; '.join(errors)})")


def _remove_cgroups(keep):
    left = []
    for cgroup in _kubepods_cgroups():
        if cgroup in keep:
            continue
        for dirpath, _dirs, _files in sorted(os.walk(cgroup), key=lambda entry: len(entry[0]), reverse=True):
            try:
                os.rmdir(dirpath)
            except OSError as error:
                left.append(f"{dirpath}: {error}")
    if left:
        raise NodeError("; ".join(left[:5]))


def _restore_sysctls(before):
    for name, value in before.items():
        if _read_sysctl(name) != value:
            with open(f"/proc/sys/{name}", "w") as handle:
                handle.write(value)


def _remove_paths(paths):
    mounted = {point for point, _fs, _src in mounts()}
    left = []
    for path in paths:
        if path in mounted:
            left.append(f"{path}: still mounted")
            continue
        try:
            if os.path.islink(path) or os.path.isfile(path):
                os.unlink(path)
            elif os.path.isdir(path):
                shutil.rmtree(path)
        except OSError as error:
            left.append(f"{path}: {error}")
    if left:
        raise NodeError("; ".join(left))


def port_free(port) -> bool:
    for family, address in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((address, port))
            except OSError as error:
                if family == socket.AF_INET6 and error.errno in (97, 99):  # no IPv6 here
                    continue
                return False
    return True


def own_address() -> str:
    """The address of this machine its default route leaves from (kubeadm advertises the apiserver there)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect(("192.0.2.254", 9))  # no packet is sent: connect on UDP only picks the route
        return sock.getsockname()[0]


# --- processes -------------------------------------------------------------------------------------------------


# --- images ----------------------------------------------------------------------------------------------------


def image_names(kubeadm, version) -> dict:
    """``{component: image}`` from ``kubeadm config images list --kubernetes-version v<version>``."""
    proc = subprocess.run([kubeadm, "config", "images", "list", "--kubernetes-version", f"v{version}"],
                          capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise NodeError(f"kubeadm config images list: {proc.stderr[-2000:]}")
    names = {}
    for line in proc.stdout.split():
        repo = line.rsplit(":", 1)[0].rsplit("/", 1)[1]
        names[repo] = line
    return names


def build_images(workdir, kubeadm) -> Path:
    """The OCI archive of every image both releases' ``kubeadm config images list`` names, from the real binaries."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    pause = compile_static(PAUSE_C, workdir / "pause")
    etcd_entry = compile_static(ETCD_ENTRYPOINT_C, workdir / "etcd-entrypoint")
    archive = OciArchive(workdir / "oci", created_by="kubeupgrade tests/integration/kubeadm_node.py")
    pause_layer = archive.layer({"/pause": str(pause)})
    etcd_layer = archive.layer(with_libraries({
        "/usr/local/bin/etcd": str(etcd_entry), "/usr/local/bin/etcd-3.5": asset(ETCD_VERSION, "etcd"),
        "/usr/local/bin/etcdctl": asset(ETCD_VERSION, "etcdctl")}))
    done = set()
    for version in (FROM_VERSION, TO_VERSION):
        for component, name in image_names(kubeadm, version).items():
            if name in done:
                continue
            done.add(name)
            if component in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
                binary = f"/usr/local/bin/{component}"
                archive.image(name, archive.layer({binary: asset(version, component)}), [binary])
            elif component == "etcd":
                archive.image(name, etcd_layer, ["/usr/local/bin/etcd"],
                              {"io.kubeupgrade.test": f"etcd {ETCD_VERSION} behind the {name.rsplit(':', 1)[1]} tag"})
            elif component == "pause":
                archive.image(name, pause_layer, ["/pause"])
            else:  # kube-proxy, coredns: their addons are skipped; present so that no step tries a registry
                archive.image(name, pause_layer, ["/pause"], {"io.kubeupgrade.test": "placeholder, never run"})
    path = archive.write(workdir / "images.tar")
    shutil.rmtree(workdir / "oci")
    return path


# --- the node --------------------------------------------------------------------------------------------------


class KubeadmNode:
    """One kubeadm control-plane node on this machine; ``start()`` runs ``kubeadm init``, ``stop()`` undoes everything."""

    def __init__(self, workdir, images, version=FROM_VERSION, name=NODE_NAME):
        self.workdir = Path(workdir)
        self.images = Path(images)
        self.version = version
        self.name = name
        self.address = own_address()
        self.endpoint = f"https://{self.address}:6443"
        self.bin = self.workdir / "bin"
        self.containerd_dir = self.workdir / "containerd"
        self.etcd_data = self.workdir / "etcd-data"
        self.log_dir = self.workdir / "logs"
        # its socket in a short directory of its own, not the test's (pytest-xdist's work directories are too long)
        self.containerd = Containerd(self.containerd_dir, self.log_dir / "containerd.log")
        self.socket_dir, self.socket = self.containerd.socket_dir, self.containerd.socket
        self.times = {}
        self._lock = None
        self._containerd = None
        self._mounted = []
        self.host_before = None
        self._created_paths = []

    # -- what tests use

    @property
    def env(self) -> dict:
        """The environment of kubeadm and of ansible-playbook on this node: the target kubeadm, kubelet and the
        systemctl stand-in first on PATH."""
        return {"PATH": f"{self.bin}:{os.environ.get('PATH', '/usr/bin:/bin')}"}

    @property
    def kubeconfig(self) -> str:
        return str(self.workdir / "admin.conf")

    @property
    def etcd_settings(self) -> dict:
        """``kubeupgrade_etcd`` as an operator gives it for this node: the endpoint and the encryption config; the
        certificates are kubeadm's, which the collection defaults to."""
        return {"endpoints": ["https://127.0.0.1:2379"], "encryption_config": "/etc/kubernetes/encryption/config.yaml"}

    def kubeadm(self, *args, timeout=COMMAND_TIMEOUT, check=True):
        log = self.log_dir / "kubeadm.log"
        with open(log, "a") as handle:
            handle.write(f"=== kubeadm {' '.join(args)}\n")
            handle.flush()
            proc = subprocess.run([str(self.bin / "kubeadm"), *args], stdout=handle, stderr=subprocess.STDOUT,
                                  env={**os.environ, **self.env}, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise NodeError(f"kubeadm {' '.join(args)} exited {proc.returncode}:\n{log_tail(log, 60)}\n"
                            f"--- kubelet:\n{log_tail(self.log_dir / 'kubelet.log', 30)}")
        return proc.returncode

    def request(self, method, path, body=None, index=0, timeout=30):
        """(status, JSON or text) of a request to the apiserver as kubeadm's admin (the ``plane`` interface of
        real_binaries' helpers: one apiserver, index 0)."""
        assert index == 0, "one apiserver"
        data, headers = None, {"Accept": "application/json"}
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = {"PATCH": "application/merge-patch+json"}.get(method, "application/json")
        request = urllib.request.Request(self.endpoint + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=self._context) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as error:
            status, raw = error.code, error.read()
        except (urllib.error.URLError, OSError) as error:
            return 0, str(error)
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")

    @property
    def endpoints(self):
        return [self.endpoint]

    def manifest_images(self) -> dict:
        """``{component: image}`` of the static pod manifests kubeadm wrote."""
        found = {}
        for path in sorted(Path("/etc/kubernetes/manifests").glob("*.yaml")):
            pod = yaml.safe_load(path.read_text(encoding="utf-8"))
            found[path.stem] = pod["spec"]["containers"][0]["image"]
        return found

    def running_images(self) -> dict:
        """``{component: image}`` of the static pods' containers that run and are ready, from their mirror pods."""
        status, pods = self.request("GET", "/api/v1/namespaces/kube-system/pods?labelSelector=tier%3Dcontrol-plane")
        if status != 200:
            return {}
        found = {}
        for pod in pods.get("items") or []:
            for container in (pod.get("status") or {}).get("containerStatuses") or []:
                if container.get("ready") and "running" in (container.get("state") or {}):
                    found[pod["metadata"]["labels"].get("component", pod["metadata"]["name"])] = container["image"]
        return found

    def wait_ready(self, expect_version, timeout=READY_TIMEOUT):
        """Until /readyz is ok, /version says ``expect_version`` and the four static pods run the manifests' images."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            status = self.request("GET", "/readyz", timeout=5)[0]
            version = self.request("GET", "/version", timeout=5)[1] if status == 200 else None
            running = self.running_images() if status == 200 else {}
            last = (status, version, running)
            if status == 200 and isinstance(version, dict) and version.get("gitVersion") == f"v{expect_version}" \
                    and running == self.manifest_images():
                return
            time.sleep(2)
        raise NodeError(f"the node was not ready on v{expect_version} within {timeout} s (last: readyz {last[0]}, "
                        f"version {last[1]}, running {last[2]}, manifests {self.manifest_images()}):\n"
                        f"--- kubelet:\n{log_tail(self.log_dir / 'kubelet.log', 30)}")

    def cordon(self, unschedulable=True):
        """kubeadm upgrade's CreateJob check schedules a pod, which no CNI can run: cordoned, it is skipped."""
        status, body = self.request("PATCH", f"/api/v1/nodes/{self.name}", {"spec": {"unschedulable": unschedulable}})
        if status != 200:
            raise NodeError(f"cordon {self.name}: {status} {str(body)[:300]}")

    # -- start

    def start(self):
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._lock = machine_lock()
        left = undo_a_killed_node()
        if left:
            raise NodeError(f"a node whose test process was killed left this machine changed ({LEDGER}), and undoing it "
                            f"failed: {'; '.join(left)}")
        self.host_before = host_state()
        if self.host_before["cgroups"]:
            raise NodeError(f"kubepods cgroups exist before the node starts (another kubelet?): {self.host_before['cgroups']}")
        busy = [port for port in PORTS if not port_free(port)]
        if busy:
            raise NodeError(f"kubeadm's fixed ports are in use on this machine: {busy}")
        for path in BIND_TARGETS:
            if os.path.exists(path) and os.listdir(path):
                raise NodeError(f"{path} is not empty on this machine: not a host for a test node")
        self._prepare_host()
        self._write_files()
        self._start_containerd()
        self._import_images()
        self._init()
        return self

    def _prepare_host(self):
        for path in HOST_PATHS:
            if not os.path.lexists(path):
                self._created_paths.append(path)
        with open(LEDGER, "w", encoding="utf-8") as handle:
            json.dump({"workdir": str(self.workdir), "socket_dir": str(self.socket_dir), "host_before": self.host_before,
                       "created_paths": self._created_paths}, handle)
        for target in BIND_TARGETS:
            private = self.workdir / "host" / target.strip("/").replace("/", "-")
            private.mkdir(parents=True, exist_ok=True)
            os.makedirs(target, exist_ok=True)
            subprocess.run(["mount", "--bind", str(private), target], check=True, capture_output=True)
            self._mounted.append(target)
        # kubeadm reset unmounts below /var/lib/kubelet: its own mount must not propagate to the host's
        subprocess.run(["mount", "--make-private", "/var/lib/kubelet"], check=True, capture_output=True)

    def _write_files(self):
        self.bin.mkdir(parents=True, exist_ok=True)
        for name in ("kubeadm", "kubelet"):
            link = self.bin / name
            if not link.exists():
                link.symlink_to(asset(TO_VERSION, name))
        state = self.workdir / "kubelet-state"
        state.mkdir(exist_ok=True)
        systemctl = self.bin / "systemctl"
        systemctl.write_text(SYSTEMCTL.replace("@STATE@", str(state)).replace("@KUBELET@", str(self.bin / "kubelet")),
                             encoding="utf-8")
        systemctl.chmod(0o755)
        os.symlink(state / "kubelet.log", self.log_dir / "kubelet.log") if not (self.log_dir / "kubelet.log").exists() else None
        self.kubelet_pidfile = state / "kubelet.pid"
        for directory in (self.containerd_dir / "cni-bin", self.containerd_dir / "cni-conf"):
            directory.mkdir(parents=True, exist_ok=True)
        pause = image_names(str(self.bin / "kubeadm"), self.version)["pause"]
        self.containerd_config = self.containerd.write_config(cri=f"""[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{self.containerd_dir / 'cni-bin'}"
    conf_dir = "{self.containerd_dir / 'cni-conf'}"
""")
        # A network configuration whose plugin is never called (every pod here is a static pod on the host network):
        # containerd then reports the network ready, and the node is Ready, as kubeadm upgrade's ControlPlaneNodesReady
        # preflight check requires.
        (self.containerd_dir / "cni-conf" / "10-kubeupgrade-test.conflist").write_text(json.dumps({
            "cniVersion": "1.0.0", "name": "kubeupgrade-test",
            "plugins": [{"type": "bridge", "bridge": "kubeupgrade0", "ipam": {"type": "host-local", "subnet": "10.244.0.0/24"}}]}),
            encoding="utf-8")
        encryption = Path("/etc/kubernetes/encryption")
        encryption.mkdir(parents=True, exist_ok=True)
        key = base64.b64encode(os.urandom(32)).decode()
        (encryption / "config.yaml").write_text(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n"
            "  - resources:\n      - secrets\n      - resourceclaims.resource.k8s.io\n    providers:\n"
            f"      - aescbc:\n          keys:\n            - name: key1\n              secret: {key}\n"
            "      - identity: {}\n", encoding="utf-8")
        (encryption / "config.yaml").chmod(0o600)
        self.etcd_data.mkdir(exist_ok=True)
        self.etcd_data.chmod(0o700)
        self.config = self.workdir / "kubeadm-init.yaml"
        self.config.write_text(yaml.safe_dump_all(self._kubeadm_config()), encoding="utf-8")

    def _kubeadm_config(self):
        from realcp.plane import release_flags
        flags = release_flags(self.version)
        gates = ",".join(f"{k}={v}" for k, v in sorted(flags["feature_gates"].items()))
        runtime = ",".join(f"{k}={v}" for k, v in sorted(flags["runtime_config"].items()))
        init = {"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "InitConfiguration",
                "localAPIEndpoint": {"advertiseAddress": self.address, "bindPort": 6443},
                "nodeRegistration": {"name": self.name, "criSocket": f"unix://{self.socket}", "imagePullPolicy": "Never",
                                     "ignorePreflightErrors": ["all"], "taints": []},
                "skipPhases": ["addon/coredns", "addon/kube-proxy"],
                "timeouts": {"kubernetesAPICall": "5m0s", "controlPlaneComponentHealthCheck": "8m0s",
                             "kubeletHealthCheck": "8m0s"}}
        cluster = {"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "ClusterConfiguration",
                   "kubernetesVersion": f"v{self.version}", "clusterName": "kubeupgrade-test",
                   "etcd": {"local": {"dataDir": str(self.etcd_data)}},
                   "apiServer": {"certSANs": ["127.0.0.1"],
                                 "extraArgs": [{"name": "encryption-provider-config", "value": "/etc/kubernetes/encryption/config.yaml"},
                                               {"name": "feature-gates", "value": gates},
                                               {"name": "runtime-config", "value": runtime}],
                                 "extraVolumes": [{"name": "encryption", "hostPath": "/etc/kubernetes/encryption",
                                                   "mountPath": "/etc/kubernetes/encryption", "readOnly": True,
                                                   "pathType": "DirectoryOrCreate"}]}}
        kubelet = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
                   "cgroupDriver": "cgroupfs", "failCgroupV1": False, "failSwapOn": False,
                   "containerRuntimeEndpoint": f"unix://{self.socket}", "podLogsDir": str(self.workdir / "pod-logs"),
                   "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                                    "nodefs.inodesFree": "1%"},
                   "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99}
        return [init, cluster, kubelet]

    def _start_containerd(self):
        started = time.monotonic()
        self.containerd.start(CONTAINERD_TIMEOUT)
        self._containerd = self.containerd.process
        self.times["containerd"] = round(time.monotonic() - started, 1)

    def ctr(self, *args, check=True, timeout=300):
        return self.containerd.ctr(*args, check=check, timeout=timeout)

    def _import_images(self):
        started = time.monotonic()
        self.containerd.import_images(self.images, snapshotter="overlayfs")  # unpacked into the snapshotter the CRI uses
        self.times["import"] = round(time.monotonic() - started, 1)

    def _init(self):
        started = time.monotonic()
        self.kubeadm("init", "--config", str(self.config), "-v=1", timeout=INIT_TIMEOUT)
        self.times["init"] = round(time.monotonic() - started, 1)
        shutil.copy("/etc/kubernetes/admin.conf", self.kubeconfig)
        os.chmod(self.kubeconfig, 0o600)
        self._context = self._ssl_context()
        self.wait_ready(self.version)
        self.times["init_ready"] = round(time.monotonic() - started, 1)

    def _ssl_context(self):
        config = yaml.safe_load(Path(self.kubeconfig).read_text(encoding="utf-8"))
        cluster = config["clusters"][0]["cluster"]
        user = config["users"][0]["user"]
        ca = self.workdir / "admin-ca.crt"
        cert = self.workdir / "admin.crt"
        key = self.workdir / "admin.key"
        ca.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
        cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
        key.write_bytes(base64.b64decode(user["client-key-data"]))
        key.chmod(0o600)
        context = ssl.create_default_context(cafile=str(ca))
        context.load_cert_chain(str(cert), str(key))
        return context

    # -- stop

    def stop(self) -> list:
        """Undo everything, whatever ``start`` reached; the problems met, and any difference of ``host_state()`` from
        before the node started (empty: the host is as it was)."""
        problems = []

        def step(what, action):
            try:
                action()
            except Exception as error:
                problems.append(f"{what}: {error}")

        if self._containerd is not None and self._containerd.poll() is None:
            step("kubeadm reset", lambda: self.kubeadm("reset", "-f", "--cri-socket", f"unix://{self.socket}", "-v=1",
                                                       timeout=180, check=False))
        step("stop the kubelet", self._stop_kubelet)
        step("stop the pods' processes", self._stop_pod_processes)
        step("stop containerd and its shims", self._stop_containerd)
        problems += undo_host_changes(self.workdir, self.socket_dir, self.host_before, self._created_paths, self._mounted)
        self._mounted = []
        if problems == [] and self.host_before is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(LEDGER)  # the host is back as it was: nothing for the next node to undo
        if self._lock is not None:
            self._lock.close()
            self._lock = None
        return problems

    def _stop_kubelet(self):
        pidfile = getattr(self, "kubelet_pidfile", None)
        if pidfile and pidfile.exists():
            text = pidfile.read_text().strip()
            if text.isdigit() and any(part.endswith(b"/kubelet") for part in cmdline(int(text))[:1]):
                stop_pids([int(text)])

    def _stop_pod_processes(self):
        """Containers kubeadm reset did not remove: their tasks killed through containerd, then any process left in
        the kubepods cgroups (only this node's kubelet made them)."""
        if self._containerd is not None and self._containerd.poll() is None:
            tasks = self.ctr("tasks", "ls", "-q", check=False).stdout.split()
            for task in tasks:
                self.ctr("tasks", "kill", "-s", "SIGKILL", task, check=False)
        stop_pids(_kubepods_pids(), timeout=10)

    def _stop_containerd(self):
        self.containerd.stop(remove_socket_dir=False)  # removed last, below
