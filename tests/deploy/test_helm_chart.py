"""The Helm chart (deploy/helm/goodput), rendered and linted by Helm's own engine and validated offline.

No helm binary and no cluster: `helm_python` (helm-python-sdk) binds Helm v4's Go SDK, so the
templates, `values.schema.json` and `helm lint` run exactly as `helm install` would run them; every
manifest is then checked against the Kubernetes API schemas that `kubernetes-validate` bundles,
strictly (an unknown field is an error). On top of that, the configuration each pod would get (the
ConfigMap's goodput.toml plus the container's environment, with stand-in secrets) is loaded into
goodput's own `Settings`, and each container's arguments are parsed by goodput's CLI: a chart that
renders valid Kubernetes but a config goodput refuses fails here, not in a cluster.
"""

from __future__ import annotations

import base64
import json
import os
import re
from pathlib import Path
from typing import Any

import helm_python
import kubernetes_validate
import pytest

from goodput.config import SchedulerKind, Settings
from tests.deploy.chart import (
    CHART,
    KUBERNETES_VERSIONS,
    NAMESPACE,
    SENTINEL,
    VARIANTS,
    component,
    config_text,
    container_env,
    containers,
    deployment,
    goodput_toml,
    inline_secrets,
    manifests,
    of_kind,
    render,
    secret_store,
    values_for,
)
from workers.console.server import check_bind
from workers.main import build_parser


@pytest.fixture(scope="module", params=list(VARIANTS))
def variant(request: pytest.FixtureRequest, chart: helm_python.Chart) -> tuple[str, dict[str, Any], list[dict]]:
    values = values_for(request.param)
    return request.param, values, manifests(render(chart, values))


# -- render, lint, validate -------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(VARIANTS))
def test_lint_is_clean(name: str) -> None:
    report = helm_python.lint(CHART, values_for(name), strict=True, namespace=NAMESPACE,
                              kube_version=f"v{KUBERNETES_VERSIONS[0]}.0")
    # Severity 1 is advice (an icon); 2 (warning) and 3 (error) fail.
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not problems and not report["errors"], problems or report["errors"]


def test_every_manifest_is_valid_kubernetes(variant: tuple[str, dict[str, Any], list[dict]]) -> None:
    _, _, docs = variant
    assert docs
    for doc in docs:
        for version in KUBERNETES_VERSIONS:
            key = (version, json.dumps(doc, sort_keys=True))
            if key not in VALIDATED:  # the variants share most objects; each is checked once
                # Strict: unknown fields are errors; an unknown kind raises SchemaNotFoundError.
                kubernetes_validate.validate(doc, version, strict=True)
                VALIDATED.add(key)


VALIDATED: set[tuple[str, str]] = set()


