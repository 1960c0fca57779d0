{{/*
Chart name, truncated to the 63 characters Kubernetes allows in a name.
*/}}
{{- define "tm-cache.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified name of the release's resources: <release>-tm-cache, or the release name when it
already contains the chart name.
*/}}
{{- define "tm-cache.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Chart name and version, for the helm.sh/chart label.
*/}}
{{- define "tm-cache.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels of every resource.
*/}}
{{- define "tm-cache.labels" -}}
helm.sh/chart: {{ include "tm-cache.chart" . }}
{{ include "tm-cache.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Labels that select the pods; never change them on upgrade (selectors are immutable).
*/}}
{{- define "tm-cache.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tm-cache.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Name of the ServiceAccount the pods run as.
*/}}
{{- define "tm-cache.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tm-cache.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Name of the Secret holding hmac-secret, redis-url, redis-encryption-keys, admin-token, redis-password and
redis-sentinel-password.
*/}}
{{- define "tm-cache.secretName" -}}
{{- default (include "tm-cache.fullname" .) .Values.secret.existingSecret }}
{{- end }}

{{/*
Image reference; the tag defaults to the chart's appVersion.
*/}}
{{- define "tm-cache.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
Checks of the values that helm's schema-less values cannot express; rendering fails with the
reason. Included by the ConfigMap, which every mode renders.
*/}}
{{- define "tm-cache.validate" -}}
{{- if not (or (eq .Values.mode "standalone") (eq .Values.mode "sidecar")) }}
{{- fail (printf "mode: %q is not one of standalone, sidecar" .Values.mode) }}
{{- end }}
{{- $drainSeconds := add (int .Values.preStopSleepSeconds) (div (add (int .Values.config.server.shutdownGraceMs) 999) 1000) }}
{{- if le (int .Values.terminationGracePeriodSeconds) $drainSeconds }}
{{- fail (printf "terminationGracePeriodSeconds (%d) must exceed preStopSleepSeconds + config.server.shutdownGraceMs (%d s): the kubelet would kill tm-cache while it drains" (int .Values.terminationGracePeriodSeconds) $drainSeconds) }}
{{- end }}
{{- /* A shared Redis needs a secret Redis does not hold; tm-cache would exit 2 at start without one. */}}
{{- $usesRedis := or .Values.redis.url (not (eq .Values.config.cache.redis.mode "standalone")) }}
{{- if and $usesRedis (not (or .Values.secret.hmacSecret .Values.secret.redisEncryptionKeys .Values.secret.existingSecret)) }}
{{- fail "a shared Redis (redis.url, or config.cache.redis.mode cluster or sentinel) needs secret.hmacSecret (e.g. --set secret.hmacSecret=$(openssl rand -base64 32)), or secret.redisEncryptionKeys, or secret.existingSecret holding hmac-secret or redis-encryption-keys: the same on every pod, never kept in Redis" }}
{{- end }}
{{- end }}

{{/*
The tm-cache container: the Deployment's (mode standalone) and the one NOTES prints to paste into
a pod (mode sidecar, where the proxy listens on loopback only). One definition, so the two agree.
*/}}
{{- define "tm-cache.container" -}}
- name: tm-cache
  image: {{ include "tm-cache.image" . | quote }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args: ["serve", "--config", "/etc/tm-cache/config.yaml"]
  env:
    - name: TM_CACHE_UPSTREAM
      value: {{ required "upstream.url is required: the base URL of the instance, e.g. https://tm.example.com" .Values.upstream.url | quote }}
    # The proxy: every interface behind a Service; loopback in a sidecar, where only its pod asks it.
    - name: TM_CACHE_HOST
      value: {{ if eq .Values.mode "sidecar" }}"127.0.0.1"{{ else }}"0.0.0.0"{{ end }}
    - name: TM_CACHE_PORT
      value: {{ .Values.containerPorts.proxy | quote }}
    # The management port: every interface, since the kubelet's probes come to the pod's IP.
    - name: TM_CACHE_MANAGEMENT_HOST
      value: "0.0.0.0"
    - name: TM_CACHE_MANAGEMENT_PORT
      value: {{ .Values.containerPorts.management | quote }}
    - name: TM_CACHE_LOG_LEVEL
      value: {{ .Values.logLevel | quote }}
    {{- with .Values.redis.encryptionKeyId }}
    - name: TM_CACHE_REDIS_ENCRYPTION_KEY_ID
      value: {{ . | quote }}
    {{- end }}
    # Secrets; each key is optional, so an existing Secret need only hold the ones it uses.
    {{- range $key, $env := dict "redis-url" "TM_CACHE_REDIS" "hmac-secret" "TM_CACHE_HMAC_SECRET" "redis-encryption-keys" "TM_CACHE_REDIS_ENCRYPTION_KEYS" "admin-token" "TM_CACHE_ADMIN_TOKEN" "redis-password" "TM_CACHE_REDIS_PASSWORD" "redis-sentinel-password" "TM_CACHE_REDIS_SENTINEL_PASSWORD" }}
    - name: {{ $env }}
      valueFrom:
        secretKeyRef:
          name: {{ include "tm-cache.secretName" $ }}
          key: {{ $key }}
          optional: true
    {{- end }}
    {{- with .Values.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  ports:
    - name: tmc-proxy
      containerPort: {{ .Values.containerPorts.proxy }}
      protocol: TCP
    - name: tmc-management
      containerPort: {{ .Values.containerPorts.management }}
      protocol: TCP
  startupProbe:
    httpGet:
      path: /healthz
      port: tmc-management
    {{- toYaml .Values.probes.startup | nindent 4 }}
  livenessProbe:
    httpGet:
      path: /healthz
      port: tmc-management
    {{- toYaml .Values.probes.liveness | nindent 4 }}
  readinessProbe:
    httpGet:
      path: /readyz
      port: tmc-management
    {{- toYaml .Values.probes.readiness | nindent 4 }}
  {{- if .Values.preStopSleepSeconds }}
  # Keep serving while endpoints and load balancers forget the pod; SIGTERM comes after this.
  lifecycle:
    preStop:
      exec:
        command: ["sleep", {{ .Values.preStopSleepSeconds | quote }}]
  {{- end }}
  resources:
    {{- toYaml .Values.resources | nindent 4 }}
  securityContext:
    {{- toYaml .Values.securityContext | nindent 4 }}
  volumeMounts:
    - name: tm-cache-config
      mountPath: /etc/tm-cache
      readOnly: true
    - name: tm-cache-tmp
      mountPath: /tmp
    {{- with .Values.extraVolumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end }}

{{/*
The volumes the tm-cache container mounts.
*/}}
{{- define "tm-cache.volumes" -}}
- name: tm-cache-config
  configMap:
    name: {{ include "tm-cache.fullname" . }}
- name: tm-cache-tmp
  emptyDir: {}
{{- end }}

{{/*
PromQL label matchers selecting this release's series: metrics.prometheusRule.selector, or the
namespace and the job that the chart's ServiceMonitor scrapes (the Service's name).
*/}}
{{- define "tm-cache.promSelector" -}}
{{- default (printf "namespace=%q,job=%q" .Release.Namespace (include "tm-cache.fullname" .)) .Values.metrics.prometheusRule.selector }}
{{- end }}
