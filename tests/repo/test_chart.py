"""The Helm chart (charts/es-provider, docs/kubernetes.md), checked offline: `helm lint --strict` and `helm template`
of the default values and of every values set in charts/es-provider/ci/; every rendered manifest validated against
the Kubernetes API's JSON schemas by kubernetes-validate, with its strict schemas (an unknown field is an error), for
Kubernetes 1.29 (the chart's kubeVersion floor) and 1.37 (the newest it ships, and Helm 4.3.2's own client); the
ServiceMonitor, a Prometheus Operator CRD those schemas do not hold, checked here by its shape.

Secrets: no manifest is a Secret or holds a secret's value; each *_ref reaches the pod as NAME_FILE, a file of a
mounted Secret, and reading every one of them through the service's own reader (config/secrets.py) from the files
the pod would see yields the Secrets' (test) values; a values file that tries to hold a secret is refused by
values.schema.json without echoing it. The rendered configuration loads with the service's settings model.

Helm is scripts/helm-local's (v4.3.2, built once from the Go module proxy; `make test`'s setup builds it): without it
every test here fails, none skips."""

from __future__ import annotations

import copy
import functools
import re
import subprocess
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import kubernetes_validate.utils
import pytest
import yaml

from es_provider.config.secrets import read_secret
from es_provider.config.settings import parse_settings

ROOT = Path(__file__).resolve().parent.parent.parent
CHART = ROOT / "charts" / "es-provider"
VALUE_SETS = ["default", *sorted(path.name for path in (CHART / "ci").glob("*-values.yaml"))]
KUBERNETES = ("1.29", "1.37")  # the chart's kubeVersion floor, and the newest schemas kubernetes-validate ships
RELEASE, NAMESPACE = "kb", "search"
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
WORKLOADS = ("Deployment", "Job", "CronJob")
CHART_REFS = ("ES_PROVIDER_ENGINE_PASSWORD", "ES_PROVIDER_ENGINE_API_KEY", "ES_PROVIDER_ENGINE_USERNAME")  # the [opensearch] refs the chart names

# What the Secrets the ci values name would hold in a cluster: distinctive values, so that one found in a rendered
# manifest could only have come through the chart. Every Secret key a render refers to must be here.
PEM = "-----BEGIN CERTIFICATE-----\nMIIBchartTestCertificate0000\n-----END CERTIFICATE-----\n"
PEM_KEY = "-----BEGIN PRIVATE KEY-----\nMIIEchartTestPrivateKey0000\n-----END PRIVATE KEY-----\n"
SECRETS: dict[tuple[str, str], str] = {
    ("es-provider-engine", "password"): "chart-test-serve-password-7f3a9c",
    ("es-provider-engine", "api-key"): "chart-test-engine-api-key-51be02",
    ("es-provider-ingest", "password"): "chart-test-ingest-password-c04d18",
    ("es-provider-client-cert", "tls.crt"): PEM,
    ("es-provider-client-cert", "tls.key"): PEM_KEY,
    ("corp-root-ca", "ca.crt"): PEM,
    ("es-provider-keys", "project-callback-key"): "chart-test-callback-secret-9d21e6",
    ("es-provider-keys", "support-callback-key"): "chart-test-support-secret-3e88a0",
    ("es-provider-keys", "handbook-callback-key"): "chart-test-handbook-secret-aa7310",
    ("es-provider-keys", "policies-callback-key"): "chart-test-policies-secret-6c05f2",
    ("es-provider-keys", "agentarts-key"): "chart-test-agentarts-key-0b7e44",
    ("es-provider-keys", "dify-key"): "chart-test-dify-key-e91c3d",
    ("es-provider-keys", "workbench-key"): "chart-test-workbench-key-4f60b7",
    ("es-provider-metrics", "token"): "chart-test-metrics-token-d31f90",
    ("es-provider-scim", "token"): "chart-test-scim-token-5519ce7a",
    ("es-provider-access", "query-key"): "chart-test-access-query-key-8e2b",
    ("es-provider-access", "view-key"): "chart-test-access-view-key-71f4",
    ("otel-headers", "headers"): "authorization=Bearer chart-test-otlp-token-b40e",
}


@functools.cache
def helm() -> str:
    built = subprocess.run([str(ROOT / "scripts" / "helm-local"), "path"], capture_output=True, text=True)
    if built.returncode != 0:
        pytest.fail(f"no helm: scripts/helm-local path failed: {built.stderr.strip()[-2000:]}", pytrace=False)
    return built.stdout.strip().splitlines()[-1]


