"""What the chart's tests share (tests/repo/test_chart*.py): the chart rendered by scripts/helm-local's Helm with a
values set or a values file, its objects and pods, the Secrets' test values, and the schemas read once."""

from __future__ import annotations

import copy
import functools
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import kubernetes_validate.utils
import pytest
import yaml

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


def template_file(tmp_path: Path, values: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    return run_helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, values=path)


@contextmanager
def schemas_read_once() -> Iterator[None]:
    """kubernetes-validate reads a kind's schema file and its version's definitions (2 MB of JSON) again at every
    call: read each once while this lasts (they are the package's own files; validation itself is unchanged)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kubernetes_validate.utils, "schema_contents",
                      functools.cache(kubernetes_validate.utils.schema_contents))
        yield
