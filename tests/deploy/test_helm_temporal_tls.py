"""The chart's Temporal TLS, mTLS and API key: what goodput's client settings get in each pod.

The settings themselves are tested against a real TLS-terminating Temporal in
tests/integration/test_temporal_tls.py; here the question is whether the chart hands every
component that dials Temporal the same settings, with the files mounted where the settings say and
the API key only ever coming from a Secret.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import helm_python
import pytest

from goodput.config import Settings
from tests.deploy.chart import (
    config_text,
    container_env,
    goodput_toml,
    manifests,
    of_kind,
    render,
    secret_store,
    values_for,
)

TLS_DIR = "/var/run/secrets/goodput/temporal-tls"


def pod_settings(docs: list[dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Settings]:
    """Settings as each Deployment's container would load them (ConfigMap + environment)."""
    config_file = tmp_path / "goodput.toml"
    config_file.write_text(config_text(docs))
    loaded = []
    for deploy in of_kind(docs, "Deployment"):
        (container,) = deploy["spec"]["template"]["spec"]["containers"]
        with monkeypatch.context() as env:
            for key in [k for k in os.environ if k.startswith("GOODPUT_")]:
                env.delenv(key)
            for key, value in container_env(container, secret_store(docs)).items():
                env.setenv(key, value)
            env.setenv("GOODPUT_CONFIG", str(config_file))
            loaded.append(Settings())
    return loaded


def test_the_production_example_dials_temporal_with_mtls(chart: helm_python.Chart, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    docs = manifests(render(chart, values_for("in-cluster+external-temporal")))
    for settings in pod_settings(docs, tmp_path, monkeypatch):
        tls = settings.temporal_tls
        assert tls.enabled
        assert (tls.ca_file, tls.cert_file, tls.key_file) == (
            Path(TLS_DIR, "ca.crt"), Path(TLS_DIR, "tls.crt"), Path(TLS_DIR, "tls.key"))
        assert settings.temporal_api_key is None
    for deploy in of_kind(docs, "Deployment"):
        pod = deploy["spec"]["template"]["spec"]
        (volume,) = [v for v in pod["volumes"] if v["name"] == "temporal-tls"]
        # The whole Secret as a directory, not subPath items: cert-manager's renewals reach the pod.
        assert volume["secret"] == {"secretName": "goodput-temporal-tls", "defaultMode": 0o440}
        (container,) = pod["containers"]
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == "temporal-tls"]
        assert mount == {"name": "temporal-tls", "mountPath": TLS_DIR, "readOnly": True}


def test_an_api_key_comes_from_its_secret_and_implies_tls(chart: helm_python.Chart, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    values = {"temporal": {"address": "goodput-prod.a1b2c.tmprl.cloud:7233", "namespace": "goodput-prod.a1b2c",
                           "apiKey": {"existingSecret": "temporal-cloud", "key": "api-key"}}}
    docs = manifests(render(chart, values))
    assert goodput_toml(docs)["temporal_tls"] == {"enabled": True}  # the system trust store, no files
    assert "temporal_api_key" not in goodput_toml(docs)  # never in the ConfigMap
    for deploy in of_kind(docs, "Deployment"):
        (container,) = deploy["spec"]["template"]["spec"]["containers"]
        (var,) = [v for v in container["env"] if v["name"] == "GOODPUT_TEMPORAL_API_KEY"]
        assert var["valueFrom"]["secretKeyRef"] == {"name": "temporal-cloud", "key": "api-key"}
        assert not [v for v in deploy["spec"]["template"]["spec"]["volumes"] if v["name"] == "temporal-tls"]
    for settings in pod_settings(docs, tmp_path, monkeypatch):
        assert settings.temporal_api_key is not None and settings.temporal_tls.enabled


def test_tls_with_the_system_trust_store_and_another_server_name(chart: helm_python.Chart) -> None:
    docs = manifests(render(chart, {"temporal": {"tls": {"enabled": True, "serverName": "temporal.prod.example"}}}))
    assert goodput_toml(docs)["temporal_tls"] == {"enabled": True, "server_name": "temporal.prod.example"}


def test_the_default_dials_plain_temporal(chart: helm_python.Chart) -> None:
    docs = manifests(render(chart, {}))
    assert "temporal_tls" not in goodput_toml(docs)
    for deploy in of_kind(docs, "Deployment"):
        pod = deploy["spec"]["template"]["spec"]
        assert not [v for v in pod["volumes"] if v["name"] == "temporal-tls"]
        assert not [v for c in pod["containers"] for v in c["env"] if v["name"] == "GOODPUT_TEMPORAL_API_KEY"]


BAD_TLS: dict[str, dict[str, Any]] = {
    "a client certificate without its key": {"enabled": True, "existingSecret": "t", "certKey": "tls.crt"},
    "a client key without its certificate": {"enabled": True, "existingSecret": "t", "keyKey": "tls.key"},
    "a CA from no Secret": {"enabled": True, "caKey": "ca.crt"},
    "a client certificate from no Secret": {"enabled": True, "certKey": "tls.crt", "keyKey": "tls.key"},
    "a Secret with TLS left off": {"existingSecret": "t", "caKey": "ca.crt"},
    "a server name with a scheme": {"enabled": True, "serverName": "https://temporal"},
    "a typo in a key": {"enabled": True, "caFile": "ca.crt"},
}


@pytest.mark.parametrize("case", list(BAD_TLS))
def test_the_schema_rejects_tls_that_would_not_work(chart: helm_python.Chart, case: str) -> None:
    with pytest.raises(helm_python.HelmValuesError, match="/temporal/tls"):
        chart.validate_schema({"temporal": {"tls": BAD_TLS[case]}})


@pytest.mark.parametrize("key", ["temporal_tls", "temporal_api_key"])
def test_temporal_credentials_cannot_be_set_through_config(chart: helm_python.Chart, key: str) -> None:
    with pytest.raises(helm_python.HelmValuesError, match=f"/config/{key}"):
        chart.validate_schema({"config": {key: {"enabled": True} if key == "temporal_tls" else "sk-0123456789"}})
