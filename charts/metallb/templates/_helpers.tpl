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

{{/*
MetalLB's keys this chart accepts (so that a MetalLB values file renders) but that have no
effect here, as set by the user: one line each, naming the key and what happens instead.
NOTES.txt prints them after an install or upgrade, and templates/warnings.yaml renders
them as comments in the manifests (for `helm template`, Argo CD, Flux: no NOTES there).
*/}}
{{- define "metallb.ignoredKeys" -}}
{{- $p := .Values.prometheus }}
{{- if $p.rbacProxy }}
- prometheus.rbacProxy: no kube-rbac-proxy sidecar; the controller and the speakers serve their metrics over HTTPS themselves, on prometheus.metricsPort ({{ $p.metricsPort }}), authorised by the API server.
{{- end }}
{{- if $p.secureMetricsPort }}
- prometheus.secureMetricsPort: ignored; the metrics are served over HTTPS on prometheus.metricsPort ({{ $p.metricsPort }}), not over plain HTTP as MetalLB's are.
{{- end }}
{{- with .Values.tls }}
{{- if .cipherSuites }}
- tls.cipherSuites: ignored; the metrics TLS uses its library's cipher suites.
{{- end }}
{{- if .curvePreferences }}
- tls.curvePreferences: ignored; the metrics TLS uses its library's curves.
{{- end }}
{{- end }}
{{- with .Values.speaker }}
{{- if and .excludeInterfaces (not .excludeInterfaces.enabled) }}
- speaker.excludeInterfaces.enabled=false: ignored; no metallb-excludel2 ConfigMap is read either way, and the speaker chooses the layer-2 interfaces itself.
{{- end }}
{{- if and .frr .frr.enabled }}
- speaker.frr.*: no FRR container is run; BGP and BFD are native to the speaker, and FRR's image, ports and resources are unused.
{{- end }}
{{- if not (kindIs "invalid" .bgpDebounceTimeout) }}
- speaker.bgpDebounceTimeout: ignored; there is no FRR configuration to debounce.
{{- end }}
{{- end }}
{{- with .Values.frrk8s }}
{{- if or .enabled .external }}
- frrk8s.*: no frr-k8s backend or subchart; the speaker announces over its native BGP.
{{- end }}
{{- end }}
{{- end }}

{{/*
Refuses MetalLB's own images (a repository under quay.io/metallb/ or <registry>/metallb/,
or a vX.Y.Z tag, which metallb-rs's images never carry): its Go binaries would run under
this chart's arguments and RBAC. allowUpstreamImages: true opts out.
*/}}
{{- define "metallb.refuseUpstreamImage" -}}
{{- $root := index . 0 }}
{{- $component := index . 1 }}
{{- $image := index $root.Values $component "image" }}
{{- if not $root.Values.allowUpstreamImages }}
{{- $repo := toString $image.repository }}
{{- $tag := toString ($image.tag | default "") }}
{{- $upstreamRepo := or (contains "quay.io/metallb/" $repo) (eq $repo (printf "metallb/%s" $component)) (hasSuffix (printf "/metallb/%s" $component) $repo) }}
{{- if $upstreamRepo }}
{{- fail (printf "%s.image.repository %q is MetalLB's image, not metallb-rs's: its Go binaries would run under this chart. Use metallb-rs's image (default %q), or set allowUpstreamImages=true to render it anyway." $component $repo (printf "metallb-rs/%s" $component)) }}
{{- end }}
{{- if regexMatch "^v[0-9]+\\.[0-9]+\\.[0-9]+" $tag }}
{{- fail (printf "%s.image.tag %q is a MetalLB release tag (metallb-rs's images are tagged without a leading v, e.g. %q): leave the tag empty for the chart's appVersion, or set allowUpstreamImages=true to render it anyway." $component $tag $root.Chart.AppVersion) }}
{{- end }}
{{- end }}
{{- end }}