def run_helm(*args: str, values: str | Path | None = None) -> subprocess.CompletedProcess[str]:
    files = [] if values in (None, "default") else ["-f", str(values if isinstance(values, Path) else CHART / "ci" / str(values))]
    return subprocess.run([helm(), *args, *files], capture_output=True, text=True, cwd=ROOT)


@functools.cache
def render(values: str) -> str:
    done = run_helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, values=values)
    assert done.returncode == 0, done.stderr
    return done.stdout


@functools.cache
def _parsed(values: str) -> tuple[dict[str, Any], ...]:
    return tuple(doc for doc in yaml.load_all(render(values), Loader=LOADER) if doc)


def manifests(values: str) -> list[dict[str, Any]]:
    """The render's objects (a fresh copy: a test may change one)."""
    return copy.deepcopy(list(_parsed(values)))


def one(values: str, kind: str) -> dict[str, Any]:
    [found] = [doc for doc in manifests(values) if doc["kind"] == kind]
    return found


def pod_specs(values: str) -> Iterator[tuple[str, dict[str, Any]]]:
    for doc in manifests(values):
        if doc["kind"] == "CronJob":
            yield f"CronJob/{doc['metadata']['name']}", doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        elif doc["kind"] in WORKLOADS:
            yield f"{doc['kind']}/{doc['metadata']['name']}", doc["spec"]["template"]["spec"]


def containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod.get("initContainers", []), *pod["containers"]]


def serving(values: str) -> tuple[dict[str, Any], dict[str, Any]]:
    pod = one(values, "Deployment")["spec"]["template"]["spec"]
    [container] = pod["containers"]
    return pod, container


def config_files(values: str) -> dict[str, str]:
    return one(values, "ConfigMap")["data"]


def refs_in(value: Any) -> set[str]:
    """Every value of a key ending in _ref in a parsed TOML document."""
    if isinstance(value, dict):
        return {found for key, item in value.items()
                for found in ({item} if key.endswith("_ref") and isinstance(item, str) else refs_in(item))}
    if isinstance(value, list):
        return {found for item in value for found in refs_in(item)}
    return set()


def mounted_files(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    """Path in the container → (kind, name, key) of the Secret or ConfigMap item behind it."""
    volumes = {volume["name"]: volume for volume in pod.get("volumes", [])}
    files = {}
    for mount in container.get("volumeMounts", []):
        assert "subPath" not in mount, f"{mount['name']}: a subPath mount never sees a rotated Secret"
        volume = volumes[mount["name"]]
        sources = volume["projected"]["sources"] if "projected" in volume else [volume]
        for source in sources:
            if "serviceAccountToken" in source:
                files[f"{mount['mountPath']}/{source['serviceAccountToken']['path']}"] = ("token", "", "")
            for kind in ("secret", "configMap"):
                if kind in source:
                    name = source[kind].get("name") or source[kind].get("secretName")
                    for item in source[kind].get("items", []):
                        files[f"{mount['mountPath']}/{item['path']}"] = (kind, name, item["key"])
    return files


# --- helm lint, helm template, the Kubernetes schemas ---------------------------------------------------------------

@pytest.fixture(scope="module", autouse=True)
def _schemas_read_once() -> Iterator[None]:
    """kubernetes-validate reads a kind's schema file and its version's definitions (2 MB of JSON) again at every
    call: read each once (they are the package's own files; validation itself is unchanged)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kubernetes_validate.utils, "schema_contents",
                      functools.cache(kubernetes_validate.utils.schema_contents))
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


def template_with(values: dict[str, Any], *, fails: bool = False) -> Any:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", encoding="utf-8") as file:
        yaml.safe_dump(values, file)
        file.flush()
        done = run_helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, values=Path(file.name))
    if fails:
        assert done.returncode != 0, f"rendered: {done.stdout[:500]}"
        return done.stderr
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


@pytest.mark.parametrize("case", LEAKS)
def test_a_secret_value_in_the_values_is_refused_without_being_echoed(case: str) -> None:
    said = template_with(LEAKS[case], fails=True)
    assert "don't meet the specifications of the schema" in said, said
    leak = re.search(r"LEAK-[\w-]+", yaml.safe_dump(LEAKS[case]))
    assert leak is not None and leak.group(0) not in said, said


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


# --- the review's findings: each a values file (in tmp_path) refused with a clear message, or rendered right ---------

def template_file(tmp_path: Path, values: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    return run_helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, values=path)


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
