{{/* The relay's name: the release name unless it already says outbox-relay. */}}
{{- define "outbox-relay.fullname" -}}
{{- if contains "outbox-relay" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-outbox-relay" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The Deployment's name: the app's in sidecar mode, the relay's in standalone mode. */}}
{{- define "outbox-relay.workload" -}}
{{- if eq .Values.mode "sidecar" -}}{{ .Values.app.name }}{{- else -}}{{ include "outbox-relay.fullname" . }}{{- end -}}
{{- end -}}

{{- define "outbox-relay.labels" -}}
app.kubernetes.io/name: {{ include "outbox-relay.workload" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "outbox-relay.selector" -}}
app.kubernetes.io/name: {{ include "outbox-relay.workload" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "outbox-relay.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* The metrics/health port: the port of config.http.addr (":9464" by default). */}}
{{- define "outbox-relay.port" -}}
{{- $addr := ":9464" -}}
{{- with .Values.config.http }}{{ with .addr }}{{ $addr = . }}{{ end }}{{ end -}}
{{- last (splitList ":" (toString $addr)) -}}
{{- end -}}

{{/* The environment variable of a configuration key: relay.batch_size -> OUTBOX_RELAY_BATCH_SIZE. */}}
{{- define "outbox-relay.envName" -}}
OUTBOX_{{ . | upper | replace "." "_" }}
{{- end -}}

{{/*
The relay container. In sidecar mode with nativeSidecar it is an init container with
restartPolicy Always, and without a startup probe: the app container would wait for it, and
the app must not depend on the relay. Probes: liveness on /healthz; readiness on /readyz
where enabled (docs/kubernetes.md says why a sidecar has none by default).
*/}}
{{- define "outbox-relay.container" -}}
- name: outbox-relay
  image: {{ include "outbox-relay.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  {{- if and (eq .Values.mode "sidecar") .Values.nativeSidecar }}
  restartPolicy: Always
  {{- end }}
  args: ["run"]
  env:
    - name: OUTBOX_CONFIG
      value: /etc/outbox-relay/config.yaml
    {{- range .Values.secretEnv }}
    - name: {{ include "outbox-relay.envName" .key }}
      valueFrom:
        secretKeyRef:
          name: {{ $.Values.secretName }}
          key: {{ .secretKey }}
          {{- if .optional }}
          optional: true
          {{- end }}
    {{- end }}
    {{- range $db, $key := .Values.databaseSecrets }}
    - name: OUTBOX_DATABASES_{{ $db | upper | replace "-" "_" }}_DSN
      valueFrom:
        secretKeyRef:
          name: {{ $.Values.secretName }}
          key: {{ $key }}
    {{- end }}
  ports:
    - name: relay-http
      containerPort: {{ include "outbox-relay.port" . }}
      protocol: TCP
  {{- if not (and (eq .Values.mode "sidecar") .Values.nativeSidecar) }}
  startupProbe:
    httpGet:
      path: /healthz
      port: relay-http
    periodSeconds: 2
    failureThreshold: 30
  {{- end }}
  livenessProbe:
    httpGet:
      path: /healthz
      port: relay-http
    periodSeconds: 10
    timeoutSeconds: 3
    failureThreshold: 3
  {{- if or (and (eq .Values.mode "sidecar") .Values.readinessProbe.sidecar) (and (eq .Values.mode "standalone") .Values.readinessProbe.standalone) }}
  readinessProbe:
    httpGet:
      path: /readyz
      port: relay-http
    periodSeconds: 5
    timeoutSeconds: 3
    failureThreshold: 2
  {{- end }}
  resources:
    {{- toYaml .Values.resources | nindent 4 }}
  securityContext:
    runAsNonRoot: true
    runAsUser: 65532
    runAsGroup: 65532
    allowPrivilegeEscalation: false
    readOnlyRootFilesystem: true
    capabilities:
      drop: ["ALL"]
  volumeMounts:
    - name: outbox-relay-config
      mountPath: /etc/outbox-relay
      readOnly: true
{{- end -}}
