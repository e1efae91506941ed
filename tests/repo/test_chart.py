"""The Helm chart (charts/es-provider, docs/kubernetes.md), checked offline: `helm lint --strict` and `helm template`
of the default values and of every values set in charts/es-provider/ci/; every rendered manifest validated against
the Kubernetes API's JSON schemas by kubernetes-validate, with its strict schemas (an unknown field is an error), for
Kubernetes 1.29 (the chart's kubeVersion floor) and 1.37 (the newest it ships, and Helm 4.3.2's own client); the
ServiceMonitor, a Prometheus Operator CRD those schemas do not hold, checked here by its shape; what the rendered
objects are (the locked-down pod, probes, workers, the engine's table, replicas, network policy, jobs, ingress). The
rendered configuration loads with the service's settings model. Secrets: test_chart_secrets.py; values files
refused or rendered right: test_chart_values.py.

Helm is scripts/helm-local's (v4.3.2, built once from the Go module proxy; `make test`'s setup builds it): without it
every test here fails, none skips."""

from __future__ import annotations

import re
import tomllib
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
    VALUE_SETS,
    config_files,
    containers,
    manifests,
    mounted_files,
    one,
    pod_specs,
    run_helm,
    schemas_read_once,
    serving,
    template_with,
)

from es_provider.config.settings import parse_settings


@pytest.fixture(scope="module", autouse=True)
def _schemas_read_once() -> Iterator[None]:
    with schemas_read_once():
        yield


@pytest.mark.parametrize("values", VALUE_SETS)
def test_helm_lint_passes_strictly(values: str) -> None:
    done = run_helm("lint", "--strict", str(CHART), values=values)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 chart(s) failed" in done.stdout


@pytest.mark.parametrize("version", KUBERNETES)
@pytest.mark.parametrize("values", VALUE_SETS)
def test_every_manifest_matches_the_kubernetes_api_schema(values: str, version: str) -> None:
    checked = []
    for doc in manifests(values):
        if doc["kind"] == "ServiceMonitor":  # a CRD: its shape is checked below
            continue
        kubernetes_validate.validate(doc, version, strict=True)
        checked.append(doc["kind"])
    assert {"ConfigMap", "Deployment", "Service", "ServiceAccount"} <= set(checked)


