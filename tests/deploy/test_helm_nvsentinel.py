"""The chart and NVSentinel's receivers (issue #26): OAuth client secrets never reach the ConfigMap,
and TokenReview, the one way goodput calls the Kubernetes API, gets its binding and token only
when it is on."""

from __future__ import annotations

from typing import Any

import helm_python
import kubernetes_validate
import pytest

from goodput.config import Settings
from tests.deploy.chart import (
    CHART,
    KUBERNETES_VERSIONS,
    NAMESPACE,
    deployment,
    goodput_toml,
    manifests,
    of_kind,
    render,
)

SA_USER = "system:serviceaccount:nvsentinel:platform-connector"
TOKEN_REVIEW: dict[str, Any] = {"config": {"nvsentinel": {
    "enabled": True, "http_enabled": False, "grpc_host": "0.0.0.0",
    "token_review": {"enabled": True, "allowed_users": [SA_USER],
                     "ca_file": "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"}}}}


def test_oauth_client_secrets_are_refused_in_config(chart: helm_python.Chart) -> None:
    values = {"config": {"nvsentinel": {"oauth_clients": {"nvsentinel": "SENTINEL-oauth-secret-0123456789"}}}}
    with pytest.raises(helm_python.HelmValuesError):
        chart.validate_schema(values)
    # the secret's file, mounted from a Secret (extraVolumes), is what config names instead
    chart.validate_schema({"config": {"nvsentinel": {"oauth_client_files": {
        "nvsentinel": "/var/run/goodput/nvsentinel-oauth/client-secret"}}}})


def test_without_token_review_no_api_rights_and_no_token(chart: helm_python.Chart) -> None:
    docs = manifests(render(chart, {"config": {"nvsentinel": {"enabled": True, "token_file": "/run/t"}}}))
    assert not [d for d in docs if d["kind"] in {"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"}]
    for deploy in of_kind(docs, "Deployment"):
        assert deploy["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


def test_token_review_gets_the_auth_delegator_binding_and_a_token(chart: helm_python.Chart) -> None:
    docs = manifests(render(chart, TOKEN_REVIEW))
    (binding,) = of_kind(docs, "ClusterRoleBinding")
    (account,) = of_kind(docs, "ServiceAccount")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": "system:auth-delegator"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"],
                                    "namespace": NAMESPACE}]
    assert not [d for d in docs if d["kind"] in {"Role", "ClusterRole", "RoleBinding"}]  # nothing more
    # The receivers run in the worker (and the detectors): they need the token; the console does not.
    assert deployment(docs, "worker")["spec"]["template"]["spec"]["automountServiceAccountToken"] is True
    assert deployment(docs, "console")["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    assert goodput_toml(docs)["nvsentinel"]["token_review"]["enabled"] is True
    for version in KUBERNETES_VERSIONS:
        for doc in docs:
            kubernetes_validate.validate(doc, f"{version}.0", strict=True)


def test_the_token_review_render_lints_clean_and_is_a_config_goodput_accepts() -> None:
    report = helm_python.lint(CHART, TOKEN_REVIEW, strict=True, namespace=NAMESPACE,
                              kube_version=f"v{KUBERNETES_VERSIONS[0]}.0")
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not problems and not report["errors"], problems or report["errors"]
    with helm_python.Chart.load(CHART) as chart:
        config = goodput_toml(manifests(render(chart, TOKEN_REVIEW)))
    settings = Settings.model_validate({k: v for k, v in config.items() if k in {"nvsentinel"}})
    assert settings.nvsentinel.token_review.enabled and not settings.nvsentinel.unprotected()
