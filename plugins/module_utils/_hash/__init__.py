# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""hash: what ``storage_version_hash`` calls (``runner.py``). The hash itself is ``hashing.py`` (top-level: every
capability uses it); the runner adds the release data (``profiles.py``) and the version order of discovery, which
``hashing.py`` cannot import without a cycle.

Layer: a capability over ``_observe`` (discovery's version order) and the shared files. The order is
tests/unit/test_package_layers.py.
"""
