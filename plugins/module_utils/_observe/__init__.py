# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""observe: what every apiserver endpoint reports, separately, plus the cluster-wide records; and whether they agree.

``model`` (the observation as data classes), ``discovery`` and ``crds`` (parsers of discovery
documents and CRDs) are pure; ``apiserver_io`` does the requests (discovery, cluster-wide LISTs,
object counts); ``runner`` is what ``storage_version_info`` calls.

Whether all apiservers report the same storage versions (a migration may only run once they do): ``agreement``
compares one observation and ``roll`` says where a rolling upgrade stands (pure); ``wait`` polls until enough
consecutive observations agree; ``agreement_runner`` is what ``storage_version_agreement`` calls.

Layer: a primitive below every capability, the apiservers as each of them sees them (``apiserver_io.observer_for``
is how a module's runner observes), over the API layer and the shared files; it imports no capability. The order is tests/unit/test_package_layers.py.
"""
