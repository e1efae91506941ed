"""The Helm chart's secrets, checked offline: no manifest is a Secret or holds a secret's value; each *_ref reaches
the pod as NAME_FILE, a file of a mounted Secret, and reading every one of them through the service's own reader
(config/secrets.py) from the files the pod would see yields the Secrets' (test) values; a values file that tries to
hold a secret is refused by values.schema.json without echoing it; the metrics token has a Secret of its own. The
rest of the chart: test_chart.py."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.chart import (
    CHART,
    CHART_REFS,
    ROOT,
    SECRETS,
    VALUE_SETS,
    config_files,
    containers,
    manifests,
    mounted_files,
    pod_specs,
    refs_in,
    render,
    template_with,
)

from es_provider.config.secrets import read_secret

# --- secrets ---------------------------------------------------------------------------------------------------------

def test_the_chart_reads_no_secret_at_render_time() -> None:
    """No template can pull a Secret's value into a manifest (`lookup`) or write a Secret."""
    for template in (CHART / "templates").iterdir():
        text = template.read_text(encoding="utf-8")
        assert "lookup" not in text, template.name
        assert not re.search(r"^kind:\s*Secret\b", text, re.M), template.name


@pytest.mark.parametrize("values", VALUE_SETS)
def test_no_manifest_holds_a_secret_or_its_value(values: str) -> None:
    text = render(values)
    assert "Secret" not in {doc["kind"] for doc in manifests(values)}
    for secret in SECRETS.values():
        for line in secret.strip().splitlines():
            assert line not in text
    assert "-----BEGIN" not in text and "PRIVATE KEY" not in text