def test_the_strict_schemas_refuse_an_unknown_field() -> None:
    """The validator's own check: a misspelt field deep in a pod is an error, not ignored."""
    deployment = one("default", "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["pathh"] = "/readyz"
    with pytest.raises(kubernetes_validate.ValidationError, match="pathh"):
        kubernetes_validate.validate(deployment, KUBERNETES[-1], strict=True)


def test_the_service_monitor_scrapes_metrics_on_the_service_with_the_token() -> None:
    monitor = one("everything-values.yaml", "ServiceMonitor")
    service = one("everything-values.yaml", "Service")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(monitor) == {"apiVersion", "kind", "metadata", "spec"}
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "http" and endpoint["path"] == "/metrics"
    assert [port["name"] for port in service["spec"]["ports"]] == ["http"]
    assert re.fullmatch(r"\d+[smh]", endpoint["interval"]) and re.fullmatch(r"\d+[smh]", endpoint["scrapeTimeout"])
    # [server] metrics_token_ref = "METRICS_TOKEN": the scrape sends the token its secretEnv entry names.
    assert endpoint["authorization"] == {"type": "Bearer", "credentials": {"name": "es-provider-metrics", "key": "token"}}
    assert "bearerTokenSecret" not in endpoint  # deprecated in the operator's API


def test_without_a_metrics_token_the_scrape_sends_none() -> None:
    values = {"metrics": {"serviceMonitor": {"enabled": True}}}
    monitor = next(doc for doc in template_with(values) if doc["kind"] == "ServiceMonitor")
    assert "authorization" not in monitor["spec"]["endpoints"][0]


# --- what the rendered objects are ------------------------------------------------------------------------------------

def test_the_default_pod_is_locked_down() -> None:
    pod, container = serving("default")
    assert pod["securityContext"].items() >= {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001,
                                              "fsGroup": 10001, "seccompProfile": {"type": "RuntimeDefault"}}.items()
    assert container["securityContext"] == {
        "runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001, "allowPrivilegeEscalation": False,
        "privileged": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"}}
    assert pod["automountServiceAccountToken"] is False and pod["enableServiceLinks"] is False
    assert one("default", "ServiceAccount")["automountServiceAccountToken"] is False
    # The only writable paths: /tmp (prometheus-client's multiprocess files under --workers) and the cache.
    writable = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"] if not mount.get("readOnly")}
    assert writable == {"/tmp": "tmp", "/var/cache/es-provider": "cache"}
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    assert "emptyDir" in volumes["tmp"] and "emptyDir" in volumes["cache"]


def test_the_default_probes_are_liveness_on_healthz_and_readiness_on_readyz() -> None:
    _, container = serving("default")
    paths = {probe: container[probe]["httpGet"] for probe in ("startupProbe", "livenessProbe", "readinessProbe")}
    assert paths == {"startupProbe": {"path": "/healthz", "port": "http"},
                     "livenessProbe": {"path": "/healthz", "port": "http"},
                     "readinessProbe": {"path": "/readyz", "port": "http"}}
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 120  # the start may load models and wait on the engine
    assert container["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]


def test_the_workers_come_from_the_cpu_limit() -> None:
    _, container = serving("default")
    assert container["command"] == ["es-provider"]
    args = container["args"]
    assert args[:3] == ["serve", "--config", "/etc/es-provider/config/config.toml"]
    assert args[args.index("--workers") + 1] == "$(ES_PROVIDER_WORKERS)"
    assert args[args.index("--host") + 1] == "0.0.0.0" and args[args.index("--port") + 1] == "8080"
    [workers] = [item for item in container["env"] if item["name"] == "ES_PROVIDER_WORKERS"]
    assert workers["valueFrom"] == {"resourceFieldRef": {"containerName": "es-provider", "resource": "limits.cpu",
                                                         "divisor": "1"}}
    assert container["resources"]["limits"]["cpu"]
    [fixed] = [item for item in serving("everything-values.yaml")[1]["env"] if item["name"] == "ES_PROVIDER_WORKERS"]
    assert fixed == {"name": "ES_PROVIDER_WORKERS", "value": "3"}


@pytest.mark.parametrize("values", VALUE_SETS)
def test_the_rendered_configuration_loads_with_the_services_settings(values: str) -> None:
    for key, text in config_files(values).items():
        settings = parse_settings(text, environ={})  # no OPENSEARCH_URL: the file alone
        engine = settings.opensearch
        assert engine.url == tomllib.loads(text)["opensearch"]["url"], key
        if engine.tls:
            assert engine.insecure is False


def test_basic_auth_and_the_ca_make_the_opensearch_table() -> None:
    table = tomllib.loads(config_files("basic-auth-ca-values.yaml")["config.toml"])["opensearch"]
    assert table == {"url": "https://search.corp.example:9200", "timeout_s": 20,
                     "ca_file": "/etc/es-provider/engine/ca.crt", "username": "es_provider_serve",
                     "password_ref": "ES_PROVIDER_ENGINE_PASSWORD"}
    assert isinstance(table["timeout_s"], int)  # toJson: 20, not Helm's float 20.0 (an integer key refuses it)


def _basic_auth_with(basic: dict[str, Any]) -> dict[str, Any]:
    values = yaml.safe_load((CHART / "ci" / "basic-auth-ca-values.yaml").read_text(encoding="utf-8"))
    values["engine"]["auth"]["basic"] = basic
    return dict(values)


def test_the_user_name_can_come_from_the_password_s_secret_and_rotate_with_it() -> None:
    """usernameKey: the user and its password from one Secret, one projected volume, read as a pair (a rotation to
    a second engine user, docs/kubernetes.md "Rotating")."""
    rendered = template_with(_basic_auth_with({"usernameKey": "username", "existingSecret": "es-provider-engine",
                                               "passwordKey": "password"}))
    config = next(doc for doc in rendered if doc["kind"] == "ConfigMap" and "config.toml" in doc.get("data", {}))
    table = tomllib.loads(config["data"]["config.toml"])["opensearch"]
    assert "username" not in table and table["username_ref"] == "ES_PROVIDER_ENGINE_USERNAME"
    deployment = next(doc for doc in rendered if doc["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (server,) = [c for c in containers(pod) if c["name"] == "es-provider"] or containers(pod)[:1]
    env = {item["name"]: item.get("value") for item in server.get("env", [])}
    files = mounted_files(pod, server)
    user_file, password_file = env["ES_PROVIDER_ENGINE_USERNAME_FILE"], env["ES_PROVIDER_ENGINE_PASSWORD_FILE"]
    assert files[user_file] == ("secret", "es-provider-engine", "username")
    assert files[password_file] == ("secret", "es-provider-engine", "password")
    assert Path(user_file).parent == Path(password_file).parent  # one projected volume: swapped at once


def test_a_user_name_and_a_user_name_key_together_are_refused() -> None:
    said = template_with(_basic_auth_with({"username": "u", "usernameKey": "username",
                                           "existingSecret": "es-provider-engine"}), fails=True)
    assert "set username or usernameKey, not both" in said


def test_sigv4_signs_with_the_pods_role() -> None:
    table = tomllib.loads(config_files("sigv4-values.yaml")["config.toml"])["opensearch"]
    assert table == {"url": "https://search-kb-abc123.eu-west-1.es.amazonaws.com",
                     "aws": {"region": "eu-west-1", "service": "es"}}
    annotations = one("sigv4-values.yaml", "ServiceAccount")["metadata"]["annotations"]
    assert annotations == {"eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/es-provider-serve"}
    pod, container = serving("sigv4-values.yaml")
    assert not {volume["name"] for volume in pod["volumes"]} & {"engine", "aws-token"}  # the webhook's business
    # Without the webhook: a projected token for the role, and botocore's web identity variables.
    pod, container = serving("sigv4-web-identity-values.yaml")
    token = next(volume for volume in pod["volumes"] if volume["name"] == "aws-token")
    assert token["projected"]["sources"] == [{"serviceAccountToken": {
        "audience": "sts.amazonaws.com", "expirationSeconds": 3600, "path": "token"}}]
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert env["AWS_ROLE_ARN"] == "arn:aws:iam::111122223333:role/es-provider-serve"
    assert env["AWS_WEB_IDENTITY_TOKEN_FILE"] in {f"{m['mountPath']}/token" for m in container["volumeMounts"]}


def test_several_replicas_are_the_autoscalers_and_the_budget_keeps_two() -> None:
    values = "replicas-hpa-values.yaml"
    deployment = one(values, "Deployment")
    assert "replicas" not in deployment["spec"]
    hpa = one(values, "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                             "name": deployment["metadata"]["name"]}
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 12)
    assert hpa["spec"]["metrics"][0]["resource"]["target"] == {"type": "Utilization", "averageUtilization": 65}
    pdb = one(values, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 2 and "maxUnavailable" not in pdb["spec"]
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert pdb["spec"]["selector"]["matchLabels"] == selector
    spread = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert [c["topologyKey"] for c in spread] == ["topology.kubernetes.io/zone", "kubernetes.io/hostname"]
    assert all(c["labelSelector"]["matchLabels"] == selector for c in spread)
    assert one("default", "Deployment")["spec"]["replicas"] == 2
    assert not [doc for doc in manifests("default") if doc["kind"] == "HorizontalPodAutoscaler"]


def test_the_network_policy_opens_only_the_http_port() -> None:
    policy = one("everything-values.yaml", "NetworkPolicy")
    assert policy["spec"]["podSelector"] == one("everything-values.yaml", "Deployment")["spec"]["selector"]
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    [rule] = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": "http", "protocol": "TCP"}] and len(rule["from"]) == 2
    dns, engine, collector = policy["spec"]["egress"]
    assert {port["port"] for port in dns["ports"]} == {53}
    assert engine["ports"] == [{"port": 9243, "protocol": "TCP"}]
    assert collector["ports"] == [{"port": 4318, "protocol": "TCP"}]


def test_the_admin_jobs_run_in_order_with_the_ingest_duty_and_no_platform_key() -> None:
    values = "everything-values.yaml"
    job = one(values, "Job")
    assert job["metadata"]["name"] == f"{RELEASE}-es-provider-setup-r1"  # a new one at each revision
    pod = job["spec"]["template"]["spec"]
    steps = [(c["name"], c["args"]) for c in containers(pod)]
    config = ["--config", "/etc/es-provider/config/config.toml"]
    assert steps == [("prepare", ["prepare", *config, "--days", "45"]),
                     ("kb-create-0", ["kb", "create", *config, "--kb", "project-documents", "--exist-ok",
                                      "--replicas", "1"]),
                     ("kb-create-1", ["kb", "create", *config, "--kb", "support.faq", "--exist-ok", "--replicas", "1"])]
    assert [c["name"] for c in pod["containers"]] == ["kb-create-1"]
    assert pod["restartPolicy"] == "Never"
    config_volume = next(volume for volume in pod["volumes"] if volume["name"] == "config")
    assert config_volume["configMap"]["items"] == [{"key": "admin.toml", "path": "config.toml"}]
    admin = tomllib.loads(config_files(values)["admin.toml"])["opensearch"]
    assert admin["username"] == "es_provider_ingest" and "client_cert_file" not in admin
    engine = next(volume for volume in pod["volumes"] if volume["name"] == "engine")
    assert {source.get("secret", {}).get("name") for source in engine["projected"]["sources"]} == {
        "es-provider-ingest", None}
    assert "secrets" not in {volume["name"] for volume in pod["volumes"]}  # the platforms' keys stay with serve
    cron = one(values, "CronJob")
    assert cron["spec"]["schedule"] == "17 3 * * *" and cron["spec"]["concurrencyPolicy"] == "Forbid"
    [prepare] = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    assert prepare["args"] == ["prepare", *config, "--days", "45"]
    # The jobs' pods are no Service's endpoints and no budget's.
    selector = one(values, "Service")["spec"]["selector"]
    assert not selector.items() <= job["spec"]["template"]["metadata"]["labels"].items()
    for where, pod in pod_specs(values):
        for container in containers(pod):
            assert container["securityContext"]["readOnlyRootFilesystem"] is True, where


def test_the_ingress_routes_to_the_service_with_tls() -> None:
    ingress = one("everything-values.yaml", "Ingress")
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["tls"] == [{"secretName": "kb-corp-example-tls", "hosts": ["kb.corp.example"]}]
    backends = {path["backend"]["service"]["name"] for rule in ingress["spec"]["rules"]
                for path in rule["http"]["paths"]}
    assert backends == {one("everything-values.yaml", "Service")["metadata"]["name"]}


@pytest.mark.parametrize(("values", "said"), [
    ({"config": {"toml": '[opensearch]\nurl = "http://x:9200"\n'}}, "holds an [opensearch] table"),
    ({"config": {"toml": '[server]\nmetrics_token_ref = "METRICS_TOKEN"\n'}},
     "names the secret METRICS_TOKEN (a *_ref) but secretEnv has no entry"),
    ({"config": {"toml": "[server\n"}}, "config.toml is not valid TOML"),
    ({"workers": "", "resources": {"limits": {"cpu": None}}}, "resources.limits.cpu is not set"),
    ({"engine": {"auth": {"type": "aws", "aws": {"region": "eu-west-1"}}}}, "needs an https:// engine.url"),
    ({"config": {"toml": '[server]\nmetrics_token_ref = "MT"\n'},
      "secretEnv": {"MT": {"existingSecret": "s", "key": "k"}}, "extraEnv": [{"name": "MT_FILE", "value": "/x"}]},
     "extraEnv.MT_FILE: a secret the configuration names goes through secretEnv"),
    ({"secretEnv": {"ES_PROVIDER_ENGINE_PASSWORD": {"existingSecret": "s", "key": "k"}}},
     "the chart sets ES_PROVIDER_ENGINE_PASSWORD_FILE itself"),
    ({"autoscaling": {"enabled": True}, "resources": {"requests": {"cpu": None}}}, "needs resources.requests.cpu"),
])
def test_what_cannot_work_is_refused_at_render_time(values: dict[str, Any], said: str) -> None:
    assert said in template_with(values, fails=True)


def test_the_charts_app_version_is_the_packages() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert chart["apiVersion"] == "v2" and chart["appVersion"] == project["version"]
    assert serving("default")[1]["image"] == f"es-provider:{project['version']}"
