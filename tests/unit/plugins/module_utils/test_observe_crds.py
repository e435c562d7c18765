# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from ansible_collections.kubeupgrade.storage.plugins.module_utils import errors
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe import crds

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "real-apiserver-1.32"


def recording(relative):
    return json.loads((FIXTURES / relative).read_text(encoding="utf-8"))


def body(relative):
    return recording(relative)["body"]


@pytest.mark.parametrize("relative,storage,versions,stored", [
    ("crd/03-get-crd-established.json", "v1alpha1", ["v1alpha1", "v1"], ["v1alpha1"]),
    ("crd/09-get-crd-storedVersions-v1alpha1-v1.json", "v1", ["v1alpha1", "v1"], ["v1alpha1", "v1"]),
    ("crd/19-update-crd-drop-v1alpha1-after-storedVersions-pruned-200.json", "v1", ["v1"], ["v1"]),
    ("svm-sigs/16-get-crd-storedVersions-after-v2-switch.json", "v2", ["v1", "v2"], ["v1", "v2"]),
])
def test_crd_from_real_objects(relative, storage, versions, stored):
    crd = crds.crd_from_object(body(relative))
    assert (crd.name, crd.group, crd.kind, crd.plural, crd.scope) == ("widgets.example.com", "example.com", "Widget", "widgets", "Namespaced")
    assert (crd.storage_version, crd.version_names, crd.stored_versions) == (storage, versions, stored)
    assert crd.generation == body(relative)["metadata"]["generation"]


def test_manifest_without_status_has_no_stored_versions():
    manifest = recording("crd/02-create-crd-201.json")["request"]["body"]
    crd = crds.crd_from_object(manifest)
    assert crd.stored_versions == [] and crd.storage_version == "v1alpha1"


def _manifest():
    return copy.deepcopy(recording("crd/02-create-crd-201.json")["request"]["body"])


def _mutate(path, value):
    def apply(obj):
        target = obj
        for key in path[:-1]:
            target = target[key]
        if value is KeyError:
            del target[path[-1]]
        else:
            target[path[-1]] = value
        return obj
    return apply


@pytest.mark.parametrize("mutate,fragment", [
    (_mutate(["kind"], "ConfigMap"), "is not a CustomResourceDefinition"),
    (_mutate(["apiVersion"], "v1"), "is not a CustomResourceDefinition"),
    (_mutate(["spec", "versions"], []), "spec.versions: Required value"),
    (_mutate(["spec", "versions"], KeyError), "spec.versions: Required value"),
    (_mutate(["spec", "versions", 1, "storage"], True), "must have exactly one version marked as storage version"),
    (_mutate(["spec", "versions", 0, "storage"], False), "must have exactly one version marked as storage version"),
    (_mutate(["spec", "versions", 1, "name"], "v1alpha1"), 'spec.versions[1].name: Duplicate value: "v1alpha1"'),
    (_mutate(["metadata", "name"], "gadgets.example.com"), "must be spec.names.plural"),
    (_mutate(["spec", "group"], ""), "spec.group: Required value"),
])
def test_bad_manifest_one_clear_error(mutate, fragment):
    with pytest.raises(errors.ManifestError) as info:
        crds.parse_manifests([_manifest(), mutate(_manifest())])
    message = str(info.value)
    assert fragment in message
    assert message.startswith("target CRD manifest #2")


def test_not_an_object():
    with pytest.raises(errors.ManifestError, match="#1 must be a CRD object"):
        crds.parse_manifests([42])
    with pytest.raises(errors.ManifestError, match="is not valid YAML"):
        crds.parse_manifests(["kind: [unclosed"])
    with pytest.raises(errors.ManifestError, match="is empty"):
        crds.parse_manifests(["---\n"])
    with pytest.raises(errors.ManifestError, match="is not a Kubernetes object"):
        crds.parse_manifests(["just a string"])


