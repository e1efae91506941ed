{{/* Names and labels. */}}
{{- define "es-provider.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "es-provider.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "es-provider.selectorLabels" -}}
app.kubernetes.io/name: {{ include "es-provider.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The serving pods (the jobs' pods carry another component, so no Service or budget selects them). */}}
{{- define "es-provider.serverSelectorLabels" -}}
{{ include "es-provider.selectorLabels" . }}
app.kubernetes.io/component: server
{{- end -}}

{{- define "es-provider.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "es-provider.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "es-provider.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "es-provider.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "es-provider.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* Fixed paths inside the pod: the configuration's [opensearch] table points at them. */}}
{{- define "es-provider.configDir" -}}/etc/es-provider/config{{- end -}}
{{- define "es-provider.engineDir" -}}/etc/es-provider/engine{{- end -}}
{{- define "es-provider.secretsDir" -}}/etc/es-provider/secrets{{- end -}}
{{- define "es-provider.awsTokenDir" -}}/var/run/secrets/es-provider/aws{{- end -}}
{{/* The environment variables the chart's own [opensearch] refs name (NAME_FILE is set, never NAME). */}}
{{- define "es-provider.passwordEnv" -}}ES_PROVIDER_ENGINE_PASSWORD{{- end -}}
{{- define "es-provider.usernameEnv" -}}ES_PROVIDER_ENGINE_USERNAME{{- end -}}
{{- define "es-provider.apiKeyEnv" -}}ES_PROVIDER_ENGINE_API_KEY{{- end -}}

{{/*
The user's TOML parsed (fromToml), or an empty dict with existingConfigMap. Refuses a file that is not TOML or that
holds [opensearch] (the chart writes that table from `engine`).
*/}}
{{- define "es-provider.parsedConfig" -}}
{{- if .Values.config.existingConfigMap -}}
{{- dict | toJson -}}
{{- else -}}
{{- $parsed := fromToml (.Values.config.toml | default "") -}}
{{- if hasKey $parsed "Error" -}}
{{- fail (printf "config.toml is not valid TOML: %s" (get $parsed "Error")) -}}
{{- end -}}
{{- if hasKey $parsed "opensearch" -}}
{{- fail "config.toml holds an [opensearch] table: describe the engine in the `engine` values instead (the chart writes [opensearch] itself, pointing at the Secrets it mounts)" -}}
{{- end -}}
{{- $parsed | toJson -}}
{{- end -}}
{{- end -}}

{{/* Every value of a key ending in _ref, anywhere in a parsed TOML value: one per line. */}}
{{- define "es-provider.refsIn" -}}
{{- if kindIs "map" . -}}
{{- range $key, $value := . -}}
{{- if and (hasSuffix "_ref" $key) (kindIs "string" $value) }}
{{ $value }}
{{- else }}
{{ include "es-provider.refsIn" $value }}
{{- end -}}
{{- end -}}
{{- else if kindIs "slice" . -}}
{{- range . }}
{{ include "es-provider.refsIn" . }}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The configuration's *_ref names, as a JSON list (sorted, unique). */}}
{{- define "es-provider.refs" -}}
{{- $parsed := include "es-provider.parsedConfig" . | fromJson -}}
{{- include "es-provider.refsIn" $parsed | splitList "\n" | compact | uniq | sortAlpha | toJson -}}
{{- end -}}

{{/* A URL carrying credentials (userinfo: user[:password]@host). Matched, never printed. */}}
{{- define "es-provider.userinfoPattern" -}}[A-Za-z][A-Za-z0-9+.-]*://[^/?#@\s]*@{{- end -}}

{{/* A credential in a URL's query string (?api_key=..., &access_token=..., &X-Amz-Security-Token=..., &sig=...). */}}
{{- define "es-provider.queryCredentialPattern" -}}
(?i)[?&;]([a-z0-9]+[-_.])*(api[-_.]?key|apikey|key|token|auth|authorization|pass|passwd|password|pwd|secret|sig|signature|credentials?|jwt)=[^&#\s]
{{- end -}}

{{/*
What makes a string a secret's value whatever name it is under, as one word (or nothing): "url" (user:password@),
"query" (a credential in a URL's query string), "pem" (a private key), "authorization" ("Authorization: Bearer
...", or a value that is "Bearer <token>" / "Basic <token>" alone, the token not all lower-case letters: not "basic
setup"), "jwt" (a JSON Web Token).
Matched, never printed: the callers fail with the word's phrase (es-provider.secretShapeSaid) and the key.
*/}}
{{- define "es-provider.secretShape" -}}
{{- $value := toString . -}}
{{- if regexMatch (include "es-provider.userinfoPattern" .) $value -}}url
{{- else if regexMatch (include "es-provider.queryCredentialPattern" .) $value -}}query
{{- else if regexMatch "-----BEGIN ([A-Z0-9]+ )*PRIVATE KEY-----" $value -}}pem
{{- else if regexMatch "(?i)authorization\\s*[=:]\\s*(bearer|basic)\\s+\\S" $value -}}authorization
{{- else if and (regexMatch "^(?i:bearer|basic)\\s+[A-Za-z0-9._~+/-]{8,}=*$" (trim $value)) (regexMatch "\\s[A-Za-z0-9._~+/=-]*[A-Z0-9._~+/=-]" (trim $value)) -}}authorization
{{- else if regexMatch "eyJ[A-Za-z0-9_-]+\\.eyJ[A-Za-z0-9_-]+\\." $value -}}jwt
{{- end -}}
{{- end -}}
{{- define "es-provider.secretShapeSaid" -}}
{{- get (dict "url" "a URL with credentials in it (user:password@)" "query" "a URL with a credential in its query string (?api_key=..., &token=...)" "pem" "a private key (a PEM block)" "authorization" "an Authorization header's value (Bearer ..., Basic ...)" "jwt" "a JSON Web Token") . -}}
{{- end -}}

{{/*
The places of a parsed TOML value that hold a secret literally, one a line: "literal PATH" for a string under a key
named as a secret (password, token, secret, key, api_key, ..., never *_ref), "SHAPE PATH" for a string that is a
secret by its shape (es-provider.secretShape: "url" for a URL with userinfo, "query", "pem", ...).
Only the paths: a value is never part of the output (Helm prints fail's message).
*/}}
{{- define "es-provider.secretsIn" -}}
{{- $path := .path -}}
{{- if kindIs "map" .value -}}
{{- range $key, $value := .value -}}
{{- $here := ternary $key (printf "%s.%s" $path $key) (eq $path "") -}}
{{- if kindIs "string" $value -}}
{{- $shape := include "es-provider.secretShape" $value -}}
{{- if and $value (regexMatch "(?i)^(.*_)?(password|passwd|secret|token|api_?key|key|credentials?)$" $key) }}
literal {{ $here }}
{{- else if $shape }}
{{ $shape }} {{ $here }}
{{- end -}}
{{- else }}
{{ include "es-provider.secretsIn" (dict "path" $here "value" $value) }}
{{- end -}}
{{- end -}}
{{- else if kindIs "slice" .value -}}
{{- range $i, $value := .value -}}
{{- $here := printf "%s[%d]" $path $i -}}
{{- if kindIs "string" $value -}}
{{- with include "es-provider.secretShape" $value }}
{{ . }} {{ $here }}
{{- end -}}
{{- else }}
{{ include "es-provider.secretsIn" (dict "path" $here "value" $value) }}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The checks no schema can make: each *_ref has a secretEnv entry, no secretEnv name is one the chart keeps for itself,
extraEnv sets no secret, the worker count has a CPU limit to come from.
*/}}
{{- define "es-provider.validate" -}}
{{- $reserved := list (include "es-provider.passwordEnv" .) (include "es-provider.apiKeyEnv" .) (include "es-provider.usernameEnv" .) -}}
{{- $refs := include "es-provider.refs" . | fromJsonArray -}}
{{- range $refs -}}
{{- if not (hasKey $.Values.secretEnv .) -}}
{{- fail (printf "config.toml names the secret %s (a *_ref) but secretEnv has no entry for it: add secretEnv.%s: {existingSecret: <Secret>, key: <key>}" . .) -}}
{{- end -}}
{{- end -}}
{{- if include "es-provider.jobsEnabled" . -}}
{{- /* The jobs get jobs.secretEnv (and the chart's own [opensearch] files), never secretEnv: `prepare` also connects
to [access_log.engine]'s cluster, so the refs of its credentials must be there. */ -}}
{{- $accessEngine := dig "access_log" "engine" (dict) (include "es-provider.parsedConfig" . | fromJson) -}}
{{- range $field := list "password_ref" "api_key_ref" -}}
{{- $ref := get $accessEngine $field -}}
{{- if and $ref (kindIs "string" $ref) (not (hasKey $.Values.jobs.secretEnv $ref)) -}}
{{- fail (printf "config.toml's [access_log.engine] %s names %s, which the admin jobs need (`es-provider prepare` connects to the access record's cluster too), but jobs.secretEnv has no entry for it (the jobs get jobs.secretEnv, not secretEnv): add jobs.secretEnv.%s: {existingSecret: <Secret>, key: <key>}" $field $ref $ref) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $name, $_ := merge (dict) .Values.secretEnv .Values.jobs.secretEnv -}}
{{- if has $name $reserved -}}
{{- fail (printf "secretEnv.%s: the chart sets %s_FILE itself for [opensearch] (engine.auth): choose another name" $name $name) -}}
{{- end -}}
{{- end -}}
{{- $userinfo := include "es-provider.userinfoPattern" . -}}
{{- range $found := include "es-provider.secretsIn" (dict "path" "" "value" (include "es-provider.parsedConfig" . | fromJson)) | splitList "\n" | compact -}}
{{- $where := splitList " " $found -}}
{{- if eq (first $where) "literal" -}}
{{- fail (printf "config.toml: %s holds a secret literally (the value is not shown): no secret goes in the configuration; name an environment variable instead (%s_ref = \"NAME\", as docs/configuration.md has it) and give it a secretEnv entry (a Secret)" (last $where) (last $where | splitList "." | last)) -}}
{{- else if eq (first $where) "url" -}}
{{- fail (printf "config.toml: %s is a URL with credentials in it (user:password@; the value is not shown): give the URL without them, and the credentials by reference (password_ref / api_key_ref with a secretEnv entry)" (last $where)) -}}
{{- else -}}
{{- fail (printf "config.toml: %s is %s (the value is not shown): no secret goes in the configuration; give it by reference (a *_ref naming an environment variable, with a secretEnv entry)" (last $where) (include "es-provider.secretShapeSaid" (first $where))) -}}
{{- end -}}
{{- end -}}
{{- range $name, $value := .Values.otel.env -}}
{{- if regexMatch $userinfo (toString $value) -}}
{{- fail (printf "otel.env.%s is a URL with credentials in it (userinfo@; the value is not shown): give the endpoint without them; the collector's credentials go in otel.headersSecret (OTEL_EXPORTER_OTLP_HEADERS from a Secret)" $name) -}}
{{- end -}}
{{- with include "es-provider.secretShape" $value -}}
{{- fail (printf "otel.env.%s is %s (the value is not shown): no credential in otel.env; the collector's go in otel.headersSecret (OTEL_EXPORTER_OTLP_HEADERS from a Secret)" $name (include "es-provider.secretShapeSaid" .)) -}}
{{- end -}}
{{- if hasSuffix "_ATTRIBUTES" $name -}}
{{- range splitList "," (toString $value) -}}
{{- $pair := splitList "=" . -}}
{{- $attribute := first $pair | trim -}}
{{- if and (gt (len $pair) 1) (rest $pair | join "=" | trim) (regexMatch "(?i)(^|[._-])(pass|passwd|password|passphrase|secret|token|api[._-]?key|apikey|key|credentials?|creds|auth|authorization|cookie)([._-]|$)" $attribute) -}}
{{- fail (printf "otel.env.%s: the attribute %s holds a secret (the value is not shown): resource attributes go with every span to the collector and the backend, where anyone who reads traces sees them; no credential in them (the collector's go in otel.headersSecret)" $name $attribute) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range .Values.extraEnv -}}
{{- if has .name (list "OPENSEARCH_URL" "OPENSEARCH_URL_FILE") -}}
{{- fail (printf "extraEnv.%s: the engine's URL is engine.url (the chart writes [opensearch] url from it), its credentials engine.auth's Secret: not extraEnv" .name) -}}
{{- end -}}
{{- if and .value (regexMatch $userinfo (toString .value)) -}}
{{- fail (printf "extraEnv.%s is a URL with credentials in it (user:password@; the value is not shown): extraEnv is for non-secret values; credentials come from Secrets (engine.auth, secretEnv for a *_ref of the configuration)" .name) -}}
{{- end -}}
{{- if and .value (not (hasSuffix "_FILE" .name)) (regexMatch "(?i)(PASSWORD|PASSWD|SECRET|TOKEN|API_?KEY|CREDENTIAL)" .name) -}}
{{- fail (printf "extraEnv.%s: a secret's value in extraEnv (the value is not shown): extraEnv is for non-secret values; credentials come from Secrets (engine.auth, secretEnv for a *_ref of the configuration)" .name) -}}
{{- end -}}
{{- if and .value (regexMatch "(?i)^OTEL_.*HEADERS$" .name) -}}
{{- fail (printf "extraEnv.%s: the OTLP exporter's headers are a credential (the value is not shown): they go in otel.headersSecret (OTEL_EXPORTER_OTLP_HEADERS from a Secret), never extraEnv" .name) -}}
{{- end -}}
{{- /* A name made of a secret's word (DB_PASS, ENCRYPTION_KEY, *_HEADERS, *_CREDS), but not one naming a file, a
path or an identifier (SIGNING_KEY_PATH, KMS_KEY_ID; the OTLP client key is a file's path by the OTel spec). */ -}}
{{- if and .value (regexMatch "(?i)(^|_)(PASS|PASSPHRASE|KEYS?|HEADERS?|CREDS|AUTHORIZATION|COOKIES?|PRIVATE)(_|$)" .name) (not (regexMatch "(?i)_(FILE|PATH|DIR|ID|ARN)$" .name)) (not (regexMatch "^OTEL_EXPORTER_OTLP_([A-Z]+_)?CLIENT_KEY$" .name)) -}}
{{- fail (printf "extraEnv.%s: a secret's value in extraEnv (the value is not shown): extraEnv is for non-secret values; credentials come from Secrets (engine.auth, secretEnv for a *_ref of the configuration)" .name) -}}
{{- end -}}
{{- $name := .name -}}
{{- with and .value (include "es-provider.secretShape" .value) -}}
{{- fail (printf "extraEnv.%s is %s (the value is not shown): extraEnv is for non-secret values; credentials come from Secrets (engine.auth, secretEnv for a *_ref of the configuration)" $name (include "es-provider.secretShapeSaid" .)) -}}
{{- end -}}
{{- end -}}
{{- range .Values.extraEnv -}}
{{- $base := trimSuffix "_FILE" .name -}}
{{- $secretEnv := merge (dict) $.Values.secretEnv $.Values.jobs.secretEnv -}}
{{- if or (has .name $refs) (has $base $refs) (hasKey $secretEnv .name) (hasKey $secretEnv $base) (has .name $reserved) (has $base $reserved) -}}
{{- fail (printf "extraEnv.%s: a secret the configuration names goes through secretEnv (a mounted Secret), not extraEnv" .name) -}}
{{- end -}}
{{- end -}}
{{- if regexMatch "[?#]" .Values.engine.url -}}
{{- fail "engine.url has a query string or a fragment (the value is not shown): the service takes none (a node's URL is scheme://host[:port][/path]), and the chart would write it into the ConfigMap. Give the URL without it; the engine's credentials go in engine.auth (a Secret)" -}}
{{- end -}}
{{- /* Annotations are readable by whoever may read the object, and copied by every tool that lists it. */ -}}
{{- range $where, $annotations := dict "podAnnotations" .Values.podAnnotations "jobs.annotations" .Values.jobs.annotations -}}
{{- range $key, $value := $annotations -}}
{{- $text := toString $value -}}
{{- with include "es-provider.secretShape" $text -}}
{{- fail (printf "%s.%s is %s (the value is not shown): an annotation is readable by anyone who may read the pod; a secret goes in a Secret (secretEnv)" $where $key (include "es-provider.secretShapeSaid" .)) -}}
{{- end -}}
{{- if and (regexMatch "(?i)(^|[-_.])(pass|passwd|password|passphrase|secret|token|api[-_.]?key|apikey|key|credentials?|creds)$" (last (splitList "/" $key))) (not (hasPrefix "checksum/" $key)) (not (regexMatch "^(true|false|[0-9]*)$" $text)) -}}
{{- fail (printf "%s.%s: a secret's value in an annotation (the value is not shown): an annotation is readable by anyone who may read the pod; a secret goes in a Secret (secretEnv)" $where $key) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and (not .Values.workers) (not (and .Values.resources.limits .Values.resources.limits.cpu)) -}}
{{- fail "workers is empty (one per core of the CPU limit) but resources.limits.cpu is not set: set one of the two" -}}
{{- end -}}
{{- if and .Values.autoscaling.enabled (not (and .Values.resources.requests .Values.resources.requests.cpu)) -}}
{{- fail "autoscaling by CPU utilization needs resources.requests.cpu" -}}
{{- end -}}
{{- $auth := .Values.engine.auth -}}
{{- if and (eq $auth.type "aws") (not (hasPrefix "https://" .Values.engine.url)) -}}
{{- fail "engine.auth.type aws needs an https:// engine.url (AWS endpoints take no plain HTTP)" -}}
{{- end -}}
{{- if and .Values.engine.tls.ca.existingSecret .Values.engine.tls.ca.existingConfigMap -}}
{{- fail "engine.tls.ca: existingSecret or existingConfigMap, not both" -}}
{{- end -}}
{{- range $key, $_ := .Values.podLabels -}}
{{- if hasPrefix "app.kubernetes.io/" $key -}}
{{- fail (printf "podLabels.%s: the chart sets the app.kubernetes.io/* labels itself (the Deployment's selector, the Service's, the budget's and the policy's are made of them): choose a key of your own domain" $key) -}}
{{- end -}}
{{- end -}}
{{- $pdb := .Values.podDisruptionBudget -}}
{{- $replicas := ternary .Values.autoscaling.minReplicas .Values.replicaCount .Values.autoscaling.enabled | int -}}
{{- $counted := ternary "autoscaling.minReplicas" "replicaCount" .Values.autoscaling.enabled -}}
{{- if and $pdb.enabled (gt $replicas 0) -}}
{{- if not (kindIs "invalid" $pdb.minAvailable) -}}
{{- $min := toString $pdb.minAvailable -}}
{{- $kept := atoi (trimSuffix "%" $min) -}}
{{- if hasSuffix "%" $min -}}
{{- $kept = div (add (mul $kept $replicas) 99) 100 -}}
{{- end -}}
{{- if and (gt $kept 0) (ge $kept $replicas) -}}
{{- fail (printf "podDisruptionBudget.minAvailable %s keeps all %d pods (%s): a budget that allows no disruption blocks every node drain. Set minAvailable below %d, or maxUnavailable: 1 (minAvailable: null), or podDisruptionBudget.enabled: false" $min $replicas $counted $replicas) -}}
{{- end -}}
{{- else if eq (atoi (trimSuffix "%" (toString $pdb.maxUnavailable))) 0 -}}
{{- fail (printf "podDisruptionBudget.maxUnavailable %s: a budget that allows no disruption blocks every node drain. Set maxUnavailable: 1 (or more), or podDisruptionBudget.enabled: false" (toString $pdb.maxUnavailable)) -}}
{{- end -}}
{{- end -}}
{{- $ingress := .Values.ingress -}}
{{- if and $ingress.enabled (not $ingress.allowPlaintext) -}}
{{- if empty $ingress.tls -}}
{{- fail "ingress.tls is empty: the Ingress would take the platforms' API keys and the users' tokens in clear text. Give ingress.tls: [{secretName: <a kubernetes.io/tls Secret>, hosts: [<each of ingress.hosts>]}], or, only when TLS is terminated in front of the ingress controller, set ingress.allowPlaintext: true" -}}
{{- end -}}
{{- $covered := list -}}
{{- range $ingress.tls -}}
{{- $covered = concat $covered (.hosts | default list) -}}
{{- end -}}
{{- range $i, $rule := $ingress.hosts -}}
{{- if not (or (has $rule.host $covered) (has (regexReplaceAll "^[^.]*" $rule.host "*") $covered)) -}}
{{- fail (printf "ingress.hosts[%d].host %s is in no ingress.tls[].hosts: the Ingress would serve it in clear text. Add it to a tls entry's hosts (a certificate for it, or a wildcard *.<domain>), or, only when TLS is terminated in front of the ingress controller, set ingress.allowPlaintext: true" $i ($rule.host | quote)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and .Values.networkPolicy.enabled (empty .Values.networkPolicy.ingressFrom) -}}
{{- fail "networkPolicy.ingressFrom is empty: an ingress rule with no peers admits every source. List the peers that may reach the http port (e.g. `- podSelector: {}` for the release namespace's pods, plus your ingress controller's and Prometheus' namespaces), or set networkPolicy.enabled: false" -}}
{{- end -}}
{{- end -}}

{{/* The jobs' engine: `engine` with jobs.engine's auth (and client certificate, when given) in place of its own. */}}
{{- define "es-provider.jobEngine" -}}
{{- $engine := deepCopy .Values.engine -}}
{{- $override := .Values.jobs.engine | default dict -}}
{{- if $override.auth -}}
{{- $_ := set $engine "auth" (mergeOverwrite (deepCopy .Values.engine.auth) (dict "type" "none") $override.auth) -}}
{{- end -}}
{{- if and $override.tls (hasKey $override.tls "clientCert") -}}
{{- $_ := set $engine.tls "clientCert" (mergeOverwrite (dict "certKey" "tls.crt" "keyKey" "tls.key") $override.tls.clientCert) -}}
{{- end -}}
{{- $engine | toJson -}}
{{- end -}}

{{/* Whether the engine has a CA from a Secret or ConfigMap, and a client certificate. */}}
{{- define "es-provider.hasCA" -}}
{{- if or .tls.ca.existingSecret .tls.ca.existingConfigMap }}true{{ end -}}
{{- end -}}
{{- define "es-provider.hasClientCert" -}}
{{- if .tls.clientCert.existingSecret }}true{{ end -}}
{{- end -}}

{{/*
The [opensearch] table for an engine (a dict shaped as `engine`): every value through toJson (a JSON string, number
or boolean is a TOML one, escapes included), secrets by reference to the files the chart mounts.
*/}}
{{- define "es-provider.opensearchToml" -}}
{{- $auth := .auth -}}
[opensearch]
url = {{ .url | toJson }}
{{- if .timeoutS }}
timeout_s = {{ .timeoutS | toJson }}
{{- end }}
{{- if .writeBlockWaitS }}
write_block_wait_s = {{ .writeBlockWaitS | toJson }}
{{- end }}
{{- if include "es-provider.hasCA" . }}
ca_file = {{ printf "%s/ca.crt" (include "es-provider.engineDir" .) | toJson }}
{{- end }}
{{- if .tls.caFingerprint }}
ca_fingerprint = {{ .tls.caFingerprint | toJson }}
{{- end }}
{{- if include "es-provider.hasClientCert" . }}
client_cert_file = {{ printf "%s/client.crt" (include "es-provider.engineDir" .) | toJson }}
client_key_file = {{ printf "%s/client.key" (include "es-provider.engineDir" .) | toJson }}
{{- end }}
{{- if eq $auth.type "basic" }}
{{- if and $auth.basic.usernameKey $auth.basic.username }}
{{- fail "engine.auth.basic: set username or usernameKey, not both" }}
{{- else if $auth.basic.usernameKey }}
{{- /* The user from the same Secret as its password, read as one pair: a rotation to a second user (docs/cluster.md) */}}
username_ref = {{ include "es-provider.usernameEnv" . | toJson }}
{{- else }}
username = {{ required "engine.auth.basic.username (or usernameKey) is required with auth type basic" $auth.basic.username | toJson }}
{{- end }}
password_ref = {{ include "es-provider.passwordEnv" . | toJson }}
{{- else if eq $auth.type "apiKey" }}
api_key_ref = {{ include "es-provider.apiKeyEnv" . | toJson }}
{{- end }}
{{- if .tls.insecure }}
insecure = true
{{- end }}
{{- if eq $auth.type "aws" }}

[opensearch.aws]
region = {{ required "engine.auth.aws.region is required with auth type aws" $auth.aws.region | toJson }}
service = {{ $auth.aws.service | default "es" | toJson }}
{{- if $auth.aws.profile }}
profile = {{ $auth.aws.profile | toJson }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The projected volume sources of an engine's files (password, API key, CA, client certificate). */}}
{{- define "es-provider.engineSources" -}}
{{- $auth := .auth -}}
{{- if eq $auth.type "basic" }}
- secret:
    name: {{ required "engine.auth.basic.existingSecret is required with auth type basic" $auth.basic.existingSecret }}
    items:
      - key: {{ $auth.basic.passwordKey | default "password" }}
        path: password
      {{- if $auth.basic.usernameKey }}
      - key: {{ $auth.basic.usernameKey }}
        path: username
      {{- end }}
{{- else if eq $auth.type "apiKey" }}
- secret:
    name: {{ required "engine.auth.apiKey.existingSecret is required with auth type apiKey" $auth.apiKey.existingSecret }}
    items:
      - key: {{ $auth.apiKey.key | default "api-key" }}
        path: api-key
{{- end }}
{{- if .tls.ca.existingSecret }}
- secret:
    name: {{ .tls.ca.existingSecret }}
    items:
      - key: {{ .tls.ca.key | default "ca.crt" }}
        path: ca.crt
{{- else if .tls.ca.existingConfigMap }}
- configMap:
    name: {{ .tls.ca.existingConfigMap }}
    items:
      - key: {{ .tls.ca.key | default "ca.crt" }}
        path: ca.crt
{{- end }}
{{- if include "es-provider.hasClientCert" . }}
- secret:
    name: {{ .tls.clientCert.existingSecret }}
    items:
      - key: {{ .tls.clientCert.certKey | default "tls.crt" }}
        path: client.crt
      - key: {{ .tls.clientCert.keyKey | default "tls.key" }}
        path: client.key
{{- end }}
{{- end -}}

{{/* The environment an engine's credentials need: NAME_FILE for the refs, the web identity for SigV4. */}}
{{- define "es-provider.engineEnv" -}}
{{- $auth := .auth -}}
{{- if eq $auth.type "basic" }}
- name: {{ include "es-provider.passwordEnv" . }}_FILE
  value: {{ printf "%s/password" (include "es-provider.engineDir" .) }}
{{- if $auth.basic.usernameKey }}
- name: {{ include "es-provider.usernameEnv" . }}_FILE
  value: {{ printf "%s/username" (include "es-provider.engineDir" .) }}
{{- end }}
{{- else if eq $auth.type "apiKey" }}
- name: {{ include "es-provider.apiKeyEnv" . }}_FILE
  value: {{ printf "%s/api-key" (include "es-provider.engineDir" .) }}
{{- else if and (eq $auth.type "aws") $auth.aws.webIdentity $auth.aws.webIdentity.roleArn }}
- name: AWS_ROLE_ARN
  value: {{ $auth.aws.webIdentity.roleArn | quote }}
- name: AWS_WEB_IDENTITY_TOKEN_FILE
  value: {{ printf "%s/token" (include "es-provider.awsTokenDir" .) }}
{{- end }}
{{- end -}}

{{/* A secretEnv map's projected sources (each NAME as a file named NAME) and its NAME_FILE variables. */}}
{{- define "es-provider.secretSources" -}}
{{- range $name, $ref := . }}
- secret:
    name: {{ $ref.existingSecret }}
    items:
      - key: {{ $ref.key }}
        path: {{ $name }}
{{- end }}
{{- end -}}
{{- define "es-provider.secretEnvVars" -}}
{{- range $name, $_ := . }}
- name: {{ $name }}_FILE
  value: {{ printf "%s/%s" (include "es-provider.secretsDir" $) $name }}
{{- end }}
{{- end -}}

{{/*
The volumes and mounts of a pod running es-provider: (dict "root" $ "engine" <engine dict> "secretEnv" <map>
"configKey" <key> "cache" <bool>).
*/}}
{{- define "es-provider.volumes" -}}
{{- $root := .root -}}
{{- $engine := .engine -}}
- name: config
  configMap:
    name: {{ $root.Values.config.existingConfigMap | default (include "es-provider.fullname" $root) }}
    items:
      - key: {{ .configKey }}
        path: config.toml
{{- $engineSources := include "es-provider.engineSources" $engine }}
{{- if $engineSources }}
- name: engine
  projected:
    defaultMode: 0440
    sources:
      {{- $engineSources | trim | nindent 6 }}
{{- end }}
{{- if .secretEnv }}
- name: secrets
  projected:
    defaultMode: 0440
    sources:
      {{- include "es-provider.secretSources" .secretEnv | trim | nindent 6 }}
{{- end }}
{{- if and (eq $engine.auth.type "aws") $engine.auth.aws.webIdentity $engine.auth.aws.webIdentity.roleArn }}
- name: aws-token
  projected:
    defaultMode: 0440
    sources:
      - serviceAccountToken:
          audience: {{ $engine.auth.aws.webIdentity.audience | default "sts.amazonaws.com" }}
          expirationSeconds: {{ $engine.auth.aws.webIdentity.expirationSeconds | default 86400 | int }}
          path: token
{{- end }}
- name: tmp
  emptyDir:
    sizeLimit: {{ $root.Values.tmpVolume.sizeLimit }}
{{- if and .cache $root.Values.cacheVolume.source }}
- name: cache
  {{- toYaml $root.Values.cacheVolume.source | nindent 2 }}
{{- else if .cache }}
- name: cache
  emptyDir:
    sizeLimit: {{ $root.Values.cacheVolume.sizeLimit }}
{{- else }}
- name: cache
  emptyDir:
    sizeLimit: {{ $root.Values.tmpVolume.sizeLimit }}
{{- end }}
{{- with $root.Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "es-provider.volumeMounts" -}}
{{- $root := .root -}}
{{- $engine := .engine -}}
- name: config
  mountPath: {{ include "es-provider.configDir" $root }}
  readOnly: true
{{- if include "es-provider.engineSources" $engine }}
- name: engine
  mountPath: {{ include "es-provider.engineDir" $root }}
  readOnly: true
{{- end }}
{{- if .secretEnv }}
- name: secrets
  mountPath: {{ include "es-provider.secretsDir" $root }}
  readOnly: true
{{- end }}
{{- if and (eq $engine.auth.type "aws") $engine.auth.aws.webIdentity $engine.auth.aws.webIdentity.roleArn }}
- name: aws-token
  mountPath: {{ include "es-provider.awsTokenDir" $root }}
  readOnly: true
{{- end }}
- name: tmp
  mountPath: /tmp
- name: cache
  mountPath: /var/cache/es-provider
{{- with $root.Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The pod-level fields the Deployment and the jobs share. */}}
{{- define "es-provider.podCommon" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
enableServiceLinks: false
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- end -}}

{{/* Whether the install Job runs (prepare or kb create), and whether any job does. */}}
{{- define "es-provider.setupJob" -}}
{{- if or .Values.jobs.prepare.enabled .Values.jobs.kbCreate.knowledgeBases }}true{{ end -}}
{{- end -}}
{{- define "es-provider.jobsEnabled" -}}
{{- include "es-provider.setupJob" . -}}
{{- end -}}

{{/* The checksum that rolls the pods when the configuration changes. */}}
{{- define "es-provider.configChecksum" -}}
{{- include (print .Template.BasePath "/configmap.yaml") . | sha256sum -}}
{{- end -}}

{{/*
extraEnv (non-secret: validate refuses the rest), for the server and the admin jobs alike: (dict "root" $ "jobs"
<bool>). In a job a resourceFieldRef names no container (its containers are not es-provider; unnamed is its own).
*/}}
{{- define "es-provider.extraEnv" -}}
{{- $items := list -}}
{{- range .root.Values.extraEnv -}}
{{- $item := deepCopy . -}}
{{- if and $.jobs $item.valueFrom $item.valueFrom.resourceFieldRef -}}
{{- $_ := unset $item.valueFrom.resourceFieldRef "containerName" -}}
{{- end -}}
{{- $items = append $items $item -}}
{{- end -}}
{{- with $items }}
{{- toYaml . }}
{{- end }}
{{- end -}}

{{/* One admin container: (dict "root" $ "name" <name> "args" <list of es-provider's arguments>). */}}
{{- define "es-provider.adminContainer" -}}
{{- $root := .root -}}
{{- $engine := include "es-provider.jobEngine" $root | fromJson -}}
- name: {{ .name }}
  image: {{ include "es-provider.image" $root }}
  imagePullPolicy: {{ $root.Values.image.pullPolicy }}
  command: ["es-provider"]
  args:
    {{- toYaml .args | nindent 4 }}
  env:
    - name: ES_PROVIDER_CACHE
      value: /var/cache/es-provider
    {{- with include "es-provider.engineEnv" $engine | trim }}
    {{- . | nindent 4 }}
    {{- end }}
    {{- with include "es-provider.secretEnvVars" $root.Values.jobs.secretEnv | trim }}
    {{- . | nindent 4 }}
    {{- end }}
    {{- with include "es-provider.extraEnv" (dict "root" $root "jobs" true) | trim }}
    {{- . | nindent 4 }}
    {{- end }}
  resources:
    {{- toYaml $root.Values.jobs.resources | nindent 4 }}
  securityContext:
    {{- toYaml $root.Values.securityContext | nindent 4 }}
  volumeMounts:
    {{- include "es-provider.volumeMounts" (dict "root" $root "engine" $engine "secretEnv" $root.Values.jobs.secretEnv) | nindent 4 }}
{{- end -}}

{{/* An admin pod's spec: (dict "root" $ "steps" <list of (dict "name" "args")>): all but the last step run in order as
init containers, the last as the container, so each step starts only once the one before succeeded. */}}
{{- define "es-provider.adminPod" -}}
{{- $root := .root -}}
{{- $engine := include "es-provider.jobEngine" $root | fromJson -}}
{{- $steps := .steps -}}
{{- $last := sub (len $steps) 1 | int -}}
serviceAccountName: {{ $root.Values.jobs.serviceAccountName | default (include "es-provider.serviceAccountName" $root) }}
automountServiceAccountToken: {{ $root.Values.serviceAccount.automountToken }}
restartPolicy: Never
{{- include "es-provider.podCommon" $root | trim | nindent 0 }}
{{- if gt (len $steps) 1 }}
initContainers:
  {{- range $i, $step := $steps }}
  {{- if lt $i $last }}
  {{- include "es-provider.adminContainer" (dict "root" $root "name" $step.name "args" $step.args) | nindent 2 }}
  {{- end }}
  {{- end }}
{{- end }}
containers:
  {{- $step := index $steps $last }}
  {{- include "es-provider.adminContainer" (dict "root" $root "name" $step.name "args" $step.args) | nindent 2 }}
volumes:
  {{- $configKey := "admin.toml" -}}
  {{- if $root.Values.config.existingConfigMap -}}
  {{- $configKey = $root.Values.config.existingConfigMapAdminKey | default $root.Values.config.existingConfigMapKey -}}
  {{- end }}
  {{- include "es-provider.volumes" (dict "root" $root "engine" $engine "secretEnv" $root.Values.jobs.secretEnv "configKey" $configKey "cache" false) | nindent 2 }}
{{- end -}}

{{/* The job's metadata.annotations (jobs.annotations: e.g. a GitOps tool's hook annotations). */}}
{{- define "es-provider.jobAnnotations" -}}
{{- with .Values.jobs.annotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
