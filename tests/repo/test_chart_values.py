"""The Helm chart's review findings, checked offline: each a values file (in tmp_path) refused with a clear message
that echoes no secret, or rendered right (and valid for Kubernetes 1.37's strict schemas); the chart's comments and
docs/kubernetes.md saying the same; the install notes warning when spooled access records die with the pod. The
rest of the chart: test_chart.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from helpers.chart import (
    CHART,
    KUBERNETES,
    NAMESPACE,
    RELEASE,
    ROOT,
    WORKLOADS,
    containers,
    run_helm,
    schemas_read_once,
    template_file,
)


@pytest.fixture(scope="module", autouse=True)
def _schemas_read_once() -> Iterator[None]:
    with schemas_read_once():
        yield


# --- the review's findings: each a values file (in tmp_path) refused with a clear message, or rendered right ---------

ACCESS_ENGINE_TOML = '[access_log.engine]\nurl = "https://audit:9200"\nusername = "audit"\npassword_ref = "AUDIT_PASSWORD"\n'


# case → (values, what helm must say, a secret value it must NOT say or None)
REFUSED: dict[str, tuple[dict[str, Any], str, str | None]] = {
    "networkPolicy with no ingress peers": (
        {"networkPolicy": {"enabled": True, "ingressFrom": []}},
        "networkPolicy.ingressFrom is empty: an ingress rule with no peers admits every source", None),
    "the jobs' [access_log.engine] password with no jobs.secretEnv entry": (
        {"config": {"toml": ACCESS_ENGINE_TOML}, "secretEnv": {"AUDIT_PASSWORD": {"existingSecret": "s", "key": "k"}},
         "jobs": {"prepare": {"enabled": True}}},
        "[access_log.engine] password_ref names AUDIT_PASSWORD, which the admin jobs need", None),
    "the jobs' [access_log.engine] API key with no jobs.secretEnv entry (kb create alone)": (
        {"config": {"toml": ACCESS_ENGINE_TOML.replace("password_ref", "api_key_ref").replace('username = "audit"\n', "")},
         "secretEnv": {"AUDIT_PASSWORD": {"existingSecret": "s", "key": "k"}},
         "jobs": {"kbCreate": {"knowledgeBases": ["kb"]}}},
        "add jobs.secretEnv.AUDIT_PASSWORD: {existingSecret: <Secret>, key: <key>}", None),
    "a budget keeping every replica": (
        {"replicaCount": 2, "podDisruptionBudget": {"minAvailable": 2}},
        "podDisruptionBudget.minAvailable 2 keeps all 2 pods (replicaCount): a budget that allows no disruption", None),
    "a budget keeping more than the replicas": (
        {"replicaCount": 1, "podDisruptionBudget": {"minAvailable": 2}},
        "blocks every node drain", None),
    "a budget keeping the autoscaler's minimum": (
        {"autoscaling": {"enabled": True, "minReplicas": 3}, "podDisruptionBudget": {"minAvailable": 3}},
        "keeps all 3 pods (autoscaling.minReplicas)", None),
    "a budget keeping 100%": (
        {"podDisruptionBudget": {"minAvailable": "100%"}}, "minAvailable 100% keeps all 2 pods", None),
    "a budget keeping 60% of one replica (rounded up)": (
        {"replicaCount": 1, "podDisruptionBudget": {"minAvailable": "60%"}}, "keeps all 1 pods", None),
    "a budget with maxUnavailable 0": (
        {"podDisruptionBudget": {"maxUnavailable": 0}},
        "podDisruptionBudget.maxUnavailable 0: a budget that allows no disruption blocks every node drain", None),
    "a budget with maxUnavailable 0%": (
        {"podDisruptionBudget": {"maxUnavailable": "0%"}}, "maxUnavailable 0%: a budget that allows no disruption",
        None),
    "podLabels overriding the component": (
        {"podLabels": {"app.kubernetes.io/component": "api"}},
        "podLabels.app.kubernetes.io/component: the chart sets the app.kubernetes.io/* labels itself", None),
    "podLabels overriding the name": (
        {"podLabels": {"team": "search", "app.kubernetes.io/name": "x"}}, "podLabels.app.kubernetes.io/name:", None),
    # Secrets through free-form values: refused by name, the value never in Helm's message.
    "extraEnv: a proxy URL with credentials": (
        {"extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy-user:LEAK-proxy-pw-19@proxy:3128"}]},
        "extraEnv.HTTPS_PROXY is a URL with credentials in it", "LEAK-proxy-pw-19"),
    "extraEnv: OPENSEARCH_URL": (
        {"extraEnv": [{"name": "OPENSEARCH_URL", "value": "https://admin:LEAK-os-url-pw-77@es:9200"}]},
        "extraEnv.OPENSEARCH_URL: the engine's URL is engine.url", "LEAK-os-url-pw-77"),
    "extraEnv: OPENSEARCH_URL_FILE": (
        {"extraEnv": [{"name": "OPENSEARCH_URL_FILE", "value": "/etc/url"}]},
        "extraEnv.OPENSEARCH_URL_FILE: the engine's URL is engine.url", None),
    "extraEnv: a password by name": (
        {"extraEnv": [{"name": "SMTP_PASSWORD", "value": "LEAK-smtp-pw-31"}]},
        "extraEnv.SMTP_PASSWORD: a secret's value in extraEnv", "LEAK-smtp-pw-31"),
    "config.toml: [access_log.engine] url with credentials": (
        {"config": {"toml": '[access_log.engine]\nurl = "https://audit:LEAK-audit-url-pw-05@audit:9200"\n'}},
        "config.toml: access_log.engine.url is a URL with credentials in it", "LEAK-audit-url-pw-05"),
    "config.toml: a URL with credentials in a list": (
        {"config": {"toml": '[[knowledge]]\nid = "kb"\nurls = ["https://u:LEAK-list-pw-62@x:9200"]\n'}},
        "config.toml: knowledge[0].urls[0] is a URL with credentials in it", "LEAK-list-pw-62"),
    "config.toml: password =": (
        {"config": {"toml": '[access_log.engine]\nurl = "https://audit:9200"\nusername = "u"\n'
                            'password = "LEAK-literal-pw-48"\n'}},
        "config.toml: access_log.engine.password holds a secret literally", "LEAK-literal-pw-48"),
    "config.toml: api_key =": (
        {"config": {"toml": '[embedders.remote]\napi_key = "LEAK-literal-api-key-90"\n'}},
        "config.toml: embedders.remote.api_key holds a secret literally", "LEAK-literal-api-key-90"),
    "config.toml: token =": (
        {"config": {"toml": '[scim]\ntoken = "LEAK-literal-token-13"\n'}},
        "name an environment variable instead (token_ref", "LEAK-literal-token-13"),
    "config.toml: secret = in an array of tables": (
        {"config": {"toml": '[[knowledge]]\nid = "kb"\nsecret = "LEAK-literal-secret-27"\n'}},
        "config.toml: knowledge[0].secret holds a secret literally", "LEAK-literal-secret-27"),
    "config.toml: key =": (
        {"config": {"toml": '[[api_keys]]\nkey = "LEAK-literal-key-66"\napp = "a"\n'}},
        "config.toml: api_keys[0].key holds a secret literally", "LEAK-literal-key-66"),
    "otel.env: an endpoint with credentials": (
        {"otel": {"env": {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://tenant:LEAK-otlp-pw-83@otlp.example:4318"}}},
        "otel.env.OTEL_EXPORTER_OTLP_ENDPOINT is a URL with credentials in it", "LEAK-otlp-pw-83"),
    # Issue 52, finding 10: what the chart rendered though it should not. A container that could take the node (the
    # security contexts: the Pod Security Standards' restricted profile and a read-only root, by the schema) ...
    "securityContext: privileged": (
        {"securityContext": {"privileged": True}}, "at '/securityContext/privileged'", None),
    "securityContext: root": (
        {"securityContext": {"runAsUser": 0}}, "at '/securityContext/runAsUser'", None),
    "securityContext: runAsNonRoot false": (
        {"securityContext": {"runAsNonRoot": False}}, "at '/securityContext/runAsNonRoot'", None),
    "securityContext: runAsNonRoot removed (null)": (
        {"securityContext": {"runAsNonRoot": None}}, "at '/securityContext': missing property 'runAsNonRoot'", None),
    "securityContext: SYS_ADMIN added": (
        {"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}, "at '/securityContext/capabilities/add/0'",
        None),
    "securityContext: ALL no longer dropped": (
        {"securityContext": {"capabilities": {"drop": ["NET_RAW"]}}}, "at '/securityContext/capabilities/drop'", None),
    "securityContext: allowPrivilegeEscalation": (
        {"securityContext": {"allowPrivilegeEscalation": True}}, "at '/securityContext/allowPrivilegeEscalation'",
        None),
    "securityContext: a writable root": (
        {"securityContext": {"readOnlyRootFilesystem": False}}, "at '/securityContext/readOnlyRootFilesystem'", None),
    "securityContext: seccomp Unconfined": (
        {"securityContext": {"seccompProfile": {"type": "Unconfined"}}}, "at '/securityContext/seccompProfile/type'",
        None),
    "securityContext: a Windows host process": (
        {"securityContext": {"windowsOptions": {"hostProcess": True}}},
        "at '/securityContext': additional properties 'windowsOptions' not allowed", None),
    "podSecurityContext: root": (
        {"podSecurityContext": {"runAsUser": 0}}, "at '/podSecurityContext/runAsUser'", None),
    "podSecurityContext: runAsNonRoot false": (
        {"podSecurityContext": {"runAsNonRoot": False}}, "at '/podSecurityContext/runAsNonRoot'", None),
    "podSecurityContext: seccomp Unconfined": (
        {"podSecurityContext": {"seccompProfile": {"type": "Unconfined"}}},
        "at '/podSecurityContext/seccompProfile/type'", None),
    "podSecurityContext: an unsafe sysctl": (
        {"podSecurityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "65536"}]}},
        "at '/podSecurityContext/sysctls/0/name'", None),
    # ... an Ingress that serves the platforms' keys and users' tokens in clear text (unless ingress.allowPlaintext) ...
    "ingress without tls": (
        {"ingress": {"enabled": True}}, "ingress.tls is empty: the Ingress would take", None),
    "ingress with tls for another host": (
        {"ingress": {"enabled": True,
                     "hosts": [{"host": "kb.corp.example", "paths": [{"path": "/"}]},
                               {"host": "kb.other.example", "paths": [{"path": "/"}]}],
                     "tls": [{"secretName": "kb-tls", "hosts": ["kb.corp.example"]}]}},
        "ingress.hosts[1].host \"kb.other.example\" is in no ingress.tls[].hosts", None),
    # ... and secrets in the values, by the name they are under or by their shape.
    "extraEnv: DB_PASS": (
        {"extraEnv": [{"name": "DB_PASS", "value": "LEAK-db-pass-40"}]},
        "extraEnv.DB_PASS: a secret's value in extraEnv", "LEAK-db-pass-40"),
    "extraEnv: ENCRYPTION_KEY": (
        {"extraEnv": [{"name": "ENCRYPTION_KEY", "value": "LEAK-encryption-key-8c"}]},
        "extraEnv.ENCRYPTION_KEY: a secret's value in extraEnv", "LEAK-encryption-key-8c"),
    "extraEnv: OTEL_EXPORTER_OTLP_TRACES_HEADERS": (
        {"extraEnv": [{"name": "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "value": "api-key=LEAK-otlp-headers-2d"}]},
        "extraEnv.OTEL_EXPORTER_OTLP_TRACES_HEADERS: the OTLP exporter's headers are a credential", "LEAK-otlp-headers-2d"),
    "extraEnv: a client credential": (
        {"extraEnv": [{"name": "UPSTREAM_CREDS", "value": "LEAK-upstream-creds-5e"}]},
        "extraEnv.UPSTREAM_CREDS: a secret's value in extraEnv", "LEAK-upstream-creds-5e"),
    "extraEnv: a URL with ?api_key=": (
        {"extraEnv": [{"name": "WEBHOOK_URL", "value": "https://hooks.example/in?team=a&api_key=LEAK-hook-key-71"}]},
        "extraEnv.WEBHOOK_URL is a URL with a credential in its query string", "LEAK-hook-key-71"),
    "extraEnv: a bearer token under another name": (
        {"extraEnv": [{"name": "UPSTREAM", "value": "Bearer LEAK-bearer-token-0f"}]},
        "extraEnv.UPSTREAM is an Authorization header's value", "LEAK-bearer-token-0f"),
    "otel.env: an endpoint with ?api_key=": (
        {"otel": {"env": {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://otlp.example/v1/traces?api_key=LEAK-otlp-q-19"}}},
        "otel.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is a URL with a credential in its query string", "LEAK-otlp-q-19"),
    "otel.env: a token in OTEL_RESOURCE_ATTRIBUTES": (
        {"otel": {"env": {"OTEL_RESOURCE_ATTRIBUTES": "service.namespace=search,vendor.api_token=LEAK-attr-token-a3"}}},
        "otel.env.OTEL_RESOURCE_ATTRIBUTES: the attribute vendor.api_token holds a secret", "LEAK-attr-token-a3"),
    "engine.url with ?api_key=": (
        {"engine": {"url": "https://es.corp.example:9200/?api_key=LEAK-engine-q-55"}},
        "engine.url has a query string or a fragment", "LEAK-engine-q-55"),
    "config.toml: a URL with ?key=": (
        {"config": {"toml": '[embedders.remote]\nkind = "openai"\nurl = "https://emb.example/v1?key=LEAK-embed-q-36"\n'}},
        "config.toml: embedders.remote.url is a URL with a credential in its query string", "LEAK-embed-q-36"),
    "podAnnotations: a token by its key": (
        {"podAnnotations": {"example.com/api-token": "LEAK-annotation-token-6b"}},
        "podAnnotations.example.com/api-token: a secret's value in an annotation", "LEAK-annotation-token-6b"),
    "podAnnotations: a URL with credentials": (
        {"podAnnotations": {"example.com/upstream": "https://u:LEAK-annotation-pw-92@up.example"}},
        "podAnnotations.example.com/upstream is a URL with credentials in it", "LEAK-annotation-pw-92"),
    "podAnnotations: a private key": (
        {"podAnnotations": {"example.com/pem": "-----BEGIN PRIVATE KEY-----\nLEAK-annotation-pem-1c\n"}},
        "podAnnotations.example.com/pem is a private key", "LEAK-annotation-pem-1c"),
    "jobs.annotations: a password by its key": (
        {"jobs": {"annotations": {"example.com/db-password": "LEAK-job-annotation-pw-e7"}}},
        "jobs.annotations.example.com/db-password: a secret's value in an annotation", "LEAK-job-annotation-pw-e7"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_values_file_that_cannot_be_right_is_refused_clearly(case: str, tmp_path: Path) -> None:
    values, said, secret = REFUSED[case]
    done = template_file(tmp_path, values)
    assert done.returncode != 0, f"rendered: {done.stdout[:500]}"
    assert said in done.stderr, done.stderr
    if secret is not None:
        assert secret not in done.stderr + done.stdout, done.stderr


def test_the_jobs_get_the_access_record_clusters_password_from_jobs_secret_env(tmp_path: Path) -> None:
    values = {"config": {"toml": ACCESS_ENGINE_TOML},
              "secretEnv": {"AUDIT_PASSWORD": {"existingSecret": "s", "key": "k"}},
              "jobs": {"prepare": {"enabled": True}, "secretEnv": {"AUDIT_PASSWORD": {"existingSecret": "s", "key": "k"}}}}
    done = template_file(tmp_path, values)
    assert done.returncode == 0, done.stderr
    for doc in yaml.safe_load_all(done.stdout):
        if doc and doc["kind"] in ("Job", "CronJob"):
            spec = doc["spec"]["jobTemplate"]["spec"] if doc["kind"] == "CronJob" else doc["spec"]
            for container in containers(spec["template"]["spec"]):
                assert "AUDIT_PASSWORD_FILE" in {item["name"] for item in container["env"]}


# What the chart's comments and its guide must say (and must not), so the two keep agreeing.
DOCS_SAY: dict[str, tuple[Path, str | None, str | None]] = {
    "values.yaml: only the engine's credentials are re-read": (
        CHART / "values.yaml", "only the engine's credentials", "the service re-reads the file when it changes"),
    "values.yaml: the others are read once at start": (CHART / "values.yaml", "read once at start", None),
    "kubernetes.md: the others are read at start": (ROOT / "docs" / "kubernetes.md", "is read at start", None),
    "kubernetes.md: spooled records die with an emptyDir": (
        ROOT / "docs" / "kubernetes.md",
        "records spooled during an engine outage are lost if the pod is deleted before the engine takes them back",
        None),
    "kubernetes.md: the options for the spool": (
        ROOT / "docs" / "kubernetes.md", "or write the record with the `\"file\"` sink to a persistent volume", None),
}


@pytest.mark.parametrize("case", DOCS_SAY)
def test_the_comments_and_the_guide_say_it_right(case: str) -> None:
    path, says, never = DOCS_SAY[case]
    text = " ".join(path.read_text(encoding="utf-8").replace("#", " ").split())
    if says is not None:
        assert says in text, f"{path.name} does not say {says!r}"
    if never is not None:
        assert never not in text, f"{path.name} says {never!r}"


def _kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [doc for doc in docs if doc["kind"] == kind]


# case → (values, a check of the rendered objects: each must also pass the Kubernetes 1.37 strict schemas)
RENDERS: dict[str, tuple[dict[str, Any], Any]] = {
    "strategy Recreate without the default's rollingUpdate": (
        {"strategy": {"type": "Recreate"}, "replicaCount": 1, "podDisruptionBudget": {"enabled": False}},
        lambda docs: _kind(docs, "Deployment")[0]["spec"]["strategy"] == {"type": "Recreate"}),
    "strategy RollingUpdate keeps its rollingUpdate": (
        {},
        lambda docs: _kind(docs, "Deployment")[0]["spec"]["strategy"] == {
            "type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}),
    "a budget that lets one of three go": (
        {"replicaCount": 3, "podDisruptionBudget": {"minAvailable": 2}},
        lambda docs: _kind(docs, "PodDisruptionBudget")[0]["spec"]["minAvailable"] == 2),
    "a budget of 50% of two replicas": (
        {"podDisruptionBudget": {"minAvailable": "50%"}},
        lambda docs: _kind(docs, "PodDisruptionBudget")[0]["spec"]["minAvailable"] == "50%"),
    "podLabels of one's own beside the selector's": (
        {"podLabels": {"example.com/team": "search"}},
        lambda docs: _kind(docs, "Deployment")[0]["spec"]["template"]["metadata"]["labels"] == {
            "app.kubernetes.io/name": "es-provider", "app.kubernetes.io/instance": RELEASE,
            "app.kubernetes.io/component": "server", "example.com/team": "search"}),
    "extraEnv, otel.env and a config URL without credentials": (
        {"extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}, {"name": "NO_PROXY", "value": "a@b"}],
         "otel": {"env": {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/v1?x=a@b"}},
         "config": {"toml": '[access_log]\nurl = "https://audit:9200/p@th"\n[server]\nmax_concurrency_per_key = 4\n'}},
        lambda docs: len(_kind(docs, "Deployment")) == 1),
    # Issue 52, finding 10: what the refusals must not catch.
    "an Ingress without TLS by the explicit opt-in": (
        {"ingress": {"enabled": True, "allowPlaintext": True}},
        lambda docs: "tls" not in _kind(docs, "Ingress")[0]["spec"]),
    "an Ingress whose hosts a wildcard certificate covers": (
        {"ingress": {"enabled": True,
                     "hosts": [{"host": "kb.corp.example", "paths": [{"path": "/"}]},
                               {"host": "kb2.corp.example", "paths": [{"path": "/retrieval"}]}],
                     "tls": [{"secretName": "wildcard-corp-example", "hosts": ["*.corp.example"]}]}},
        lambda docs: len(_kind(docs, "Ingress")[0]["spec"]["rules"]) == 2),
    "security contexts tightened further, and NET_BIND_SERVICE": (
        {"securityContext": {"runAsUser": 20000, "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
                             "seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/es.json"}},
         "podSecurityContext": {"supplementalGroups": [20001],
                                "sysctls": [{"name": "net.ipv4.ip_local_port_range", "value": "10000 60999"}]}},
        lambda docs: _kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["securityContext"][
            "capabilities"] == {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]}),
    "names and values that only look like secrets": (
        {"extraEnv": [{"name": "SIGNING_KEY_PATH", "value": "/etc/keys/signing.pem"},
                      {"name": "KMS_KEY_ID", "value": "1234abcd-12ab-34cd-56ef-1234567890ab"},
                      {"name": "OTEL_EXPORTER_OTLP_CLIENT_KEY", "value": "/etc/otel/client.key"},
                      {"name": "KEYCLOAK_REALM", "value": "corp"}, {"name": "BYPASS_PROXY", "value": "1"},
                      {"name": "DOCS_URL", "value": "https://docs.example/search?q=token&page=2"}],
         "otel": {"env": {"OTEL_RESOURCE_ATTRIBUTES": "service.namespace=search,deployment.environment=prod",
                          "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://otlp.example/v1/traces?tenant=search"}},
         "podAnnotations": {"checksum/secret": "0" * 64, "vault.hashicorp.com/agent-inject-token": "true",
                            "vault.hashicorp.com/agent-inject-secret-db": "database/creds/es-provider",
                            "example.com/team": "search", "example.com/auth": "Basic authentication"},
         "config": {"toml": '[embedders.remote]\nkind = "openai"\nurl = "https://emb.example/v1?api-version=2024-02-01"\n'}},
        lambda docs: len(_kind(docs, "Deployment")) == 1),
    "the jobs get the server's extraEnv": (
        {"extraEnv": [{"name": "TZ", "value": "Europe/Paris"}, {"name": "HTTPS_PROXY", "value": "http://proxy:3128"},
                      {"name": "MEM", "valueFrom": {"resourceFieldRef": {"containerName": "es-provider",
                                                                          "resource": "limits.memory"}}}],
         "jobs": {"prepare": {"enabled": True}, "kbCreate": {"knowledgeBases": ["kb"]}}},
        lambda docs: all(
            [(item["name"], item.get("value")) for item in container["env"]][-3:]
            == [("TZ", "Europe/Paris"), ("HTTPS_PROXY", "http://proxy:3128"), ("MEM", None)]
            and container["env"][-1]["valueFrom"]["resourceFieldRef"] == (
                {"containerName": "es-provider", "resource": "limits.memory"} if doc["kind"] == "Deployment"
                else {"resource": "limits.memory"})
            for doc in docs if doc["kind"] in WORKLOADS
            for container in containers(doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
                                        if doc["kind"] == "CronJob" else doc["spec"]["template"]["spec"]))
        and len([doc for doc in docs if doc["kind"] in WORKLOADS]) == 3),
}


@pytest.mark.parametrize("case", RENDERS)
def test_a_values_file_renders_the_right_manifest(case: str, tmp_path: Path) -> None:
    values, check = RENDERS[case]
    done = template_file(tmp_path, values)
    assert done.returncode == 0, done.stderr
    docs = [doc for doc in yaml.safe_load_all(done.stdout) if doc]
    for doc in docs:
        if doc["kind"] != "ServiceMonitor":
            kubernetes_validate.validate(doc, KUBERNETES[-1], strict=True)
    assert check(docs), yaml.safe_dump_all(docs)[:3000]


PVC = {"persistentVolumeClaim": {"claimName": "es-provider-cache"}}
# case → (values, whether NOTES warns that spooled access records die with an emptyDir)
SPOOL_NOTES: dict[str, tuple[dict[str, Any], bool]] = {
    "default: the spool on an emptyDir": ({}, True),
    "existingConfigMap: the spool on by default": ({"config": {"existingConfigMap": "mine"}}, True),
    "index and file sinks: the index's spool": (
        {"config": {"toml": '[access_log]\nsinks = ["index", "file"]\ndirectory = "/var/cache/es-provider/a"\n'}},
        True),
    "the cache on a persistent volume": ({"cacheVolume": {"source": PVC}, "replicaCount": 1}, False),
    "spool = false": ({"config": {"toml": "[access_log]\nspool = false\n"}}, False),
    "the file sink alone": (
        {"config": {"toml": '[access_log]\nsinks = ["file"]\ndirectory = "/var/cache/es-provider/a"\n'}}, False),
    "no access record": ({"config": {"toml": "[access_log]\nenabled = false\n"}}, False),
    "spool_dir elsewhere": ({"config": {"toml": '[access_log]\nspool_dir = "/var/lib/spool"\n'}}, False),
}


@pytest.mark.parametrize("case", SPOOL_NOTES)
def test_the_notes_warn_when_spooled_access_records_die_with_the_pod(case: str, tmp_path: Path) -> None:
    values, warned = SPOOL_NOTES[case]
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    done = run_helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run=client", values=path)
    assert done.returncode == 0, done.stderr
    notes = done.stdout[done.stdout.index("NOTES:"):]
    assert ("records spooled during an engine outage are LOST" in notes) is warned, notes
