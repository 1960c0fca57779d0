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
{{- printf "%s:%s" (required (include "tm-cache.imageRequired" .) .Values.image.repository) (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
Why image.repository has no default: there is no public image, and a default name would render,
install, and leave every pod in ImagePullBackOff.
*/}}
{{- define "tm-cache.imageRequired" -}}
image.repository is required: there is no public tm-cache image. Build it from the repository's Dockerfile and push it where the cluster pulls from (docker build -t registry.example.com/tm-cache:{{ .Chart.AppVersion }} . && docker push registry.example.com/tm-cache:{{ .Chart.AppVersion }}), then --set image.repository=registry.example.com/tm-cache; see the chart README, "The image"
{{- end }}

{{/*
resources.limits.memory in MiB (rounded down), or "" without a memory limit. Whole quantities
only (512Mi, 1Gi, 536870912): a fraction such as 0.5Gi is refused, naming the value.
*/}}
{{- define "tm-cache.memoryLimitMiB" -}}
{{- $quantity := toString (dig "limits" "memory" "" .Values.resources) }}
{{- if $quantity }}
{{- if not (regexMatch "^[0-9]+(Ki|Mi|Gi|Ti|k|M|G|T)?$" $quantity) }}
{{- fail (printf "resources.limits.memory: %q is not a whole memory quantity such as 512Mi or 1Gi" $quantity) }}
{{- end }}
{{- $unitBytes := dict "" 1 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 }}
{{- $number := int (regexReplaceAll "[^0-9]" $quantity "") }}
{{- div (mul $number (get $unitBytes (regexReplaceAll "^[0-9]+" $quantity ""))) 1048576 }}
{{- end }}
{{- end }}

{{/*
MiB of the memory tier (config.cache.memory.maxBytes, rounded up): its bodies are buffers outside
V8's heap, so the limit must hold them beside the heap.
*/}}
{{- define "tm-cache.memoryTierMiB" -}}
{{- div (add (int .Values.config.cache.memory.maxBytes) 1048575) 1048576 }}
{{- end }}

{{/*
The heap Node gets (--max-old-space-size, MiB): the memory limit less the memory tier and
sizing.overheadMiB; "" without a memory limit.
*/}}
{{- define "tm-cache.heapMiB" -}}
{{- with include "tm-cache.memoryLimitMiB" . }}
{{- sub (sub (int .) (int (include "tm-cache.memoryTierMiB" $))) (int $.Values.sizing.overheadMiB) }}
{{- end }}
{{- end }}

{{/*
The address of the management port: every interface behind the chart's Services (the kubelet
probes the pod's IP, Prometheus scrapes it); in a sidecar, sidecar.managementHost (loopback unless
the operator asks for more).
*/}}
{{- define "tm-cache.managementHost" -}}
{{- if eq .Values.mode "sidecar" }}{{ .Values.sidecar.managementHost }}{{ else }}0.0.0.0{{ end }}
{{- end }}

{{/*
How a probe asks the management port for a path: over HTTP when the port listens on the pod's
IP; from inside the container (`node -e fetch`, the image's only client) when it listens on
loopback, which the kubelet cannot reach. Called with (dict "root" $ "path" "/healthz").
*/}}
{{- define "tm-cache.probeAction" -}}
{{- if eq (include "tm-cache.managementHost" .root) "127.0.0.1" -}}
exec:
  command:
    - node
    - -e
    {{- if eq (include "tm-cache.managementScheme" .root) "https" }}
    {{- /* The certificate names the Service, not 127.0.0.1: the probe checks liveness, not identity. */}}
    - {{ printf "require('https').get({ host: '127.0.0.1', port: %s, path: '%s', rejectUnauthorized: false }, (r) => process.exit(r.statusCode === 200 ? 0 : 1)).on('error', () => process.exit(1))" (toString .root.Values.containerPorts.management) .path | quote }}
    {{- else }}
    - {{ printf "fetch('http://127.0.0.1:%s%s').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))" (toString .root.Values.containerPorts.management) .path | quote }}
    {{- end }}
{{- else -}}
httpGet:
  path: {{ .path }}
  port: tmc-management
{{- if eq (include "tm-cache.managementScheme" .root) "https" }}
  scheme: HTTPS
{{- end }}
{{- end }}
{{- end }}

{{/*
Checks of the values that values.schema.json cannot express (relations between values); rendering
fails with the reason. Included by the ConfigMap, which every mode renders.
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
{{- $_ := required (include "tm-cache.imageRequired" .) .Values.image.repository }}
{{- include "tm-cache.validateManagement" . }}
{{- include "tm-cache.validateSizing" . }}
{{- end }}

{{/*
The management port stays private: values that would expose it by surprise, or be silently
ignored in this mode, are refused.
*/}}
{{- define "tm-cache.validateManagement" -}}
{{- $sidecar := eq .Values.mode "sidecar" }}
{{- if not (or (eq .Values.sidecar.managementHost "127.0.0.1") (eq .Values.sidecar.managementHost "0.0.0.0")) }}
{{- fail (printf "sidecar.managementHost: %q is not one of 127.0.0.1, 0.0.0.0" .Values.sidecar.managementHost) }}
{{- end }}
{{- if and $sidecar .Values.networkPolicy.enabled }}
{{- fail "networkPolicy.enabled is for mode standalone: in mode sidecar the pods are yours, and a policy selecting them must allow your application's ports too; allow the management port only from monitoring in your own policy" }}
{{- end }}
{{- if and $sidecar .Values.metrics.serviceMonitor.enabled }}
{{- fail "metrics.serviceMonitor is for mode standalone: sidecars are scraped with metrics.podMonitor" }}
{{- end }}
{{- if and (not $sidecar) .Values.metrics.podMonitor.enabled }}
{{- fail "metrics.podMonitor is for mode sidecar: the standalone Deployment is scraped with metrics.serviceMonitor" }}
{{- end }}
{{- if and .Values.metrics.serviceMonitor.enabled (not .Values.managementService.enabled) }}
{{- fail "metrics.serviceMonitor scrapes through the management Service: set managementService.enabled, or turn the ServiceMonitor off" }}
{{- end }}
{{- if and $sidecar .Values.metrics.podMonitor.enabled }}
{{- if eq .Values.sidecar.managementHost "127.0.0.1" }}
{{- fail "metrics.podMonitor cannot scrape a management port on 127.0.0.1: set sidecar.managementHost=0.0.0.0 (and allow the port only from monitoring in your pods' NetworkPolicy)" }}
{{- end }}
{{- if not .Values.metrics.podMonitor.podSelector }}
{{- fail "metrics.podMonitor.podSelector is required: the labels of the pods that run the tm-cache sidecar, e.g. { app: test-runner }" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The memory limit holds the memory tier, Node's overhead and a heap of at least sizing.minHeapMiB.
*/}}
{{- define "tm-cache.validateSizing" -}}
{{- with include "tm-cache.memoryLimitMiB" . }}
{{- $limit := int . }}
{{- $tier := int (include "tm-cache.memoryTierMiB" $) }}
{{- $needed := add $tier (int $.Values.sizing.overheadMiB) (int $.Values.sizing.minHeapMiB) }}
{{- if lt $limit $needed }}
{{- fail (printf "resources.limits.memory (%d MiB) cannot hold config.cache.memory.maxBytes (%d MiB) + sizing.overheadMiB (%d) + sizing.minHeapMiB (%d): raise the limit to at least %dMi or lower maxBytes" $limit $tier (int $.Values.sizing.overheadMiB) (int $.Values.sizing.minHeapMiB) $needed) }}
{{- end }}
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
    # The management port: every interface behind a Service (probes and scrapes come to the pod's
    # IP, the NetworkPolicy decides who else); loopback in a sidecar unless sidecar.managementHost.
    - name: TM_CACHE_MANAGEMENT_HOST
      value: {{ include "tm-cache.managementHost" . | quote }}
    - name: TM_CACHE_MANAGEMENT_PORT
      value: {{ .Values.containerPorts.management | quote }}
    - name: TM_CACHE_LOG_LEVEL
      value: {{ .Values.logLevel | quote }}
    {{- if .Values.sizing.heapFromLimit }}
    {{- with include "tm-cache.heapMiB" . }}
    # The heap, from the memory limit (sizing): Node collects garbage before the kernel kills it.
    - name: NODE_OPTIONS
      value: {{ printf "--max-old-space-size=%s" . | quote }}
    {{- end }}
    {{- end }}
    {{- if .Values.tls.secretName }}
    # TLS from the mounted kubernetes.io/tls Secret; tm-cache watches the files for renewals.
    - name: TM_CACHE_TLS_CERT_FILE
      value: /etc/tm-cache-tls/tls.crt
    - name: TM_CACHE_TLS_KEY_FILE
      value: /etc/tm-cache-tls/tls.key
    - name: TM_CACHE_TLS_MANAGEMENT
      value: {{ .Values.tls.management | quote }}
    {{- if .Values.tls.clientCaSecretName }}
    - name: TM_CACHE_TLS_CLIENT_CA_FILE
      value: /etc/tm-cache-client-ca/ca.crt
    {{- end }}
    {{- end }}
    {{- with .Values.redis.encryptionKeyId }}
    - name: TM_CACHE_REDIS_ENCRYPTION_KEY_ID
      value: {{ . | quote }}
    {{- end }}
    # Secrets; each key is optional, so an existing Secret need only hold the ones it uses.
    {{- range $key, $env := dict "redis-url" "TM_CACHE_REDIS" "hmac-secret" "TM_CACHE_HMAC_SECRET" "redis-encryption-keys" "TM_CACHE_REDIS_ENCRYPTION_KEYS" "admin-token" "TM_CACHE_ADMIN_TOKEN" "admin-viewer-token" "TM_CACHE_ADMIN_VIEWER_TOKEN" "redis-password" "TM_CACHE_REDIS_PASSWORD" "redis-sentinel-password" "TM_CACHE_REDIS_SENTINEL_PASSWORD" }}
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
    {{- include "tm-cache.probeAction" (dict "root" . "path" "/healthz") | nindent 4 }}
    {{- toYaml .Values.probes.startup | nindent 4 }}
  livenessProbe:
    {{- include "tm-cache.probeAction" (dict "root" . "path" "/healthz") | nindent 4 }}
    {{- toYaml .Values.probes.liveness | nindent 4 }}
  readinessProbe:
    {{- include "tm-cache.probeAction" (dict "root" . "path" "/readyz") | nindent 4 }}
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
    {{- if .Values.tls.secretName }}
    - name: tm-cache-tls
      mountPath: /etc/tm-cache-tls
      readOnly: true
    {{- if .Values.tls.clientCaSecretName }}
    - name: tm-cache-client-ca
      mountPath: /etc/tm-cache-client-ca
      readOnly: true
    {{- end }}
    {{- end }}
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
{{- if .Values.tls.secretName }}
- name: tm-cache-tls
  secret:
    secretName: {{ .Values.tls.secretName }}
{{- if .Values.tls.clientCaSecretName }}
- name: tm-cache-client-ca
  secret:
    secretName: {{ .Values.tls.clientCaSecretName }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The management port's scheme: https when TLS is on and the management port uses it.
*/}}
{{- define "tm-cache.managementScheme" -}}
{{- if and .Values.tls.secretName .Values.tls.management }}https{{ else }}http{{ end }}
{{- end }}

{{/*
PromQL label matchers selecting this release's series: metrics.prometheusRule.selector, or the
job the chart's monitor gives them: the management Service's name for the ServiceMonitor (in the
release's namespace), <namespace>/<name> for the PodMonitor (whose pods may be anywhere).
*/}}
{{- define "tm-cache.promSelector" -}}
{{- if eq .Values.mode "sidecar" }}
{{- default (printf "job=%q" (printf "%s/%s" .Release.Namespace (include "tm-cache.fullname" .))) .Values.metrics.prometheusRule.selector }}
{{- else }}
{{- default (printf "namespace=%q,job=%q" .Release.Namespace (include "tm-cache.managementServiceName" .)) .Values.metrics.prometheusRule.selector }}
{{- end }}
{{- end }}

{{/*
Name of the management Service (/metrics, /readyz, the admin API and the status page).
*/}}
{{- define "tm-cache.managementServiceName" -}}
{{- printf "%s-management" (include "tm-cache.fullname" . | trunc 52 | trimSuffix "-") }}
{{- end }}
