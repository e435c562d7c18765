# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The etcd layer's settings from module options: the prefix a scan reads."""

from __future__ import annotations

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd.settings import normalize_prefix


@pytest.mark.parametrize("prefix, expected", [("/registry", "/registry/"), ("/registry/", "/registry/"),
                                              ("registry", "/registry/"), ("/k3s/registry", "/k3s/registry/")])
def test_normalize_prefix(prefix, expected):
    assert normalize_prefix(prefix) == expected