def test_yaml_multi_document_and_lists_are_flattened():
    widget = _manifest()
    gadget = _manifest()
    gadget["metadata"]["name"] = "gadgets.example.com"
    gadget["spec"]["names"] = {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"}
    sprocket = copy.deepcopy(gadget)
    sprocket["metadata"]["name"] = "sprockets.example.com"
    sprocket["spec"]["names"] = {"plural": "sprockets", "kind": "Sprocket"}
    text = yaml.safe_dump(widget) + "---\n" + yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [gadget]})
    parsed = crds.parse_manifests([text, json.dumps(sprocket)])
    assert sorted(parsed) == ["gadgets.example.com", "sprockets.example.com", "widgets.example.com"]
    assert parsed["gadgets.example.com"].kind == "Gadget"


def test_error_in_a_list_names_the_document_and_item():
    text = yaml.safe_dump(_manifest()) + "---\n" + yaml.safe_dump({"kind": "List", "items": [{"kind": "ConfigMap", "apiVersion": "v1"}]})
    with pytest.raises(errors.ManifestError, match=r"target CRD manifest #1 \(document 2\) items\[0\] is not a CustomResourceDefinition"):
        crds.parse_manifests(text)


def test_same_crd_twice():
    with pytest.raises(errors.ManifestError, match="given more than once"):
        crds.parse_manifests([_manifest(), _manifest()])


def test_v1beta1_single_version_form():
    manifest = _manifest()
    manifest["apiVersion"] = "apiextensions.k8s.io/v1beta1"
    del manifest["spec"]["versions"]
    manifest["spec"]["version"] = "v1beta1"
    assert crds.parse_manifests(manifest)["widgets.example.com"].storage_version == "v1beta1"


# The values the real /status accepted without validation (crd/13-16); the main endpoint's 422 wording.
@pytest.mark.parametrize("relative,fragments", [
    ("crd/13-status-update-storedVersions-invalid-empty.json", ["status.storedVersions: Invalid value: []: must have at least one stored version"]),
    ("crd/13-status-update-storedVersions-invalid-missing-storage-version-v1.json", ["must have the storage version v1"]),
    ("crd/13-status-update-storedVersions-invalid-v9-not-in-spec.json", ['status.storedVersions[2]: Invalid value: "v9": must appear in spec.versions']),
    ("crd/13-status-update-storedVersions-invalid-duplicate.json", ['status.storedVersions[1]: Duplicate value: "v1"']),
])
def test_stored_versions_errors_catch_what_status_accepted(relative, fragments):
    crd = crds.crd_from_object(body("crd/09-get-crd-storedVersions-v1alpha1-v1.json"))
    written = recording(relative)["request"]["body"]["status"]["storedVersions"]
    problems = crds.stored_versions_errors(crd, written)
    assert len(problems) == len(fragments)
    for problem, fragment in zip(problems, fragments):
        assert fragment in problem
        assert problem.startswith('CustomResourceDefinition.apiextensions.k8s.io "widgets.example.com" is invalid: ')


def test_real_422_text_is_reproduced():
    """crd/12: dropping v1alpha1 from spec while it is still stored."""
    response = body("crd/12-update-crd-drop-v1alpha1-while-in-storedVersions-422.json")
    dropped = crds.crd_from_object(body("crd/19-update-crd-drop-v1alpha1-after-storedVersions-pruned-200.json"))
    assert crds.stored_versions_errors(dropped, ["v1alpha1", "v1"]) == [response["message"]]


@pytest.mark.parametrize("relative,stored", [
    ("crd/16-status-update-restore-storedVersions-v1alpha1-v1-200.json", ["v1alpha1", "v1"]),
    ("crd/18-status-update-storedVersions-v1-after-rewrite-200.json", ["v1"]),
])
def test_valid_stored_versions(relative, stored):
    crd = crds.crd_from_object(body("crd/09-get-crd-storedVersions-v1alpha1-v1.json"))
    assert recording(relative)["request"]["body"]["status"]["storedVersions"] == stored
    assert crds.stored_versions_errors(crd, stored) == []