def test_the_pods_get_a_config_goodput_accepts(variant: tuple[str, dict[str, Any], list[dict]],
                                               tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """goodput.toml from the ConfigMap plus each container's environment (secrets resolved to
    stand-ins, $(VAR) expanded as the kubelet does) make Settings goodput loads, and the container's
    arguments are a command goodput's CLI parses."""
    name, values, docs = variant
    config_file = tmp_path / "goodput.toml"
    config_file.write_text(config_text(docs))
    secrets = secret_store(docs)
    for deploy in of_kind(docs, "Deployment"):
        for container in deploy["spec"]["template"]["spec"]["containers"]:
            with monkeypatch.context() as env:
                for key in [k for k in os.environ if k.startswith("GOODPUT_")]:
                    env.delenv(key)
                for key, value in container_env(container, secrets).items():
                    env.setenv(key, value)
                env.setenv("GOODPUT_CONFIG", str(config_file))
                settings = Settings()
            args = build_parser().parse_args(container["args"])
            expected = SchedulerKind.SLURM_SSH if values.get("mode") == "ssh" else SchedulerKind.SLURM_REST
            assert settings.scheduler is expected, name
            if args.command == "console":
                console = settings.console.model_copy(update={"host": args.host, "port": args.port})
                check_bind(console)  # beyond loopback: allow_remote and users, or it raises
                assert console.users and settings.console.session_secret is not None
            elif component(deploy) == "detectors":
                assert settings.push.enabled and settings.push.tokens and settings.push.host == "0.0.0.0"
            if args.command == "worker":
                assert settings.resubmit_key is not None and len(settings.resubmit_key.get_secret_value()) >= 16


# -- what matters -----------------------------------------------------------------------------------

def test_every_container_is_non_root_with_a_read_only_root(variant: tuple[str, dict[str, Any], list[dict]]) -> None:
    _, _, docs = variant
    workloads = [d for d in docs if d["kind"] in {"Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob", "Pod"}]
    assert {component(d) for d in workloads} >= {"worker"}
    for workload in workloads:
        pod = workload["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] > 0
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
        assert pod["automountServiceAccountToken"] is False
        assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
        assert not [v for v in pod["volumes"] if "hostPath" in v]
        for container in containers(pod):
            context = container["securityContext"]
            assert context["runAsNonRoot"] is True, container["name"]
            assert context["readOnlyRootFilesystem"] is True, container["name"]
            assert context["allowPrivilegeEscalation"] is False, container["name"]
            assert context["privileged"] is False, container["name"]
            assert context["capabilities"]["drop"] == ["ALL"] and "add" not in context["capabilities"]
            assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
            # Writable places are volumes: data_dir and /tmp.
            mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
            assert "/var/lib/goodput" in mounts and "/tmp" in mounts


@pytest.mark.parametrize("mode", ["in-cluster", "ssh"])
def test_no_secret_value_is_rendered_outside_a_secret(chart: helm_python.Chart, mode: str) -> None:
    rendered = render(chart, inline_secrets(mode))
    docs = manifests(rendered)
    assert of_kind(docs, "Secret"), "inline values make Secrets"
    in_mode = {"jwt"} if mode == "in-cluster" else {"ssh_key", "known_hosts"}
    sentinels = [s for k, s in SENTINEL.items() if k in in_mode or k not in {"jwt", "ssh_key", "known_hosts"}]
    encoded = [base64.b64encode(s.encode()).decode() for s in sentinels]
    for path, text in rendered.items():  # ConfigMap, Deployments, Services, NOTES.txt...
        if path.endswith("/secrets.yaml"):
            continue
        assert "SENTINEL" not in text, path
        assert not [e for e in encoded if e in text], path
    # Every one of them is in a Secret, and only Secrets come out of secrets.yaml.
    assert {d["kind"] for d in manifests({"s": rendered["goodput/templates/secrets.yaml"]})} == {"Secret"}
    assert set(sentinels) <= set(secret_store(docs).values())


def test_config_map_holds_no_credential_settings(variant: tuple[str, dict[str, Any], list[dict]]) -> None:
    _, _, docs = variant
    config = goodput_toml(docs)
    assert "resubmit_key" not in config and "notify_webhook_url" not in config
    assert not {"users", "session_secret"} & set(config.get("console", {}))
    assert "tokens" not in config.get("push", {}) and "tokens" not in config.get("nvsentinel", {})


def test_ssh_mode_mounts_the_key_and_known_hosts(chart: helm_python.Chart) -> None:
    values = values_for("ssh")
    docs = manifests(render(chart, values))
    config = goodput_toml(docs)["slurm"]
    assert goodput_toml(docs)["scheduler"] == "slurm-ssh"
    assert config["ssh_host"] == "login1.research.example" and config["ssh_port"] == 22
    for deploy in of_kind(docs, "Deployment"):
        pod = deploy["spec"]["template"]["spec"]
        (volume,) = [v for v in pod["volumes"] if v["name"] == "ssh"]
        assert volume["secret"]["secretName"] == "goodput-ssh"
        files = {item["key"]: item["path"] for item in volume["secret"]["items"]}
        assert files == {"id_ed25519": "id_key", "known_hosts": "known_hosts"}
        assert volume["secret"]["defaultMode"] == 0o440  # readable through fsGroup, by nobody else
        assert not [v for v in pod["volumes"] if v["name"] == "slurm-jwt"]
        for container in pod["containers"]:
            (mount,) = [m for m in container["volumeMounts"] if m["name"] == "ssh"]
            assert mount["readOnly"] is True
            assert config["ssh_client_keys"] == [f"{mount['mountPath']}/id_key"]
            assert config["ssh_known_hosts"] == f"{mount['mountPath']}/known_hosts"


def test_in_cluster_mode_mounts_the_jwt(chart: helm_python.Chart) -> None:
    values = values_for("in-cluster")
    values["inCluster"]["actionsOverSsh"] = False
    docs = manifests(render(chart, values))
    config = goodput_toml(docs)
    assert config["scheduler"] == "slurm-rest"
    assert config["slurm"]["rest_url"] == "http://slurm-restapi.slurm.svc.cluster.local:6820"
    assert config["slurm"]["rest_allow_http"] is True
    for deploy in of_kind(docs, "Deployment"):
        pod = deploy["spec"]["template"]["spec"]
        (volume,) = [v for v in pod["volumes"] if v["name"] == "slurm-jwt"]
        assert volume["secret"]["secretName"] == "goodput-slurm-jwt"
        assert volume["secret"]["items"] == [{"key": "token", "path": "token"}]
        assert not [v for v in pod["volumes"] if v["name"] == "ssh"]
        for container in pod["containers"]:
            (mount,) = [m for m in container["volumeMounts"] if m["name"] == "slurm-jwt"]
            # A directory mount, not subPath: a rotated token reaches the pod, and goodput re-reads it.
            assert mount["readOnly"] is True and "subPath" not in mount
            assert config["slurm"]["rest_token_file"] == f"{mount['mountPath']}/token"


def test_the_in_cluster_example_acts_as_an_operator_account_not_the_slurm_user(chart: helm_python.Chart) -> None:
    # A JWT for the SlurmUser is the whole cluster (reconfigure it, act as anyone, change any
    # account); goodput drains, holds and cancels, which AdminLevel=Operator allows.
    docs = manifests(render(chart, values_for("in-cluster")))
    assert goodput_toml(docs)["slurm"]["rest_user"] == "goodput"
    guide = (Path(__file__).resolve().parents[2] / "docs" / "deployment.md").read_text()
    minted = re.findall(r"scontrol token username=(\S+)", guide)
    assert minted and set(minted) == {"goodput"}
    assert "adminlevel=operator" in guide.lower()


def test_in_cluster_actions_over_ssh_use_the_login_node_beside_slurmrestd(chart: helm_python.Chart) -> None:
    docs = manifests(render(chart, values_for("in-cluster")))  # the example turns actionsOverSsh on
    config = goodput_toml(docs)
    assert config["scheduler"] == "slurm-rest"
    slurm = config["slurm"]
    assert slurm["rest_url"].startswith("http://slurm-restapi.") and slurm["rest_token_file"].endswith("/token")
    assert slurm["ssh_host"] == "slurm-login.slurm.svc.cluster.local" and slurm["ssh_user"] == "root"
    for deploy in of_kind(docs, "Deployment"):
        names = {v["name"] for v in deploy["spec"]["template"]["spec"]["volumes"]}
        assert {"slurm-jwt", "ssh"} <= names
        (container,) = deploy["spec"]["template"]["spec"]["containers"]
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert slurm["ssh_client_keys"] == [f"{mounts['ssh']}/id_key"]
        assert slurm["ssh_known_hosts"] == f"{mounts['ssh']}/known_hosts"


def test_console_is_not_exposed_outside_the_cluster_by_default(chart: helm_python.Chart) -> None:
    docs = manifests(render(chart, {}))
    (service,) = [s for s in of_kind(docs, "Service") if component(s) == "console"]
    assert service["spec"]["type"] == "ClusterIP"
    assert "externalIPs" not in service["spec"] and "loadBalancerIP" not in service["spec"]
    assert not [d for d in docs if d["kind"] in {"Ingress", "Route", "HTTPRoute", "Gateway"}]
    assert not [s for s in of_kind(docs, "Service") if s["spec"]["type"] != "ClusterIP"]


def test_each_component_is_its_own_scalable_deployment(chart: helm_python.Chart) -> None:
    docs = manifests(render(chart, values_for("in-cluster")))
    replicas = {component(d): d["spec"]["replicas"] for d in of_kind(docs, "Deployment")}
    assert replicas == {"worker": 2, "detectors": 2, "console": 1}
    args = {component(d): d["spec"]["template"]["spec"]["containers"][0]["args"][0]
            for d in of_kind(docs, "Deployment")}
    assert args == {"worker": "worker", "detectors": "worker", "console": "console"}
    # Each has its PodDisruptionBudget, selecting exactly its pods.
    budgets = {component(p): p["spec"]["selector"]["matchLabels"] for p in of_kind(docs, "PodDisruptionBudget")}
    for deploy in of_kind(docs, "Deployment"):
        assert budgets[component(deploy)] == deploy["spec"]["selector"]["matchLabels"]


def test_network_policies_admit_only_the_served_ports(variant: tuple[str, dict[str, Any], list[dict]]) -> None:
    _, values, docs = variant
    policies = {component(p): p["spec"] for p in of_kind(docs, "NetworkPolicy")}
    for deploy in of_kind(docs, "Deployment"):
        spec = policies[component(deploy)]
        assert spec["podSelector"]["matchLabels"] == deploy["spec"]["selector"]["matchLabels"]
        assert "Ingress" in spec["policyTypes"]
        pod = deploy["spec"]["template"]["spec"]
        ports = {p["name"] for c in pod["containers"] for p in c.get("ports", [])}
        allowed = {p["port"] for rule in spec["ingress"] for p in rule["ports"]}
        assert allowed == ports  # the worker serves nothing: no ingress at all
        assert all(rule.get("from") for rule in spec["ingress"])  # never "from anywhere"
        if values.get("networkPolicy", {}).get("egress", {}).get("restrict"):
            assert "Egress" in spec["policyTypes"]
            assert {"port": 53, "protocol": "UDP"} in spec["egress"][0]["ports"]


def test_probes_use_the_served_endpoints(chart: helm_python.Chart) -> None:
    docs = manifests(render(chart, values_for("in-cluster")))
    expected = {"console": "/metrics", "detectors": "/healthz"}
    for name, path in expected.items():
        (container,) = deployment(docs, name)["spec"]["template"]["spec"]["containers"]
        ports = {p["name"] for p in container["ports"]}
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert container[probe]["httpGet"]["path"] == path
            assert container[probe]["httpGet"]["port"] in ports
    # The worker serves no port, so it has no probe to answer (docs/deployment.md, "Probes").
    (worker,) = deployment(docs, "worker")["spec"]["template"]["spec"]["containers"]
    assert not {"startupProbe", "readinessProbe", "livenessProbe"} & set(worker)


def test_no_kubernetes_api_rights(variant: tuple[str, dict[str, Any], list[dict]]) -> None:
    _, _, docs = variant
    assert not [d for d in docs if d["kind"] in {"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"}]
    (account,) = of_kind(docs, "ServiceAccount")
    assert account["automountServiceAccountToken"] is False
    for deploy in of_kind(docs, "Deployment"):
        assert deploy["spec"]["template"]["spec"]["serviceAccountName"] == account["metadata"]["name"]


def test_the_pods_roll_when_the_configuration_changes(chart: helm_python.Chart) -> None:
    before = deployment(manifests(render(chart, {})), "worker")
    after = deployment(manifests(render(chart, {"config": {"policy": {"mode": "approve"}}})), "worker")
    key = "checksum/config"
    assert before["spec"]["template"]["metadata"]["annotations"][key] != \
        after["spec"]["template"]["metadata"]["annotations"][key]


# -- the schema rejects what would not run --------------------------------------------------------

BAD_VALUES: dict[str, dict[str, Any]] = {
    "unknown mode": {"mode": "kubernetes"},
    "mode in the wrong case": {"mode": "SSH"},
    "ssh without the key and known_hosts Secret": {"mode": "ssh", "ssh": {"host": "login1", "secret": {
        "existingSecret": ""}}},
    "ssh with a key but no known_hosts": {"mode": "ssh", "ssh": {"host": "login1", "secret": {
        "existingSecret": "", "privateKey": "k"}}},
    "ssh without a host": {"mode": "ssh"},
    "in-cluster actions over SSH without a host": {"mode": "in-cluster", "inCluster": {"actionsOverSsh": True}},
    "in-cluster actions over SSH without the key Secret": {"mode": "in-cluster", "inCluster": {"actionsOverSsh": True},
                                                           "ssh": {"host": "login1", "secret": {"existingSecret": ""}}},
    "in-cluster without the JWT Secret": {"mode": "in-cluster", "inCluster": {"jwtSecret": {"existingSecret": ""}}},
    "in-cluster without slurmrestd": {"inCluster": {"restUrl": ""}},
    "plain http slurmrestd without allowHttp": {"inCluster": {"restUrl": "http://slurm-restapi:6820"}},
    "memory quantity with a unit typo": {"worker": {"resources": {"limits": {"memory": "1GB"}}}},
    "cpu quantity in words": {"worker": {"resources": {"requests": {"cpu": "two"}}}},
    "negative quantity": {"console": {"resources": {"requests": {"memory": "-1Gi"}}}},
    "quantity with a space": {"detectors": {"resources": {"limits": {"memory": "512 Mi"}}}},
    "negative number quantity": {"worker": {"resources": {"requests": {"cpu": -1}}}},
    "unknown resources key": {"worker": {"resources": {"request": {"cpu": "1"}}}},
    "resubmit key missing": {"resubmitKey": {"existingSecret": ""}},
    "resubmit key too short": {"resubmitKey": {"existingSecret": "", "value": "short"}},
    "console without users": {"console": {"users": []}},
    "console user with a bad role": {"console": {"users": [{"name": "a", "role": "root", "tokenKey": "a"}]}},
    "console without its Secret": {"console": {"secret": {"existingSecret": ""}}},
    "detectors without a push token": {"detectors": {"enabled": True, "pushToken": {"existingSecret": ""}}},
    "a secret in config": {"config": {"resubmit_key": "0123456789abcdef0123"}},
    "console users in config": {"config": {"console": {"users": [{"name": "a", "role": "admin", "token": "x"}]}}},
    "push tokens in config": {"config": {"push": {"tokens": ["0123456789abcdef0123"]}}},
    "webhook URL in config": {"config": {"notify_webhook_url": "https://hooks.example/T0/B0/secret"}},
    "a chart-owned key in config": {"config": {"scheduler": "fake"}},
    "Slurm connection in config": {"config": {"slurm": {"rest_url": "https://elsewhere"}}},
    "unknown top-level key (a typo)": {"replicas": 3},
    "unknown component key (a typo)": {"worker": {"replica": 3}},
    "persistence without a claim": {"persistence": {"enabled": True}},
    "bad image digest": {"image": {"digest": "latest"}},
    "bad Temporal address": {"temporal": {"address": "temporal"}},
    "cluster name goodput would refuse": {"cluster": "research/east"},
}


@pytest.mark.parametrize("case", list(BAD_VALUES))
def test_schema_rejects(chart: helm_python.Chart, case: str) -> None:
    values = BAD_VALUES[case]
    with pytest.raises(helm_python.HelmValuesError):
        chart.validate_schema(values)
    # The same values cannot be rendered (install) either.
    with pytest.raises(helm_python.HelmValuesError):
        render(chart, values)


@pytest.mark.parametrize("quantity", ["250m", "0.5", "2", 2, 1.5, "512Mi", "1Gi", "1G", "1e3", "100k"])
def test_schema_accepts_kubernetes_quantities(chart: helm_python.Chart, quantity: object) -> None:
    chart.validate_schema({"worker": {"resources": {"requests": {"cpu": quantity, "memory": quantity}}}})


def test_lint_reports_bad_values_as_errors() -> None:
    report = helm_python.lint(CHART, {"mode": "kubernetes"})
    assert [m for m in report["messages"] if m["severity"] == 3]


def test_inline_console_tokens_must_cover_every_user(chart: helm_python.Chart) -> None:
    values = inline_secrets("in-cluster")
    del values["console"]["secret"]["tokens"]["viewer-token"]
    with pytest.raises(helm_python.HelmRenderError, match="no token for viewer"):
        render(chart, values)


@pytest.mark.parametrize("same", ["name", "tokenKey"])
def test_console_users_are_distinct(chart: helm_python.Chart, same: str) -> None:
    first = {"name": "alice", "role": "admin", "tokenKey": "alice-token"}
    second = {"name": "bob", "role": "viewer", "tokenKey": "bob-token"} | {same: first[same]}
    with pytest.raises(helm_python.HelmRenderError, match=f"{same} .* is used twice"):
        render(chart, {"console": {"users": [first, second]}})
