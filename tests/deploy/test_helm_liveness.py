"""The chart's heartbeat endpoint (`liveness`): the agents on the GPU nodes reach it through a Service,
and the secret that keys every node's own token is mounted in its pod and nowhere else.

The agents themselves run on the GPU nodes, outside the chart (docs/deployment.md, "The node agent
on Kubernetes"); each holds only its own node's token (`goodput agent-token --node N`)."""

from __future__ import annotations

from typing import Any

import helm_python
import pytest

from tests.deploy.chart import (
    NAMESPACE,
    SENTINEL,
    component,
    container_env,
    deployment,
    inline_secrets,
    manifests,
    of_kind,
    render,
    secret_store,
    values_for,
)

pytestmark = pytest.mark.timeout(120)
SECRET_DIR = "/var/run/secrets/goodput/liveness"


def docs_with(chart: helm_python.Chart, **liveness: Any) -> list[dict[str, Any]]:
    values = inline_secrets("in-cluster")
    values["liveness"] = {**values["liveness"], **liveness}
    return manifests(render(chart, values))


def test_off_by_default_nothing_listens(chart: helm_python.Chart) -> None:
    docs = manifests(render(chart, values_for("in-cluster")))
    assert not [d for d in docs if d["metadata"]["labels"].get("app.kubernetes.io/component") == "liveness"]


def test_one_pod_hears_every_heartbeat_behind_a_service(chart: helm_python.Chart) -> None:
    docs = docs_with(chart)
    live = deployment(docs, "liveness")
    # One tracker must hear each node's every heartbeat: a second replica behind the Service would
    # hear half of them, and a rolling update two at once.
    assert live["spec"]["replicas"] == 1 and live["spec"]["strategy"] == {"type": "Recreate"}
    pod = live["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"] == ["worker"]
    assert [(p["name"], p["containerPort"]) for p in container["ports"]] == [("heartbeat", 8789)]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "heartbeat"}
    env = container_env(container, secret_store(docs))
    assert (env["GOODPUT_LIVENESS__ENABLED"], env["GOODPUT_LIVENESS__HOST"], env["GOODPUT_LIVENESS__PORT"]) == \
        ("true", "0.0.0.0", "8789")
    assert env["GOODPUT_LIVENESS__SECRET_FILE"] == f"{SECRET_DIR}/secret"
    (service,) = [s for s in of_kind(docs, "Service") if component(s) == "liveness"]
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"] == [{"name": "heartbeat", "port": 8789, "targetPort": "heartbeat",
                                         "protocol": "TCP"}]
    assert service["spec"]["selector"] == live["spec"]["selector"]["matchLabels"]
    (policy,) = [p for p in of_kind(docs, "NetworkPolicy") if component(p) == "liveness"]
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": "heartbeat", "protocol": "TCP"}] and rule["from"]


def test_the_token_secret_is_mounted_in_the_heartbeat_pod_only(chart: helm_python.Chart) -> None:
    docs = docs_with(chart)
    (secret,) = [s for s in of_kind(docs, "Secret") if s["metadata"]["name"].endswith("-liveness")]
    assert secret_store(docs)[(secret["metadata"]["name"], "secret")] == SENTINEL["liveness"]
    for deploy in of_kind(docs, "Deployment"):
        pod = deploy["spec"]["template"]["spec"]
        volumes = [v for v in pod["volumes"] if v.get("secret", {}).get("secretName") == secret["metadata"]["name"]]
        mounts = [m for c in pod["containers"] for m in c["volumeMounts"] if m["mountPath"] == SECRET_DIR]
        if component(deploy) == "liveness":
            (volume,) = volumes
            assert volume["secret"]["items"] == [{"key": "secret", "path": "secret"}]
            assert volume["secret"]["defaultMode"] == 0o440
            assert [m["readOnly"] for m in mounts] == [True]
        else:
            assert volumes == [] and mounts == []


def test_an_existing_secret_and_another_port(chart: helm_python.Chart) -> None:
    docs = docs_with(chart, port=9789, service={"type": "ClusterIP", "port": 443},
                     secret={"existingSecret": "site-liveness", "key": "hmac", "value": ""})
    assert not [s for s in of_kind(docs, "Secret") if s["metadata"]["name"].endswith("-liveness")]
    pod = deployment(docs, "liveness")["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v.get("secret", {}).get("secretName") == "site-liveness"]
    assert volume["secret"]["items"] == [{"key": "hmac", "path": "secret"}]
    assert pod["containers"][0]["ports"][0]["containerPort"] == 9789
    (service,) = [s for s in of_kind(docs, "Service") if component(s) == "liveness"]
    assert service["spec"]["ports"][0]["port"] == 443


@pytest.mark.parametrize("value", ["", "too-short-for-an-hmac-key"])
def test_enabled_without_a_long_enough_secret_is_refused(chart: helm_python.Chart, value: str) -> None:
    with pytest.raises(Exception, match="/liveness/secret/value': minLength"):
        render(chart, {**values_for("in-cluster"), "liveness": {"enabled": True,
                                                               "secret": {"existingSecret": "", "value": value}}})


def test_the_chart_owns_where_the_endpoint_listens_and_its_secret(chart: helm_python.Chart) -> None:
    for key in ("enabled", "host", "port", "secret_file"):
        with pytest.raises(Exception, match=f"invalid propertyName '{key}'"):
            render(chart, {**values_for("in-cluster"), "config": {"liveness": {key: "x"}}})
    render(chart, {**values_for("in-cluster"), "config": {"liveness": {"missed": 4}}})  # tuning is the site's


def test_the_notes_say_where_agents_send_heartbeats(chart: helm_python.Chart) -> None:
    values = inline_secrets("in-cluster")
    notes = next(t for p, t in render(chart, values).items() if p.endswith("NOTES.txt"))
    assert f"http://goodput-liveness.{NAMESPACE}.svc:8789" in notes
    assert "goodput agent-token --node" in notes
