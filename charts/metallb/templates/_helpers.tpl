{{/* Names and labels as MetalLB's chart. */}}
{{- define "metallb.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* <release>-<name>, or the release name when it already contains the name. */}}
{{- define "metallb.fullname" -}}
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

{{- define "metallb.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "metallb.labels" -}}
helm.sh/chart: {{ include "metallb.chart" . }}
{{ include "metallb.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "metallb.selectorLabels" -}}
app.kubernetes.io/name: {{ include "metallb.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "metallb.controller.serviceAccountName" -}}
{{- if .Values.controller.serviceAccount.create }}
{{- default (printf "%s-controller" (include "metallb.fullname" .)) .Values.controller.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.controller.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "metallb.speaker.serviceAccountName" -}}
{{- if .Values.speaker.serviceAccount.create }}
{{- default (printf "%s-speaker" (include "metallb.fullname" .)) .Values.speaker.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.speaker.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The memberlist Secret (MetalLB's chart: <fullname>-memberlist, key `secretkey`). */}}
{{- define "metallb.secretName" -}}
{{- default (printf "%s-memberlist" (include "metallb.fullname" .)) .Values.speaker.secretName | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The image of a component: repository:tag, the tag defaulting to the appVersion. */}}
{{- define "metallb.image" -}}
{{- printf "%s:%s" .repository (toString (.tag | default .appVersion)) }}
{{- end }}

{{/*
Checks MetalLB's chart makes, with its messages. Values metallb-rs ignores (FRR, frr-k8s)
are not checked: they mean nothing here.
*/}}
{{- define "metallb.validate" -}}
{{- if .Values.configInline }}
{{- fail "Starting from v0.13.0 configInline is no longer supported. Please see https://metallb.universe.tf/#backward-compatibility" }}
{{- end }}
{{- if and (not .Values.speaker.memberlist.enabled) .Values.speaker.nodeSelector }}
{{- fail "nodeSelector must be empty when memberlist is disabled" }}
{{- end }}
{{- if and .Values.prometheus.serviceMonitor.enabled .Values.prometheus.podMonitor.enabled }}
{{- fail "prometheus.serviceMonitor.enabled and prometheus.podMonitor.enabled cannot both be set" }}
{{- end }}
{{- if not (has (toString .Values.crds.validationFailurePolicy) (list "Fail" "Ignore")) }}
{{- fail (printf "crds.validationFailurePolicy must be Fail or Ignore, got %q" (toString .Values.crds.validationFailurePolicy)) }}
{{- end }}
{{- with .Values.controller.webhookMode }}
{{- if not (has (toString .) (list "enabled" "disabled" "onlywebhook")) }}
{{- fail (printf "controller.webhookMode must be enabled, disabled or onlywebhook, got %q" (toString .)) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
A webhook's clientConfig: the Service metallb-webhook-service, or, with
controller.webhookURL (metallb-rs only), that base URL and the path (a controller outside
the cluster, e.g. the lab's, which has no kube-proxy to reach a Service).
*/}}
{{- define "metallb.webhookClientConfig" -}}
{{- $root := index . 0 }}
{{- $path := index . 1 }}
{{- with $root.Values.controller.webhookURL }}
url: {{ printf "%s%s" (trimSuffix "/" .) $path | quote }}
{{- else }}
service:
  name: metallb-webhook-service
  namespace: {{ $root.Release.Namespace | quote }}
  path: {{ $path }}
{{- end }}
{{- end }}
