# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Generated protocol buffer messages of Kubernetes' own encoding (``k8s_pb2``, from proto/k8s.proto: parts of
Kubernetes' generated.proto files) by scripts/generate_etcd_protos.sh: what kube-apiserver serves as
``application/vnd.kubernetes.protobuf`` and stores in etcd. Imported at first use inside a guard for protobuf, only by
``_http/protobuf.messages``, which reads answers and gives ``_etcd/envelope.py`` the messages of stored values."""
