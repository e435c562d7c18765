# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one API layer: connection settings, the HTTP client, API paths and waiting, below every capability.

Layer: the bottom with the etcd layer; it imports only the shared ``errors`` and ``_validate``, and every package
above it may use it. The order is tests/unit/test_package_layers.py.
"""
