# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Credentials on a real kube-apiserver: a rejected token (401) and a request the apiserver sees as anonymous
(403 to system:anonymous) are each named with their own fix, in the check, the agreement and the migration;
never "the apiservers do not agree"."""

from __future__ import annotations

import json

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args

from ansible_collections.kubeupgrade.storage.plugins.modules import (
    storage_migration,
    storage_version_agreement,
    storage_version_check,
)

pytestmark = pytest.mark.slow


def run(capsys, module, args):
    with patch_module_args(args), pytest.raises(SystemExit):
        module.main()
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def kubeconfig_without_user_credentials(plane, path):
    """The admin kubeconfig with its token removed: requests go out with no identity."""
    doc = yaml.safe_load(open(plane.kubeconfig, encoding="utf-8"))
    doc["users"][0]["user"] = {}
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return str(path)


def test_a_rejected_token_and_an_anonymous_request_each_get_their_own_fix(real_plane_factory, tmp_path, capsys):
    plane = real_plane_factory(["1.32"])
    endpoints = list(plane.endpoints)
    wrong = str(plane.write_kubeconfig(tmp_path / "wrong.kubeconfig", token="not-a-token"))
    anonymous = kubeconfig_without_user_credentials(plane, tmp_path / "anonymous.kubeconfig")
    cases = [(wrong, "HTTP 401", "fix the credentials used for"), (anonymous, "saw no identity", "system:anonymous")]
    for kubeconfig, first, second in cases:
        base = {"kubeconfig": kubeconfig, "endpoints": endpoints}
        checked = run(capsys, storage_version_check, dict(base, target_release="1.33"))
        steps = " ".join(b["next_step"] for b in checked.get("blocking", []))
        assert checked["failed"] and first in steps and second in steps, checked.get("blocking")
        agreed = run(capsys, storage_version_agreement, dict(base, timeout=0))
        assert agreed["failed"] and first in agreed["msg"] and "do not agree" not in agreed["msg"], agreed["msg"]
        migrated = run(capsys, storage_migration, dict(base, resources=["configmaps"], timeout=30))
        assert migrated["failed"] and first in migrated["msg"] and "do not agree" not in migrated["msg"], migrated["msg"]
