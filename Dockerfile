FROM python:3.11-slim
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
 && useradd --system --uid 10001 --no-create-home provider \
 && mkdir -p /var/cache/es-provider && chown provider /var/cache/es-provider
# The embedders' vector cache lives under ES_PROVIDER_CACHE (compose keeps it in a volume).
ENV ES_PROVIDER_MAPPINGS=/app/mappings ES_PROVIDER_CACHE=/var/cache/es-provider PYTHONUNBUFFERED=1
USER provider
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=5s CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)"
CMD ["es-provider", "serve", "--config", "/app/examples/config.toml", "--host", "0.0.0.0", "--port", "8080"]
