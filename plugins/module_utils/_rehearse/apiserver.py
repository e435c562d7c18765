# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rehearsal's kube-apiserver on the copy: loopback only, in the scratch etcd's workspace (``_etcd/scratch.py``),
with a throwaway service-account key, its own self-signed serving certificate and one admin token."""

from __future__ import annotations

import os
import secrets
import shutil
from typing import List, Optional, Tuple

from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd import scratch
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rehearse.model import RehearsalError


def _tool(argv: List[str], what: str) -> None:
    code, _out, error = scratch.run_tool(argv)
    if code != 0:
        raise RehearsalError(f"{what} failed ({argv[0]}, exit {code}): {error or 'no message'}")


def service_account_key(workspace: scratch.Workspace) -> Tuple[str, str]:
    """A throwaway RSA key pair for the apiserver's required service-account flags (cryptography, else openssl)."""
    private, public = workspace.file("sa.key"), workspace.file("sa.pub")
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
    except ImportError:
        if not shutil.which("openssl"):
            raise RehearsalError("a service-account key for the rehearsal needs the Python package cryptography or the "
                                 "openssl command on the host; install one of them") from None
        _tool(["openssl", "genrsa", "-out", private, "2048"], "generating a throwaway service-account key")
        _tool(["openssl", "rsa", "-in", private, "-pubout", "-out", public], "writing its public key")
        os.chmod(private, 0o600)
        return private, public
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = serialization.Encoding.PEM
    private_pem = key.private_bytes(pem, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption())
    public_pem = key.public_key().public_bytes(pem, serialization.PublicFormat.SubjectPublicKeyInfo)
    workspace.write("sa.key", private_pem.decode("ascii"))
    workspace.write("sa.pub", public_pem.decode("ascii"))
    return private, public


class TargetApiserver:
    """A kube-apiserver binary on the copy (the target, or the current one to rehearse the plan): loopback only, its
    own self-signed serving certificate, one admin token."""

    def __init__(self, workspace: scratch.Workspace, binary: str, etcd_url: str, storage_flags: dict, role: str = "target"):
        self.workspace, self.binary = workspace, binary
        self.role = role
        self.log_name = "kube-apiserver.log" if role == "target" else f"{role}-kube-apiserver.log"
        self.port = scratch.free_port()
        self.token = secrets.token_hex(24)
        self.cert_dir = workspace.file("pki" if role == "target" else f"pki-{role}")
        self.etcd_url, self.storage_flags = etcd_url, dict(storage_flags)
        self.process = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_cert(self) -> str:
        """The self-signed serving certificate the apiserver wrote (its file holds the signing CA too)."""
        return os.path.join(self.cert_dir, "apiserver.crt")

    def argv(self, sa_key: str, sa_pub: str, tokens: str) -> List[str]:
        argv = [self.binary, f"--etcd-servers={self.etcd_url}", "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
                f"--secure-port={self.port}", f"--cert-dir={self.cert_dir}", "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={sa_pub}", f"--service-account-signing-key-file={sa_key}",
                f"--token-auth-file={tokens}", "--authorization-mode=RBAC", "--endpoint-reconciler-type=none",
                "--watch-cache=false", "--profiling=false"]
        flags = dict(self.storage_flags)
        flags.setdefault("service-cluster-ip-range", "10.96.0.0/12")  # kubeadm's default
        return argv + [f"--{name}={value}" for name, value in sorted(flags.items()) if value != ""]

    def start(self) -> None:
        sa_key, sa_pub = service_account_key(self.workspace)
        tokens = self.workspace.write(f"tokens-{self.role}.csv", f'{self.token},kubeupgrade-rehearsal,kubeupgrade-rehearsal,"system:masters"\n')
        self.process = self.workspace.start(self.argv(sa_key, sa_pub, tokens), self.log_name)

    def exit_code(self) -> Optional[int]:
        return self.process.poll() if self.process else None

    def lost_its_port(self) -> bool:
        """Whether it exited because another process took its port between the pick and the bind."""
        return self.exit_code() is not None and scratch.PORT_TAKEN in self.log_text()

    def restart_elsewhere(self) -> None:
        self.port = scratch.free_port()
        os.replace(self.workspace.file(self.log_name), self.workspace.file(self.log_name + ".port-taken"))
        self.start()

    def log_text(self) -> str:
        return self.workspace.log_text(self.log_name)
