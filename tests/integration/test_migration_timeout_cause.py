# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""storage_migration that times out because every request fails says so: the timeout names the last failure
(status and reason, apiserver, request, how many attempts), not only "timed out after 0 objects"."""

from __future__ import annotations

import re

import pytest
from test_migration import _install_crd, run
from test_migration_faults import WIDGETS, WIDGETS_PATH, put_widgets


@pytest.fixture
def plane(control_plane_factory):
    plane = control_plane_factory(apiservers=3, releases="1.32", tls=True, seed="demo", migrator_delay=0.2)
    _install_crd(plane, "storage_state_crd.json")
    return plane


def test_persistent_500s_and_a_short_timeout_name_the_500(plane, capsys):
    put_widgets(plane, 5)
    plane.admin.fault("status", code=500, method="GET", path_regex=f"^{re.escape(WIDGETS_PATH)}$")
    failed, result = run(plane, capsys, resources=[WIDGETS], backend="client", timeout=4)
    assert failed
    message = result["msg"]
    assert f"Migration of {WIDGETS} timed out after 0 objects" in message, message
    assert re.search(r"every request since \d\d:\d\d:\d\d UTC \(the last \d+s\) failed; last: HTTP 500 \w+ from https://",
                     message), message
    assert f"(GET {WIDGETS_PATH})" in message and re.search(r"\(\d+ attempts\)", message), message
