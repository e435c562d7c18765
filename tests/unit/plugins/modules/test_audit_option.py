# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The same malformed audit result is the same error in every module that takes one (only the option's name
differs), before any request: the judge's ``audit``, the records' ``audit``, the migration's ``objects_from_audit``."""

from __future__ import annotations

import pytest
from kube_module_args import BASE_ARGS
from test_audit_result import MALFORMED

from ansible_collections.kubeupgrade.storage.plugins.module_utils import audit_result as result
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError
from ansible_collections.kubeupgrade.storage.plugins.modules import storage_migration, storage_state, storage_version_check

# (module, the option that takes the audit, the other arguments its own checks need)
MODULES = [
    pytest.param(storage_version_check, "audit", {"target_release": "1.33"}, id="storage_version_check"),
    pytest.param(storage_state, "audit", {}, id="storage_state"),
    pytest.param(storage_migration, "objects_from_audit", {"resources": ["configmaps"]}, id="storage_migration"),
]


def parse_error(value, option) -> str:
    with pytest.raises(ConfigurationError) as info:
        result.parse(value, option=option)
    return str(info.value)


@pytest.mark.parametrize("value", [v for _c, v, _n in MALFORMED if v is not None], ids=[c for c, v, _n in MALFORMED if v is not None])
@pytest.mark.parametrize("module, option, args", MODULES)
def test_the_same_malformed_audit_is_the_same_error(run_module, fake_cluster, module, option, args, value):
    failed, found = run_module(module, {**BASE_ARGS, **args, option: value})
    assert failed and found["msg"] == parse_error(value, option), found["msg"]
    assert found["error"]["type"] == "ConfigurationError"
    assert fake_cluster.log == [], "a request was sent before the audit was checked"