@pytest.mark.parametrize("values", VALUE_SETS)
def test_every_secret_reference_resolves_to_a_mounted_file_the_service_reads(values: str, tmp_path: Path) -> None:
    """No *_ref of a workload's configuration (the platforms' keys, the engine's password or API key) has a value in
    its pods' environment: NAME_FILE names a file of a mounted Secret, never through subPath. Materialising the
    Secrets' test values at the paths a pod would see, the service's own reader returns each one the process needs
    (the server: all of them; the admin jobs: [opensearch]'s); the TLS files [opensearch] names are there too."""
    for where, pod in pod_specs(values):
        config_volume = next(volume for volume in pod["volumes"] if volume["name"] == "config")
        text = config_files(values)[config_volume["configMap"]["items"][0]["key"]]
        settings = tomllib.loads(text)
        refs = refs_in(settings)
        for container in containers(pod):
            env = {item["name"]: item for item in container.get("env", [])}
            for name in refs | set(CHART_REFS):
                assert name not in env, f"{where} {container['name']}: {name} set in the environment"
            files = mounted_files(pod, container)
            root = tmp_path / where.replace("/", "_") / container["name"]
            environ = {}
            for path, (kind, name, key) in files.items():
                if kind == "secret" or name == "corp-root-ca":
                    assert (name, key) in SECRETS, f"{where}: {name}/{key} is not in this test's SECRETS"
                    (root / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
                    (root / path.lstrip("/")).write_text(SECRETS[name, key], encoding="utf-8")
            for name, item in env.items():
                if name.endswith("_FILE"):
                    assert "value" in item and item["value"] in files, f"{where}: {name} names no mounted file"
                    environ[name] = str(root / item["value"].lstrip("/"))
            # The server needs every ref; the admin jobs only [opensearch]'s (the platforms' keys are not theirs).
            for ref in refs if where.startswith("Deployment/") else ():
                assert f"{ref}_FILE" in environ, f"{where} {container['name']}: {ref} reaches the pod no way"
                kind, name, key = files[env[f"{ref}_FILE"]["value"]]
                assert kind == "secret"
                assert read_secret(ref, environ).decode() == SECRETS[name, key].strip()
            engine = settings["opensearch"]
            for ref in (engine.get("password_ref"), engine.get("api_key_ref")):
                if ref is not None:
                    assert ref in CHART_REFS
                    assert read_secret(ref, environ).decode() == SECRETS[files[env[f"{ref}_FILE"]["value"]][1:]]
            for key in ("ca_file", "client_cert_file", "client_key_file"):
                if key in engine:
                    assert engine[key] in files, f"{where}: [opensearch] {key} is not mounted"


# A value of each kind that a careless values file could hold: each must be refused by the schema, not rendered.
LEAKS = {
    "engine.auth.basic.password": {"engine": {"auth": {"type": "basic", "basic": {
        "username": "u", "existingSecret": "s", "password": "LEAK-basic-password-0e1d"}}}},
    "engine.auth.apiKey.value": {"engine": {"auth": {"type": "apiKey", "apiKey": {
        "existingSecret": "s", "value": "LEAK-api-key-77b2"}}}},
    "engine.tls.clientCert.key": {"engine": {"url": "https://e:9200", "tls": {"clientCert": {
        "existingSecret": "s", "key": "-----BEGIN PRIVATE KEY-----LEAK-9c1f"}}}},
    "engine.tls.ca.pem": {"engine": {"url": "https://e:9200", "tls": {"ca": {
        "existingSecret": "s", "pem": "-----BEGIN CERTIFICATE-----LEAK-3a0e"}}}},
    "engine.url with credentials": {"engine": {"url": "https://admin:LEAK-url-password-41@e:9200"}},
    "secretEnv.NAME.value": {"secretEnv": {"PROJECT_CALLBACK_KEY": {
        "existingSecret": "s", "key": "k", "value": "LEAK-callback-5d2c"}}},
    "secretEnv.NAME as a string": {"secretEnv": {"PROJECT_CALLBACK_KEY": "LEAK-callback-string-8f"}},
    "jobs.engine.auth.basic.password": {"jobs": {"engine": {"auth": {"type": "basic", "basic": {
        "username": "u", "existingSecret": "s", "password": "LEAK-ingest-password-a1"}}}}},
    "jobs.secretEnv.NAME.value": {"jobs": {"secretEnv": {"AUDIT_PASSWORD": {
        "existingSecret": "s", "key": "k", "value": "LEAK-audit-password-e4"}}}},
    "extraEnv secretKeyRef": {"extraEnv": [{"name": "X", "valueFrom": {"secretKeyRef": {
        "name": "LEAK-secret-name-2b", "key": "k"}}}]},
    "otel.env OTEL_EXPORTER_OTLP_HEADERS": {"otel": {"env": {
        "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer LEAK-otlp-token-6a"}}},
    "otel.env OTEL_EXPORTER_OTLP_LOGS_HEADERS": {"otel": {"env": {
        "OTEL_EXPORTER_OTLP_LOGS_HEADERS": "x-api-key=LEAK-otlp-logs-token-3c"}}},
    "metrics.serviceMonitor.tokenSecret.token": {"metrics": {"serviceMonitor": {"tokenSecret": {
        "existingSecret": "s", "key": "k", "token": "LEAK-metrics-token-90"}}}},
}


@pytest.mark.parametrize("case", LEAKS)
def test_a_secret_value_in_the_values_is_refused_without_being_echoed(case: str) -> None:
    said = template_with(LEAKS[case], fails=True)
    assert "don't meet the specifications of the schema" in said, said
    leak = re.search(r"LEAK-[\w-]+", yaml.safe_dump(LEAKS[case]))
    assert leak is not None and leak.group(0) not in said, said


def _docs_values() -> dict[str, Any]:
    """The install example's values file in docs/kubernetes.md (step 3)."""
    text = (ROOT / "docs" / "kubernetes.md").read_text(encoding="utf-8")
    block = re.search(r"\*\*3\. The values\.\*\*.*?```yaml\n(.*?)```", text, re.S)
    assert block is not None
    return yaml.safe_load(block.group(1))


@pytest.mark.parametrize("values", [*VALUE_SETS, "docs/kubernetes.md"])
def test_the_metrics_token_has_a_secret_of_its_own(values: str) -> None:
    """The ServiceMonitor sends the metrics token, so the Prometheus Operator reads its Secret: no other secret may
    be in that one (it would read the platforms' keys too)."""
    if values == "docs/kubernetes.md":
        secret_env = _docs_values()["secretEnv"]
    else:
        secret_env = yaml.safe_load((CHART / "ci" / values).read_text(encoding="utf-8")).get("secretEnv", {}) \
            if values != "default" else {}
    token = secret_env.get("METRICS_TOKEN")
    if token is None:
        assert values not in ("docs/kubernetes.md", "basic-auth-ca-values.yaml", "everything-values.yaml")
        return
    shared = [name for name, ref in secret_env.items()
              if name != "METRICS_TOKEN" and ref["existingSecret"] == token["existingSecret"]]
    assert not shared, f"{values}: {shared} share the metrics token's Secret"
