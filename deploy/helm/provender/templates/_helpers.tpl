{{/*
Names and labels.
*/}}
{{- define "provender.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "provender.fullname" -}}
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

{{- define "provender.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "provender.selectorLabels" -}}
app.kubernetes.io/name: {{ include "provender.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "provender.labels" -}}
helm.sh/chart: {{ include "provender.chart" . }}
{{ include "provender.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "provender.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "provender.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "provender.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
The cache backend: "disk" (StatefulSet) or an object store (Deployment).
*/}}
{{- define "provender.backend" -}}
{{- $cache := default dict .Values.config.cache }}
{{- default "disk" $cache.backend }}
{{- end }}

{{/*
A duration as provender writes it ("5s", "500ms", "2m", "1h"), in whole seconds; empty when
it is written some other way (then the grace period is not checked).
*/}}
{{- define "provender.seconds" -}}
{{- $d := toString . }}
{{- if regexMatch "^[0-9]+(ms|s|m|h)$" $d }}
{{- $n := regexFind "^[0-9]+" $d | int }}
{{- $unit := regexFind "(ms|s|m|h)$" $d }}
{{- if eq $unit "ms" }}{{ div (add $n 999) 1000 }}
{{- else if eq $unit "s" }}{{ $n }}
{{- else if eq $unit "m" }}{{ mul $n 60 }}
{{- else }}{{ mul $n 3600 }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Checks values that would give a pod that cannot work; fails the render with the reason.
*/}}
{{- define "provender.validate" -}}
{{- $backend := include "provender.backend" . }}
{{- $config := default dict .Values.config }}
{{- $server := default dict $config.server }}
{{- $cache := default dict $config.cache }}
{{- $auth := default dict $config.auth }}
{{- if not (has $backend (list "disk" "s3" "gcs" "azure")) }}
{{- fail (printf "config.cache.backend %q is not one of disk, s3, gcs, azure" $backend) }}
{{- end }}
{{- if hasKey $server "listen" }}
{{- fail "config.server.listen is set by the chart (0.0.0.0:<containerPort>): set containerPort instead" }}
{{- end }}
{{- if hasKey $cache "dir" }}
{{- fail "config.cache.dir is set by the chart (/var/lib/provender, the cache volume): leave it out" }}
{{- end }}
{{- if and (eq $backend "disk") (gt (int .Values.replicaCount) 1) }}
{{- fail "replicaCount > 1 needs an object-store backend (config.cache.backend s3, gcs or azure): the disk cache belongs to one process" }}
{{- end }}
{{- if and (ne $backend "disk") (not (dig "object_store" "bucket" "" $cache)) }}
{{- fail (printf "config.cache.backend %q needs config.cache.object_store.bucket" $backend) }}
{{- end }}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.tls.secretName) }}
{{- fail "replicaCount > 1 needs tls.secretName: a generated certificate would differ from replica to replica" }}
{{- end }}
{{- $tokens := or $auth.tokens $auth.token_file .Values.auth.existingSecret }}
{{- $sharedKey := or $auth.url_signing_key $auth.url_signing_key_file .Values.auth.existingSecret }}
{{- if and $tokens (gt (int .Values.replicaCount) 1) (not $sharedKey) }}
{{- fail "with client tokens and replicaCount > 1, set a shared URL signing key (auth.existingSecret, or config.auth.url_signing_key_file): each replica would otherwise sign archive URLs with its own random key" }}
{{- end }}
{{- if $auth.protect_health }}
{{- fail "config.auth.protect_health = true would make the liveness and readiness probes fail (they send no token)" }}
{{- end }}
{{- $drain := include "provender.seconds" (default "0s" $server.drain_delay) }}
{{- $grace := include "provender.seconds" (default "30s" $server.shutdown_grace) }}
{{- if and $drain $grace }}
{{- if le (int .Values.terminationGracePeriodSeconds) (add (int $drain) (int $grace) | int) }}
{{- fail (printf "terminationGracePeriodSeconds (%d) must be longer than server.drain_delay + server.shutdown_grace (%ds)" (int .Values.terminationGracePeriodSeconds) (add (int $drain) (int $grace))) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The URL clients use: config.server.public_url, else the Service's cluster DNS name (which then
also names the generated certificate).
*/}}
{{- define "provender.publicUrl" -}}
{{- $server := default dict .Values.config.server }}
{{- if $server.public_url }}
{{- $server.public_url }}
{{- else }}
{{- $port := int .Values.service.port }}
{{- printf "https://%s.%s.svc%s/" (include "provender.fullname" .) .Release.Namespace (ternary "" (printf ":%d" $port) (eq $port 443)) }}
{{- end }}
{{- end }}

{{/*
provender's configuration: .Values.config with what the chart decides (listen address, cache
directory, mounted TLS and auth files) put over it.
*/}}
{{- define "provender.configDict" -}}
{{- $config := deepCopy (default dict .Values.config) }}
{{- if not (dig "server" "public_url" "" $config) }}
{{- $server := default dict $config.server }}
{{- $_ := set $server "public_url" (include "provender.publicUrl" .) }}
{{- $_ := set $config "server" $server }}
{{- end }}
{{- $forced := dict "server" (dict "listen" (printf "0.0.0.0:%d" (int .Values.containerPort))) "cache" (dict "dir" "/var/lib/provender") }}
{{- if .Values.tls.secretName }}
{{- $_ := set $forced.server "tls_cert" "/etc/provender/tls/tls.crt" }}
{{- $_ := set $forced.server "tls_key" "/etc/provender/tls/tls.key" }}
{{- end }}
{{- if .Values.auth.existingSecret }}
{{- $_ := set $forced "auth" (dict "token_file" (printf "/etc/provender/auth/%s" .Values.auth.tokensKey) "url_signing_key_file" (printf "/etc/provender/auth/%s" .Values.auth.urlSigningKeyKey)) }}
{{- end }}
{{- toYaml (mergeOverwrite $config $forced) }}
{{- end }}

{{/*
TOML rendering of a values tree: tables for maps, scalars and arrays of scalars. Helm reads
numbers in values files as floats; whole ones are written as TOML integers. Null values are
left out, so a null in the user's values removes a default.
*/}}
{{- define "provender.toml.key" -}}
{{- if regexMatch "^[A-Za-z0-9_-]+$" . }}{{ . }}{{ else }}{{ toJson . }}{{ end }}
{{- end }}

{{- define "provender.toml.value" -}}
{{- $v := . }}
{{- if kindIs "string" $v }}{{ toJson $v }}
{{- else if kindIs "bool" $v }}{{ $v }}
{{- else if or (kindIs "float64" $v) (kindIs "float32" $v) }}
{{- if eq (float64 (int64 $v)) (float64 $v) }}{{ int64 $v }}{{ else }}{{ $v }}{{ end }}
{{- else if or (kindIs "int" $v) (kindIs "int64" $v) (kindIs "int32" $v) (kindIs "uint64" $v) }}{{ $v }}
{{- else if kindIs "slice" $v }}[{{ range $i, $e := $v }}{{ if $i }}, {{ end }}{{ include "provender.toml.value" $e }}{{ end }}]
{{- else }}{{ fail (printf "config: cannot write %v (%s) as TOML" $v (kindOf $v)) }}
{{- end }}
{{- end }}

{{- define "provender.toml.table" -}}
{{- $path := .path }}
{{- $table := .table }}
{{- $scalars := list }}
{{- $tables := list }}
{{- range $k := keys $table | sortAlpha }}
{{- $v := get $table $k }}
{{- if kindIs "map" $v }}
{{- $tables = append $tables $k }}
{{- else if not (kindIs "invalid" $v) }}
{{- $scalars = append $scalars $k }}
{{- end }}
{{- end }}
{{- if and $scalars $path }}
[{{ join "." $path }}]
{{- end }}
{{- range $k := $scalars }}
{{ include "provender.toml.key" $k }} = {{ include "provender.toml.value" (get $table $k) }}
{{- end }}
{{- range $k := $tables }}
{{- include "provender.toml.table" (dict "path" (append $path (include "provender.toml.key" $k)) "table" (get $table $k)) }}
{{- end }}
{{- end }}

{{- define "provender.configToml" -}}
# Rendered by the provender Helm chart from .Values.config; see config.toml.example.
{{- include "provender.toml.table" (dict "path" (list) "table" (include "provender.configDict" . | fromYaml)) }}
{{- end }}

{{/*
The pod template shared by the StatefulSet (disk) and the Deployment (object store).
*/}}
{{- define "provender.podTemplate" -}}
{{- $backend := include "provender.backend" . -}}
metadata:
  labels:
    {{- include "provender.selectorLabels" . | nindent 4 }}
    {{- with .Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    checksum/config: {{ include "provender.configToml" . | sha256sum }}
    {{- with .Values.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ include "provender.serviceAccountName" . }}
  automountServiceAccountToken: {{ .Values.serviceAccount.automountServiceAccountToken }}
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  securityContext:
    {{- toYaml .Values.podSecurityContext | nindent 4 }}
  terminationGracePeriodSeconds: {{ int .Values.terminationGracePeriodSeconds }}
  containers:
    - name: provender
      image: {{ include "provender.image" . | quote }}
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      args: ["serve", "--config", "/etc/provender/config/config.toml"]
      env:
        - name: PROVENDER_LOG_FORMAT
          value: json
        - name: PROVENDER_LOG
          value: {{ .Values.logLevel | quote }}
        {{- with .Values.extraEnv }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- if or .Values.objectStore.credentialsSecret .Values.extraEnvFrom }}
      envFrom:
        {{- with .Values.objectStore.credentialsSecret }}
        - secretRef:
            name: {{ . }}
        {{- end }}
        {{- with .Values.extraEnvFrom }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- end }}
      ports:
        - name: https
          containerPort: {{ int .Values.containerPort }}
          protocol: TCP
      {{- with .Values.startupProbe }}
      startupProbe:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.livenessProbe }}
      livenessProbe:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.readinessProbe }}
      readinessProbe:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      resources:
        {{- toYaml .Values.resources | nindent 8 }}
      securityContext:
        {{- toYaml .Values.securityContext | nindent 8 }}
      volumeMounts:
        - name: config
          mountPath: /etc/provender/config
          readOnly: true
        - name: cache
          mountPath: /var/lib/provender
        {{- if .Values.tls.secretName }}
        - name: tls
          mountPath: /etc/provender/tls
          readOnly: true
        {{- end }}
        {{- if .Values.auth.existingSecret }}
        - name: auth
          mountPath: /etc/provender/auth
          readOnly: true
        {{- end }}
        {{- with .Values.extraVolumeMounts }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
  volumes:
    - name: config
      configMap:
        name: {{ include "provender.fullname" . }}
    {{- if ne $backend "disk" }}
    - name: cache
      emptyDir:
        {{- with .Values.staging.medium }}
        medium: {{ . }}
        {{- end }}
        {{- with .Values.staging.sizeLimit }}
        sizeLimit: {{ . }}
        {{- end }}
    {{- else if not .Values.persistence.enabled }}
    - name: cache
      emptyDir: {}
    {{- end }}
    {{- if .Values.tls.secretName }}
    - name: tls
      secret:
        secretName: {{ .Values.tls.secretName }}
        defaultMode: 288  # 0440: readable by the pod's fsGroup
    {{- end }}
    {{- if .Values.auth.existingSecret }}
    - name: auth
      secret:
        secretName: {{ .Values.auth.existingSecret }}
        defaultMode: 288  # 0440
    {{- end }}
    {{- with .Values.extraVolumes }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.topologySpreadConstraints }}
  topologySpreadConstraints:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
