# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Documentation of the etcd connection options (``connection_args.ETCD_ARG_SPEC``) and the ``etcd`` action group."""

from __future__ import annotations


class ModuleDocFragment:

    DOCUMENTATION = r"""
options:
  etcd_endpoints:
    description:
      - etcd client URLs, tried in order until one answers; that member is then read.
      - On kubeadm clusters, C(https://<control-plane node address>:2379).
    type: list
    elements: str
  etcd_ca_cert:
    description:
      - CA certificate that signed etcd's serving certificate. kubeadm C(/etc/kubernetes/pki/etcd/ca.crt).
    type: path
  etcd_client_cert:
    description:
      - Client certificate etcd accepts. kubeadm C(/etc/kubernetes/pki/apiserver-etcd-client.crt) (the apiserver's own).
    type: path
  etcd_client_key:
    description:
      - Key of O(etcd_client_cert). kubeadm C(/etc/kubernetes/pki/apiserver-etcd-client.key).
    type: path
  etcd_validate_certs:
    description:
      - Verify etcd's TLS certificate against O(etcd_ca_cert) (or the system CAs). Turn off only for tests.
      - etcd is read through its gRPC API (what C(etcdctl) uses) with the Python packages grpcio and protobuf. With
        V(false) against an C(https) endpoint, which grpcio cannot do (it always verifies), etcd is read through its
        JSON gateway with urllib3 instead - the same requests, at several times etcd's CPU per key read. The gateway is
        also used with a member that answers but not in gRPC (no HTTP/2, as through a proxy that speaks HTTP/1.1 only).
    type: bool
    default: true
  etcd_request_timeout:
    description:
      - Seconds to wait for each answer from etcd - each page read, each part of a snapshot stream (a whole snapshot
        takes as long as it needs).
    type: float
    default: 30
attributes:
  action_group:
    description: Use C(group/kubeupgrade.storage.etcd) in C(module_defaults) to set the etcd connection options once.
    support: full
    membership: [kubeupgrade.storage.etcd]
"""
