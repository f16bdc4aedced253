"""What the chart tests share: the examples and variants, Helm's layering of values, rendering and
picking objects out of what was rendered, and the pods' view of their configuration.

Kept out of the test modules so each chart test file reads as the properties it checks.
"""

from __future__ import annotations

import base64
import copy
import re
import tomllib
from pathlib import Path
from typing import Any

import helm_python
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "goodput"
RELEASE, NAMESPACE = "goodput", "goodput"
# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest the pinned
# kubernetes-validate knows.
KUBERNETES_VERSIONS = ("1.29", "1.37")

# Each example as `helm install -f A -f B` would layer it over the chart's defaults.
EXAMPLES: dict[str, tuple[str, ...]] = {
    "default": (),
    "in-cluster": ("values-in-cluster.yaml",),
    "ssh": ("values-ssh.yaml",),
    "external-temporal": ("values-external-temporal.yaml",),
    "in-cluster+external-temporal": ("values-in-cluster.yaml", "values-external-temporal.yaml"),
    "ssh+external-temporal": ("values-ssh.yaml", "values-external-temporal.yaml"),
}

# Stand-ins for secrets, long enough for goodput's minimums, and easy to find if they leak.
SENTINEL = {
    "jwt": "SENTINEL-jwt-0123456789abcdef",
    "ssh_key": "-----BEGIN OPENSSH PRIVATE KEY-----\nSENTINEL-sshkey-0123456789\n-----END OPENSSH PRIVATE KEY-----\n",
    "known_hosts": "login1 ssh-ed25519 AAAASENTINELknownhosts0123456789\n",
    "resubmit": "SENTINEL-resubmit-0123456789abcdef",
    "session": "SENTINEL-session-0123456789abcdef0123456789",
    "admin": "SENTINEL-admin-token-0123456789",
    "viewer": "SENTINEL-viewer-token-0123456789",
    "push": "SENTINEL-push-token-0123456789",
    "liveness": "SENTINEL-liveness-secret-0123456789abcdef0123456789",
}


def inline_secrets(mode: str) -> dict[str, Any]:
    """Every credential given inline (existingSecret emptied): the chart makes the Secrets."""
    values: dict[str, Any] = {
        "mode": mode,
        "resubmitKey": {"existingSecret": "", "value": SENTINEL["resubmit"]},
        "detectors": {"enabled": True, "pushToken": {"existingSecret": "", "value": SENTINEL["push"]}},
        "liveness": {"enabled": True, "secret": {"existingSecret": "", "value": SENTINEL["liveness"]}},
        "console": {
            "users": [{"name": "admin", "role": "admin", "tokenKey": "admin-token"},
                      {"name": "viewer", "role": "viewer", "tokenKey": "viewer-token"}],
            "secret": {"existingSecret": "", "sessionSecret": SENTINEL["session"],
                       "tokens": {"admin-token": SENTINEL["admin"], "viewer-token": SENTINEL["viewer"]}},
        },
        "persistence": {"enabled": True, "existingClaim": "goodput-data"},
        "networkPolicy": {"egress": {"restrict": True, "rules": [
            {"to": [{"ipBlock": {"cidr": "10.0.0.0/24"}}], "ports": [{"port": 7233, "protocol": "TCP"}]}]}},
    }
    if mode == "ssh":
        values["ssh"] = {"host": "login1", "secret": {"existingSecret": "", "privateKey": SENTINEL["ssh_key"],
                                                      "knownHosts": SENTINEL["known_hosts"]}}
    else:
        values["inCluster"] = {"jwtSecret": {"existingSecret": "", "value": SENTINEL["jwt"]},
                               "caConfigMap": {"name": "slurm-ca"}}
    return values


VARIANTS: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    **{name: (files, {}) for name, files in EXAMPLES.items()},
    "in-cluster, everything on, inline secrets": ((), inline_secrets("in-cluster")),
    "ssh, everything on, inline secrets": ((), inline_secrets("ssh")),
}


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Helm's layering of values files: maps merge key by key, anything else is replaced."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def values_for(variant: str) -> dict[str, Any]:
    files, extra = VARIANTS[variant]
    values: dict[str, Any] = {}
    for name in files:
        values = merge(values, helm_python.values_from_yaml((CHART / name).read_text()))
    return merge(values, extra)


def render(chart: helm_python.Chart, values: dict[str, Any]) -> dict[str, str]:
    return chart.render(values, name=RELEASE, namespace=NAMESPACE)


def manifests(rendered: dict[str, str]) -> list[dict[str, Any]]:
    """Every Kubernetes object rendered (NOTES.txt is text for the installer, not a manifest)."""
    docs = []
    for path, text in sorted(rendered.items()):
        if path.endswith("NOTES.txt"):
            continue
        docs += [doc for doc in yaml.safe_load_all(text) if doc]
    return docs


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def component(doc: dict[str, Any]) -> str:
    return str(doc["metadata"]["labels"]["app.kubernetes.io/component"])


def deployment(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (found,) = [d for d in of_kind(docs, "Deployment") if component(d) == name]
    return found


def containers(pod_spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod_spec.get("initContainers", []), *pod_spec["containers"]]


def goodput_toml(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (config_map,) = of_kind(docs, "ConfigMap")
    return tomllib.loads(config_map["data"]["goodput.toml"])


def config_text(docs: list[dict[str, Any]]) -> str:
    (config_map,) = of_kind(docs, "ConfigMap")
    return str(config_map["data"]["goodput.toml"])


def secret_store(docs: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
    """The chart's own Secrets, decoded; an existing Secret's keys get stand-ins of the right shape."""
    store: dict[tuple[str, str], str] = {}
    for secret in of_kind(docs, "Secret"):
        for key, data in secret.get("data", {}).items():
            store[(secret["metadata"]["name"], key)] = base64.b64decode(data).decode()
    return store


def container_env(container: dict[str, Any], secrets: dict[tuple[str, str], str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for var in container.get("env", []):
        if "value" in var:
            # The kubelet's dependent variables: $(NAME) of an earlier variable.
            env[var["name"]] = re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                                      lambda m: env.get(m.group(1), m.group(0)), var["value"])
        elif "secretKeyRef" in var["valueFrom"]:
            ref = var["valueFrom"]["secretKeyRef"]
            env[var["name"]] = secrets.get((ref["name"], ref["key"]), f"stand-in-{ref['key']}-0123456789abcdef0123")
        else:
            env[var["name"]] = "stand-in"
    return env
