# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Snapshot: the way back. An etcd snapshot taken (or an operator's verified) before the first host is touched.

``model.py`` is pure (the checks and the restore steps); ``runner.py`` takes the snapshot through the etcd layer's
read-only client and proves it restorable in one of its scratch etcd members (``_etcd/``).

Layer: a capability over the etcd layer (the snapshot, its restore proof in a scratch etcd, and ``envelope``'s
protobuf fields, for the UID that identifies a cluster); it imports no other capability. The order is
tests/unit/test_package_layers.py.
"""
