# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Generated protocol buffer messages, from proto/ by scripts/generate_etcd_protos.sh: etcd's (a subset of its rpc.proto
and kv.proto), imported only by ``_etcd/client.py`` inside its guard for grpcio and protobuf. (The messages of the
values kube-apiserver stores are Kubernetes' own encoding: ``_http/k8spb/``.)"""
