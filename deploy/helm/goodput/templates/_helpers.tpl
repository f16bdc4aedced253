{{/* Names: <release>-goodput (or the release name when it already says goodput), then -<component>. */}}
{{- define "goodput.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "goodput.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* A component's object name: (dict "root" $ "component" "worker"). */}}
{{- define "goodput.componentName" -}}
{{- printf "%s-%s" (include "goodput.fullname" .root) .component | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "goodput.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "goodput.selectorLabels" -}}
app.kubernetes.io/name: {{ include "goodput.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "goodput.labels" -}}
helm.sh/chart: {{ include "goodput.chart" . }}
{{ include "goodput.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: goodput
{{- end }}

{{/* (dict "root" $ "component" "worker") */}}
{{- define "goodput.componentSelectorLabels" -}}
{{ include "goodput.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "goodput.componentLabels" -}}
{{ include "goodput.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "goodput.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "goodput.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "goodput.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The Secret each credential comes from: the named existing one, or the chart's (templates/secrets.yaml). */}}
{{- define "goodput.jwtSecretName" -}}
{{- default (printf "%s-slurm-jwt" (include "goodput.fullname" .)) .Values.inCluster.jwtSecret.existingSecret }}
{{- end }}
{{- define "goodput.sshSecretName" -}}
{{- default (printf "%s-ssh" (include "goodput.fullname" .)) .Values.ssh.secret.existingSecret }}
{{- end }}
{{- define "goodput.resubmitKeySecretName" -}}
{{- default (printf "%s-resubmit-key" (include "goodput.fullname" .)) .Values.resubmitKey.existingSecret }}
{{- end }}
{{- define "goodput.consoleSecretName" -}}
{{- default (printf "%s-console" (include "goodput.fullname" .)) .Values.console.secret.existingSecret }}
{{- end }}
{{- define "goodput.livenessSecretName" -}}
{{- default (printf "%s-liveness" (include "goodput.fullname" .)) .Values.liveness.secret.existingSecret }}
{{- end }}
{{- define "goodput.pushSecretName" -}}
{{- default (printf "%s-push" (include "goodput.fullname" .)) .Values.detectors.pushToken.existingSecret }}
{{- end }}

{{/* Non-empty when the pods reach a login node over SSH: SSH mode, or in-cluster with actionsOverSsh. */}}
{{- define "goodput.usesSsh" -}}
{{- if or (eq .Values.mode "ssh") .Values.inCluster.actionsOverSsh }}true{{ end }}
{{- end }}

{{/* Where the pods find their files. */}}
{{- define "goodput.paths" -}}
config: /etc/goodput/goodput.toml
dataDir: /var/lib/goodput
jwt: /var/run/secrets/goodput/slurm-jwt/token
ca: /var/run/secrets/goodput/slurm-ca/ca.crt
sshKey: /var/run/secrets/goodput/ssh/id_key
knownHosts: /var/run/secrets/goodput/ssh/known_hosts
temporalTls: /var/run/secrets/goodput/temporal-tls
{{- end }}

{{/*
goodput.toml: the site's `config` with the keys the chart owns laid over it (schema forbids setting
those in `config`). Never a secret: those reach the pods as files or environment from Secrets.
*/}}
{{- define "goodput.config" -}}
{{- $paths := include "goodput.paths" . | fromYaml }}
{{- $slurm := dict }}
{{- if include "goodput.usesSsh" . }}
{{- $slurm = dict "ssh_host" .Values.ssh.host "ssh_port" (int .Values.ssh.port) "ssh_user" .Values.ssh.user "ssh_known_hosts" $paths.knownHosts "ssh_client_keys" (list $paths.sshKey) }}
{{- with .Values.ssh.slurmConf }}{{ $_ := set $slurm "ssh_slurm_conf" . }}{{ end }}
{{- end }}
{{- if eq .Values.mode "in-cluster" }}
{{- $slurm = merge $slurm (dict "rest_url" .Values.inCluster.restUrl "rest_user" .Values.inCluster.user "rest_token_file" $paths.jwt "rest_allow_http" .Values.inCluster.allowHttp) }}
{{- if .Values.inCluster.caConfigMap.name }}
{{- $_ := set $slurm "rest_ca_file" $paths.ca }}
{{- end }}
{{- end }}
{{- $managed := dict
      "cluster" .Values.cluster
      "temporal_address" .Values.temporal.address
      "namespace" .Values.temporal.namespace
      "task_queue" .Values.temporal.taskQueue
      "data_dir" $paths.dataDir
      "scheduler" (ternary "slurm-rest" "slurm-ssh" (eq .Values.mode "in-cluster"))
      "slurm" $slurm }}
{{- $tls := .Values.temporal.tls }}
{{- if or $tls.enabled .Values.temporal.apiKey.existingSecret }}
{{- $tlsConfig := dict "enabled" true }}
{{- with $tls.caKey }}{{ $_ := set $tlsConfig "ca_file" (printf "%s/%s" $paths.temporalTls .) }}{{ end }}
{{- if $tls.certKey }}
{{- $_ := set $tlsConfig "cert_file" (printf "%s/%s" $paths.temporalTls $tls.certKey) }}
{{- $_ := set $tlsConfig "key_file" (printf "%s/%s" $paths.temporalTls $tls.keyKey) }}
{{- end }}
{{- with $tls.serverName }}{{ $_ := set $tlsConfig "server_name" . }}{{ end }}
{{- $_ := set $managed "temporal_tls" $tlsConfig }}
{{- end }}
{{- toToml (mergeOverwrite (deepCopy (default (dict) .Values.config)) $managed) }}
{{- end }}

{{- define "goodput.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .Values.runAsUser }}
runAsGroup: {{ .Values.runAsGroup }}
fsGroup: {{ .Values.runAsGroup }}
fsGroupChangePolicy: OnRootMismatch
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "goodput.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .Values.runAsUser }}
runAsGroup: {{ .Values.runAsGroup }}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* Pod-level settings every component shares: (dict "root" $ "component" "worker" "values" .Values.worker) */}}
{{/* "true" when NVSentinel's gRPC receiver checks tokens with TokenReview: goodput's one Kubernetes API call. */}}
{{- define "goodput.tokenReview" -}}
{{- $nvsentinel := (default (dict) .Values.config).nvsentinel | default (dict) }}
{{- if and $nvsentinel.enabled ($nvsentinel.token_review | default (dict)).enabled }}true{{ end }}
{{- end }}

{{- define "goodput.podCommon" -}}
serviceAccountName: {{ include "goodput.serviceAccountName" .root }}
{{- /* The receivers run beside the workers; only they need the token, and only for TokenReview. */}}
automountServiceAccountToken: {{ if and (include "goodput.tokenReview" .root) (ne .component "console") }}true{{ else }}false{{ end }}
{{- /* A Service named goodput-* would otherwise inject GOODPUT_*-looking variables. */}}
enableServiceLinks: false
securityContext:
  {{- include "goodput.podSecurityContext" .root | nindent 2 }}
terminationGracePeriodSeconds: {{ .values.terminationGracePeriodSeconds }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Pod annotations: roll the pods when the configuration or a chart-made Secret changes. */}}
{{- define "goodput.podAnnotations" -}}
checksum/config: {{ include "goodput.config" .root | sha256sum }}
checksum/secrets: {{ include (print .root.Template.BasePath "/secrets.yaml") .root | sha256sum }}
{{- with .values.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Volumes every pod has: configuration, Slurm credentials of the mode, data_dir, /tmp. */}}
{{- define "goodput.volumes" -}}
- name: config
  configMap:
    name: {{ include "goodput.fullname" . }}
    items:
      - key: goodput.toml
        path: goodput.toml
{{- if eq .Values.mode "in-cluster" }}
- name: slurm-jwt
  secret:
    secretName: {{ include "goodput.jwtSecretName" . }}
    defaultMode: 0440
    items:
      - key: {{ .Values.inCluster.jwtSecret.key }}
        path: token
{{- with .Values.inCluster.caConfigMap.name }}
- name: slurm-ca
  configMap:
    name: {{ . }}
    items:
      - key: {{ $.Values.inCluster.caConfigMap.key }}
        path: ca.crt
{{- end }}
{{- end }}
{{- if include "goodput.usesSsh" . }}
- name: ssh
  secret:
    secretName: {{ include "goodput.sshSecretName" . }}
    defaultMode: 0440
    items:
      - key: {{ .Values.ssh.secret.privateKeyKey }}
        path: id_key
      - key: {{ .Values.ssh.secret.knownHostsKey }}
        path: known_hosts
{{- end }}
{{- with .Values.temporal.tls.existingSecret }}
- name: temporal-tls
  secret:
    secretName: {{ . }}
    defaultMode: 0440
{{- end }}
- name: data
{{- if .Values.persistence.enabled }}
  persistentVolumeClaim:
    claimName: {{ .Values.persistence.existingClaim }}
{{- else }}
  emptyDir:
    sizeLimit: {{ .Values.persistence.sizeLimit }}
{{- end }}
- name: tmp
  emptyDir:
    medium: Memory
    sizeLimit: 64Mi
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "goodput.volumeMounts" -}}
- name: config
  mountPath: /etc/goodput
  readOnly: true
{{- if eq .Values.mode "in-cluster" }}
- name: slurm-jwt
  mountPath: /var/run/secrets/goodput/slurm-jwt
  readOnly: true
{{- if .Values.inCluster.caConfigMap.name }}
- name: slurm-ca
  mountPath: /var/run/secrets/goodput/slurm-ca
  readOnly: true
{{- end }}
{{- end }}
{{- if include "goodput.usesSsh" . }}
- name: ssh
  mountPath: /var/run/secrets/goodput/ssh
  readOnly: true
{{- end }}
{{- if .Values.temporal.tls.existingSecret }}
- name: temporal-tls
  mountPath: /var/run/secrets/goodput/temporal-tls
  readOnly: true
{{- end }}
- name: data
  mountPath: /var/lib/goodput
{{- if .Values.persistence.enabled }}
  subPathExpr: $(POD_NAME)
{{- end }}
- name: tmp
  mountPath: /tmp
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Environment every container has; the component's own comes after it. */}}
{{- define "goodput.env" -}}
- name: GOODPUT_CONFIG
  value: /etc/goodput/goodput.toml
- name: GOODPUT_LOG_FORMAT
  value: {{ .Values.logFormat | quote }}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: HOME
  value: /tmp
{{- with .Values.temporal.apiKey.existingSecret }}
- name: GOODPUT_TEMPORAL_API_KEY
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $.Values.temporal.apiKey.key }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The deployment key, for the processes that may resubmit (workers and detectors, not the console). */}}
{{- define "goodput.resubmitKeyEnv" -}}
- name: GOODPUT_RESUBMIT_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "goodput.resubmitKeySecretName" . }}
      key: {{ .Values.resubmitKey.key }}
{{- end }}
