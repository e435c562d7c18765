# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""pytest fixtures of real control planes; tests/conftest.py re-exports them."""

import os

import pytest

from realcp.plane import ControlPlane, reap_leftovers, require_assets

_reaped = False


def _reap_once(tmp_path_factory):
    """Planes of earlier runs killed before their cleanup (SIGKILL, a crash) may still run: stop them once per process."""
    global _reaped
    if _reaped:
        return
    _reaped = True
    base = tmp_path_factory.getbasetemp()
    root = next((parent for parent in base.parents if parent.name.startswith("pytest-of-")), base.parent)
    reap_leftovers(root)


@pytest.fixture
def real_plane_factory(tmp_path, tmp_path_factory):
    """A function ``start(releases=[...], **options) -> ControlPlane`` (started); every plane is stopped at teardown.

    Skips (fails in CI) when the binaries of a release are missing; see ``realcp.require_assets``.
    """
    if os.environ.get("KUBEUPGRADE_TEST_KUBECONFIG"):
        pytest.skip("starts its own real control plane; with KUBEUPGRADE_TEST_KUBECONFIG only the tests against that "
                    "cluster run")
    _reap_once(tmp_path_factory)
    planes = []

    def start(releases=("1.32", "1.32"), **options):
        releases = [releases] if isinstance(releases, str) else list(releases)
        require_assets(*releases)
        plane = ControlPlane(tmp_path / f"real-plane-{len(planes)}", releases=releases, **options)
        planes.append(plane)
        return plane.start()

    yield start
    for plane in planes:
        plane.stop_all()
