# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""observe: what every apiserver endpoint reports, separately, plus the cluster-wide records.

``model`` (the observation as data classes), ``discovery`` and ``crds`` (parsers of discovery
documents and CRDs) are pure; ``apiserver_io`` does the requests (discovery, cluster-wide LISTs,
object counts); ``runner`` is what ``storage_version_info`` calls.

Layer: a capability over ``_agree`` (the agreement its report includes), the API layer and the shared files. The order
is tests/unit/test_package_layers.py.
"""
