# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a binary stores at an emulated release (KEP-4330): the facts seen on real binaries, kept here so that a change
of the rule or the release data that breaks one shows without starting an apiserver (the real-binary comparison of
every resource is tests/integration/test_real_emulation.py)."""

from __future__ import annotations

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils import emulation, errors
from ansible_collections.kubeupgrade.storage.plugins.module_utils.profiles import load_profiles


@pytest.fixture(scope="module")
def shipped():
    return load_profiles()


@pytest.mark.parametrize("binary, emulated, name, stored", [
    # 1.35 pins VolumeAttributesClasses to v1beta1; 1.36 dropped the pin and v1 (1.34) is within compatibility 1.34
    ("1.36", "1.35", "volumeattributesclasses.storage.k8s.io", "v1"),
    # a beta is stored from the release that introduced it (no non-alpha version at min compatibility 1.33)
    ("1.36", "1.34", "ipaddresses.networking.k8s.io", "v1"),
    ("1.36", "1.34", "resourceclaims.resource.k8s.io", "v1beta2"),
    ("1.36", "1.33", "deviceclasses.resource.k8s.io", "v1beta2"),
    # 1.36 pins MutatingAdmissionPolicies to v1beta1 whatever the emulation (its v1alpha1 would be chosen at 1.33)
    ("1.36", "1.33", "mutatingadmissionpolicies.admissionregistration.k8s.io", "v1beta1"),
    # 1.33 pins LeaseCandidates and ClusterTrustBundles to v1beta1, which 1.32 cannot read
    ("1.33", "1.32", "leasecandidates.coordination.k8s.io", "v1beta1"),
    ("1.33", "1.32", "clustertrustbundles.certificates.k8s.io", "v1beta1"),
    ("1.33", "1.32", "resourceclaims.resource.k8s.io", "v1beta1"),
    ("1.33", "1.31", "ipaddresses.networking.k8s.io", "v1beta1"),
    # v1alpha3 has a successor, so it is never chosen: no other version existed by 1.31, the binary's own is stored
    ("1.33", "1.31", "deviceclasses.resource.k8s.io", "v1beta1"),
    ("1.36", "1.35", "configmaps", "v1"),
])
def test_the_storage_version_seen_on_the_real_binary_is_predicted(shipped, binary, emulated, name, stored):
    assert emulation.profile_at(shipped, binary, emulated).get(name).storage_version == stored


def test_at_its_own_release_a_binary_is_its_profile(shipped):
    assert emulation.profile_at(shipped, "1.36", "1.36") is shipped.get("1.36")
    assert emulation.profile_at(shipped, "1.36", None) is shipped.get("1.36")


def test_every_pin_is_the_release_s_own_storage_version(shipped):
    """A pin bypasses emulation: it can only be what the release stores at its defaults."""
    for release, pins in emulation.STORAGE_PINS.items():
        for name, version in pins.items():
            entry = shipped.get(release).get(name)
            assert entry is None or entry.storage_version == version, (release, name)


def test_the_profile_at_an_emulated_release_serves_no_version_newer_than_it_and_decodes_as_the_binary(shipped):
    profile = emulation.profile_at(shipped, "1.36", "1.35")
    assert (profile.release, profile.emulated, profile.min_compatibility, profile.label) == ("1.36", "1.35", "1.34",
                                                                                             "1.36 emulating 1.35")
    mutating = profile.get("mutatingadmissionpolicies.admissionregistration.k8s.io")
    assert "v1" not in mutating.served and "v1beta1" in mutating.served  # v1 came with 1.36
    assert profile.get("mutatingadmissionpolicies.admissionregistration.k8s.io").readable_versions() == \
        shipped.get("1.36").get("mutatingadmissionpolicies.admissionregistration.k8s.io").readable_versions()


@pytest.mark.parametrize("binary, emulated, given, expected", [
    ("1.36", "1.35", None, "1.34"), ("1.36", "1.33", None, "1.33"), ("1.33", "1.32", None, "1.31"),
    ("1.33", "1.31", None, "1.31"), ("1.32", "1.31", None, "1.31"), ("1.36", "1.35", "1.33", "1.33"),
])
def test_the_minimum_compatibility_release(binary, emulated, given, expected):
    assert emulation.min_compatibility(binary, emulated, given) == expected


@pytest.mark.parametrize("binary, emulated, message", [
    ("1.36", "1.32", "kube-apiserver 1.36 cannot emulate 1.32: --emulated-version takes 1.33 to 1.36"),
    ("1.36", "1.37", "cannot emulate 1.37"),
    ("1.32", "1.30", "takes 1.31 to 1.32"),
    ("1.30", "1.29", "takes 1.30 to 1.30"),
])
def test_an_emulated_release_the_binary_refuses_is_one_clear_error(shipped, binary, emulated, message):
    with pytest.raises(errors.ConfigurationError, match=message.replace(".", r"\.")):
        emulation.profile_at(shipped, binary, emulated)
