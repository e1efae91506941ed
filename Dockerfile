# A pinned base: Python 3.11.14 on Debian 12 (bookworm), not the floating 3.11-slim. For a byte-for-byte pin add the
# digest your registry reports (`python:3.11.14-slim-bookworm@sha256:…`): it cannot be checked from here (no registry).
FROM python:3.11.14-slim-bookworm
WORKDIR /app
# Only what the service imports (requirements-runtime.lock: requirements.lock's pins of pyproject's dependencies;
# the tests' and tools' packages stay out of the image).
COPY requirements-runtime.lock ./
RUN pip install --no-cache-dir -r requirements-runtime.lock
COPY pyproject.toml README.md ./
COPY es_provider ./es_provider
COPY mappings ./mappings
COPY examples ./examples
RUN pip install --no-cache-dir --no-deps . \
 && groupadd --system --gid 10001 provider \
 && useradd --system --uid 10001 --gid 10001 --no-create-home provider \
 && mkdir -p /var/cache/es-provider && chown 10001:10001 /var/cache/es-provider
# The embedders' vector cache lives under ES_PROVIDER_CACHE (compose keeps it in a volume).
ENV ES_PROVIDER_MAPPINGS=/app/mappings ES_PROVIDER_CACHE=/var/cache/es-provider PYTHONUNBUFFERED=1
# Numeric, so that a runtime asked for non-root (Kubernetes' runAsNonRoot) can verify it without /etc/passwd.
USER 10001:10001
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=5s CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)"
CMD ["es-provider", "serve", "--config", "/app/examples/config.toml", "--host", "0.0.0.0", "--port", "8080"]
