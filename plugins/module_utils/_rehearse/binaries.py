# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the rehearsal's binaries come from: a path given, else the images a kubeadm control-plane host already
holds in containerd's ``k8s.io`` namespace (``kubeadm config images pull`` puts the target's there before an upgrade;
etcd's is the one its static pod runs). An image is mounted read-only with containerd's own client (``ctr images
mount``) for the run, then unmounted and its snapshot removed. A target image containerd lacks is pulled (``ctr images
pull``) when its name is known (given, or kubeadm's for the target patch); it stays, as kubeadm's pull would leave it.

What cannot be had here raises ``Unavailable``: the rehearsal then fails, or, when it is the default evidence
(``if_unavailable: skip``), reports that it did not run, why, and how to make it run."""

from __future__ import annotations

import glob
import os
import re
import shutil
import tempfile
from typing import List, Optional, Tuple

from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd import scratch
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.settings import process_running
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError

try:
    import yaml

    HAS_YAML = True
except ImportError:  # pragma: no cover - PyYAML comes with ansible-core
    HAS_YAML = False

NAMESPACE = "k8s.io"  # the CRI plugin's namespace: the images kubelet and kubeadm see
DEFAULT_CONTAINERD = "/run/containerd/containerd.sock"
MOUNT_PREFIX = "kubeupgrade-image-"  # <prefix><component>-<pid>-<random>: a mount whose run is gone is unmounted
ETCD_MANIFEST = "/etc/kubernetes/manifests/etcd.yaml"  # kubeadm's stacked etcd
# Where the upstream images keep their binary (registry.k8s.io/kube-apiserver, registry.k8s.io/etcd).
IN_IMAGE = {"kube-apiserver": "usr/local/bin/kube-apiserver", "etcd": "usr/local/bin/etcd"}
_TAG = re.compile(r"(?:^|/)(?P<component>[a-z-]+):v?(?P<major>\d+)\.(?P<minor>\d+)\.(?P<patch>\d+)(?P<rest>[-+.\w]*)$")


class Unavailable(ConfigurationError):
    """Something the rehearsal needs that this host does not have (a binary, its image, the etcd connection, the
    cluster's flags); the message says what and how to provide it."""


def etcd_manifest_beside(apiserver_manifest: str = "") -> str:
    """The etcd static pod in the directory of the kube-apiserver's (kubeadm writes both to its manifests directory);
    kubeadm's path when no apiserver manifest was read."""
    if not apiserver_manifest:
        return ETCD_MANIFEST
    return os.path.join(os.path.dirname(apiserver_manifest), "etcd.yaml")


def image_of_manifest(path: str) -> Optional[str]:
    """The image of a static pod manifest's first container, or None when there is no such file."""
    if not os.path.isfile(path) or not HAS_YAML:
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            doc = yaml.safe_load(handle)
        return str(doc["spec"]["containers"][0]["image"])
    except (OSError, UnicodeDecodeError, yaml.YAMLError, KeyError, IndexError, TypeError):
        return None


def image_version(name: str) -> Optional[Tuple[int, int, int]]:
    """(major, minor, patch) of an image's tag (``registry.k8s.io/kube-apiserver:v1.36.2``), None without one."""
    match = _TAG.search(name)
    return tuple(int(match.group(part)) for part in ("major", "minor", "patch")) if match else None


def newest_for_release(names: List[str], component: str, release: str) -> Optional[str]:
    """The newest patch of ``release`` (``1.36``, or ``1.36.2`` for that patch only) among image names
    (``registry.k8s.io/kube-apiserver:v1.36.2``, from any registry: kubeadm's imageRepository may be a mirror), a
    plain release before a pre-release of the same patch; None when there is none."""
    wanted = [int(part) for part in str(release).lstrip("v").split(".")[:3]]
    found = []
    for name in names:
        match = _TAG.search(name)
        if not match or match.group("component") != component:
            continue
        version = [int(match.group(part)) for part in ("major", "minor", "patch")]
        if version[:len(wanted)] == wanted:
            found.append(((version[2], not match.group("rest")), name))
    return max(found)[1] if found else None


REGISTRY = "registry.k8s.io"  # kubeadm's default imageRepository
PULL_TIMEOUT = 600.0


def image_to_pull(component: str, image: Optional[str], version: Optional[str]) -> Optional[str]:
    """The image to pull when it is not in containerd: ``image`` when given, else the one ``kubeadm config images
    pull`` pulls for a patch release at the default imageRepository (``registry.k8s.io/kube-apiserver:v1.35.3``); None
    for a minor release only (its patch is unknown)."""
    if image:
        return image
    parts = str(version or "").lstrip("v").split(".")
    if len(parts) == 3 and all(part.isdigit() for part in parts):
        return f"{REGISTRY}/{component}:v{'.'.join(parts)}"
    return None


def pull_failed(image: str, address: str, error: str, option: str = "") -> str:
    """What the operator reads when the image is absent and could not be pulled: the image, why, how to fix."""
    version = image_version(image)
    release = "v{}.{}.{}".format(*version) if version else "<version>"
    lines = [line.strip() for line in (error or "").splitlines() if line.strip()]
    return (f"{option + ': ' if option else ''}{image} is not in containerd's {NAMESPACE} namespace at {address}, and pulling "
            f"it failed ({lines[-1][:300] if lines else 'no error message'}): pull it on this host (kubeadm config images pull "
            f"--kubernetes-version {release}, or crictl pull {image}), or import it (ctr --namespace {NAMESPACE} images import "
            "<archive>), or give apiserver_binary")


class ImageMounts:
    """Images mounted read-only for one run; ``close`` unmounts them and removes their snapshots and directories."""

    def __init__(self, address: Optional[str] = None, mount: bool = True, pull: bool = True):
        self.address = address or DEFAULT_CONTAINERD
        self.may_mount = mount  # False for a plan made outside a run, which would not unmount
        self.may_pull = pull and mount  # False in check mode: a pull changes the host's containerd
        self.mounted: List[Tuple[str, str]] = []  # (image, directory)
        self.pulled: List[str] = []  # images this run pulled into containerd (left there: the upgrade needs them)
        self.stale_unmounted: List[str] = []  # mounts a killed run left, unmounted by this one
        self._names: Optional[List[str]] = None
        self._stale_checked = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _ctr(self, *args, timeout: float = 120.0):
        return scratch.run_tool([self._client(), "--address", self.address, "--namespace", NAMESPACE, *args], timeout=timeout)

    def _client(self) -> str:
        client = shutil.which("ctr")
        if not client:
            raise Unavailable("containerd's client ctr is not in PATH on this host, so the target kube-apiserver cannot be "
                              "taken from its image: give apiserver_binary (the binary's path), or run where containerd is")
        if not os.path.exists(self.address):
            raise Unavailable(f"no containerd socket at {self.address} (containerd_address) on this host: give "
                              "apiserver_binary, or containerd_address where containerd listens")
        return client

    def names(self) -> List[str]:
        if self._names is None:
            code, out, error = self._ctr("images", "ls", "-q", timeout=60)
            if code != 0:
                raise Unavailable(f"containerd at {self.address} did not list its {NAMESPACE} images ({error or f'exit {code}'}): "
                                  "check that it runs and that this user may use its socket (become), or give apiserver_binary")
            self._names = [line.strip() for line in out.splitlines() if line.strip()]
        return self._names

    def pull(self, image: str, option: str = "") -> str:
        """``ctr images pull`` of an image this containerd lacks; Unavailable saying how to provide it when it fails
        (no registry reachable, no credentials, a mirror kubeadm's imageRepository names)."""
        code, _out, error = self._ctr("images", "pull", image, timeout=PULL_TIMEOUT)
        if code != 0:
            raise Unavailable(pull_failed(image, self.address, error or f"ctr exited {code}", option))
        self.pulled.append(image)
        if self._names is not None:
            self._names.append(image)
        return image

    def binary(self, component: str, image: Optional[str] = None, release: Optional[str] = None, option: str = "",
               pull: Optional[str] = None) -> str:
        """The path of ``component``'s binary in its image, mounted read-only: ``image`` when given, else the newest
        patch of ``release`` this containerd holds; when it holds neither, ``pull`` (an image name) is pulled first."""
        names = self.names()
        unpulled = " (not pulled in check mode)" if pull and not self.may_pull else ""
        pull = pull if self.may_pull else None
        if image:
            if image not in names:
                if not pull:
                    raise Unavailable(f"{option or component + '_image'}: {image} is not in containerd's {NAMESPACE} namespace at "
                                      f"{self.address}{unpulled}: pull it first (kubeadm config images pull --kubernetes-version "
                                      f"<version>, or crictl pull {image}), or give the binary's path")
                self.pull(image, option)
        else:
            image = newest_for_release(names, component, release) if release else None
            if not image and pull:
                image = self.pull(pull)
            if not image:
                raise Unavailable(f"no {component} image of {release or 'the target release'} in containerd's {NAMESPACE} "
                                  f"namespace at {self.address}{unpulled}: pull the target's images first (kubeadm config images pull "
                                  "--kubernetes-version <version>), or give apiserver_binary")
        if not self.may_mount:
            raise ConfigurationError(f"{component}: {image} would have to be mounted, outside a run that unmounts it: give "
                                     "the binary's path")
        self._unmount_stale()
        directory = tempfile.mkdtemp(prefix=f"{MOUNT_PREFIX}{component}-{os.getpid()}-")
        code, _out, error = self._ctr("images", "mount", image, directory)
        if code != 0:
            os.rmdir(directory)
            raise Unavailable(f"{image} could not be mounted read-only from containerd at {self.address} ({error or f'exit {code}'}): "
                              "give the binary's path instead")
        self.mounted.append((image, directory))
        path = os.path.join(directory, IN_IMAGE[component])
        if not os.path.isfile(path):
            raise Unavailable(f"{image} has no /{IN_IMAGE[component]} (not an upstream {component} image?): give the binary's path")
        return path

    def _unmount_stale(self) -> None:
        """Unmount what a killed run left (its pid, in the directory's name, gone), once per run before the first mount;
        a directory ctr will not unmount is left as it is, so that nothing mounted is deleted."""
        if self._stale_checked:
            return
        self._stale_checked = True
        for directory in glob.glob(os.path.join(tempfile.gettempdir(), MOUNT_PREFIX + "*")):
            owner = re.match(r"[a-z-]+?-(\d+)-[^/]*$", os.path.basename(directory)[len(MOUNT_PREFIX):])
            if not owner or process_running(int(owner.group(1))) or not os.path.isdir(directory):
                continue
            if self._unmount(directory, mounted=os.path.ismount(directory)):
                self.stale_unmounted.append(directory)

    def summary(self) -> List[dict]:
        return [{"image": image, "mounted_at": directory, "pulled": image in self.pulled} for image, directory in self.mounted]

    def close(self) -> None:
        """Unmount (removing the snapshot ctr made) and remove the directory; a failure is left for the operator
        only if ctr itself refuses, and then the directory is kept so that nothing mounted is deleted."""
        while self.mounted:
            self._unmount(self.mounted.pop()[1])

    def _unmount(self, directory: str, mounted: bool = True) -> bool:
        """Unmount ``directory`` (removing the snapshot ctr made) and remove it; False, the directory kept, when ctr
        refuses or it cannot be removed."""
        if mounted and self._ctr("images", "unmount", "--rm", directory, timeout=60)[0] != 0:
            return False
        try:
            os.rmdir(directory)
        except OSError:
            return False
        return True
