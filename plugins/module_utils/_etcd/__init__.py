# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The etcd layer: the etcd connection and scan options (``settings.py``), the one etcd client (``client.py``,
``windows.py`` and the generated ``etcdpb/``), the scratch etcd members with the tools of each release
(``scratch.py``, ``versions.py``), and what kube-apiserver stores in etcd: its key layout (``keys.py``) and its values
(``envelope.py``: decode one value, decrypt aescbc/aesgcm/secretbox locally), both pure.

Layer: the bottom, just above the API layer, whose wait loop and pid check it uses, and ``errors``; it imports no
capability, and every capability that reads etcd (audit, snapshot, rehearse) goes through it, never through another.
The order is tests/unit/test_package_layers.py.
"""
