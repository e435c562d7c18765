# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The apiserver's storage version hash, and its inverse over a set of candidate versions.

The apiserver hashes ``<group>/<version>/<kind>`` of the *storage* version (core group empty, so
``/v1/Pod``), takes the first 8 bytes of SHA-256 and encodes them as padded standard base64
(k8s.io/apiserver pkg/endpoints/discovery/storageversionhash.go). The value is opaque to clients;
we only compare it, and map it back by hashing every candidate version.
"""

from __future__ import annotations

import base64
import hashlib

UNKNOWN = "Unknown"


def storage_version_hash(group: str, version: str, kind: str) -> str:
    """Return the discovery ``storageVersionHash`` for a storage group/version/kind."""
    for label, value in (("version", version), ("kind", kind)):
        if not isinstance(value, str) or not value:
            raise ValueError(f"storage_version_hash needs a non-empty {label}, got {value!r}")
    if group is None:
        group = ""
    digest = hashlib.sha256(f"{group}/{version}/{kind}".encode()).digest()
    return base64.b64encode(digest[:8]).decode("ascii")


def reverse_lookup(hash_value: str, group: str, kind: str, candidate_versions) -> str | None:
    """Return the candidate version of ``group``/``kind`` whose hash is ``hash_value``, or None.

    None means the hash stands for no version we know of, which callers must treat as unknown
    (never as safe).
    """
    if not hash_value or hash_value == UNKNOWN:
        return None
    for version in candidate_versions:
        if version and storage_version_hash(group, version, kind) == hash_value:
            return version
    return None
