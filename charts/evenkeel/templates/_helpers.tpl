{{/*
Chart name, truncated to 63 characters (a DNS label).
*/}}
{{- define "evenkeel.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified name of the release's objects: the release name when it already contains the
chart name, else "<release>-<chart>".
*/}}
{{- define "evenkeel.fullname" -}}
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

{{- define "evenkeel.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Standard labels on every object of the chart.
*/}}
{{- define "evenkeel.labels" -}}
helm.sh/chart: {{ include "evenkeel.chart" . }}
{{ include "evenkeel.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: evenkeel
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Selector labels of the operator's pods. The component (operator) keeps them apart from the
brokers, which carry app.kubernetes.io/name=evenkeel and app.kubernetes.io/component=broker.
*/}}
{{- define "evenkeel.selectorLabels" -}}
app.kubernetes.io/name: {{ include "evenkeel.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/*
Name of the operator's ServiceAccount.
*/}}
{{- define "evenkeel.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "evenkeel.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The operator's image: repository:tag, tag defaulting to the chart's appVersion; a digest wins.
*/}}
{{- define "evenkeel.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
The image the operator gives brokers of KafkaClusters that name none (EVENKEEL_IMAGE).
Default: the operator's own image (one image for every role).
*/}}
{{- define "evenkeel.brokerImage" -}}
{{- default (include "evenkeel.image" .) .Values.brokerImage }}
{{- end }}

{{/*
The namespace the operator watches when it does not watch them all ("" = every namespace).
*/}}
{{- define "evenkeel.watchNamespace" -}}
{{- if not .Values.rbac.clusterWide }}
{{- default .Release.Namespace .Values.watchNamespace }}
{{- end }}
{{- end }}
