# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Compatibility names for code written before the API layer moved to ``module_utils/_http/``.

New code imports from ``_http.settings`` (connection options), ``_http.client`` (HTTP),
``_http.paths`` and ``_http.poll``; this module only re-exports those names.
"""

from __future__ import annotations

from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.client import (
    LIST_CHUNK,
    ApiClient,
    ApiResponse,
    parse_json_body,
)
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.settings import (
    DEFAULT_KUBECONFIG,
    HAS_KUBERNETES,
    HAS_URLLIB3,
    USER_AGENT,
    ConnectionSettings,
    check_url,
)

__all__ = ["DEFAULT_KUBECONFIG", "HAS_KUBERNETES", "HAS_URLLIB3", "LIST_CHUNK", "USER_AGENT", "ApiClient", "ApiResponse",
           "ConnectionSettings", "check_url", "parse_json_body"]
