# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""etcd's protocol buffer messages (a subset of etcd's rpc.proto and kv.proto), generated from proto/ by
scripts/generate_etcd_protos.sh: imported only by ``_etcd/client.py``, inside its guard for grpcio and protobuf."""
