"""deploy/kserve against KServe's API types (tests/kserve_schema.py: the KServe SDK's
generated models, strictly, with the Kubernetes schemas for the embedded types)."""

from __future__ import annotations

import copy

import kserve_schema
import pytest
from kserve_schema import KServeSchemaError

from deploy_manifests import KSERVE, KUBERNETES_VERSION, one, rendered


def kserve_resources() -> list[dict]:
    return [r for r in rendered(KSERVE) if "kserve.io" in r["apiVersion"]]


def test_the_sdk_types_are_read_from_the_pinned_wheel():
    types = kserve_schema.kserve_types()
    assert len(types) > 100
    spec_types, spec_keys, required = types["V1alpha1ServingRuntimeSpec"]
    assert spec_types["containers"] == "list[V1Container]" and "containers" in required
    assert spec_keys["supported_model_formats"] == "supportedModelFormats"


def test_the_inference_service_and_serving_runtime_validate():
    checked = sorted(kserve_schema.validate(r, KUBERNETES_VERSION) for r in kserve_resources())
    assert checked == ["V1alpha1ServingRuntime", "V1beta1InferenceService"]


@pytest.mark.parametrize(("break_it", "error"), [
    (lambda isvc, rt: isvc["spec"]["predictor"].update(modle=isvc["spec"]["predictor"].pop(
        "model")), "unknown field 'modle' in V1beta1PredictorSpec"),
    (lambda isvc, rt: isvc["spec"]["predictor"].update(minReplicas="two"),
     "minReplicas: 'two' is not int"),
    (lambda isvc, rt: isvc.update(spec={}), "V1beta1InferenceServiceSpec needs predictor"),
    (lambda isvc, rt: rt["spec"]["containers"][0]["ports"][0].pop("containerPort"),
     "'containerPort' is a required property"),
    (lambda isvc, rt: rt["spec"]["containers"][0].update(readinesProbe={}),
     "Additional properties are not allowed ('readinesProbe' was unexpected)"),
    (lambda isvc, rt: rt["spec"].pop("containers"), "V1alpha1ServingRuntimeSpec needs containers"),
])
def test_a_broken_resource_is_refused_with_the_field_named(break_it, error):
    resources = copy.deepcopy(kserve_resources())
    isvc, runtime = (one(resources, "InferenceService"), one(resources, "ServingRuntime"))
    break_it(isvc, runtime)
    with pytest.raises(KServeSchemaError) as refused:
        for resource in (isvc, runtime):
            kserve_schema.validate(resource, KUBERNETES_VERSION)
    assert error in str(refused.value)
