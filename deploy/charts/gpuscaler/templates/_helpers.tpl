{{- define "gpuscaler.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}{{ .Release.Name | trunc 63 | trimSuffix "-" }}{{- else -}}{{ printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}{{- end -}}
{{- end -}}

{{- define "gpuscaler.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "gpuscaler.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: {{ .Values.mode }}
{{- end -}}

{{- define "gpuscaler.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}{{ default (include "gpuscaler.fullname" .) .Values.serviceAccount.name }}{{- else -}}{{ required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}{{- end -}}
{{- end -}}

{{- define "gpuscaler.image" -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end -}}

{{/* The config file: the user's, with what the chart decides set. */}}
{{- define "gpuscaler.config" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- $_ := set $cfg "kubeconfig" "in-cluster" -}}
{{- $_ := set $cfg "metrics" (merge (dict "address" (printf "0.0.0.0:%v" .Values.metrics.port)) (default dict $cfg.metrics)) -}}
{{- if eq .Values.mode "provider" -}}
{{- $_ := set $cfg "provider" (dict "listenAddress" (printf "0.0.0.0:%v" .Values.provider.grpcPort) "tls" (dict "certFile" "/etc/gpuscaler/tls/tls.crt" "keyFile" "/etc/gpuscaler/tls/tls.key" "caCertFile" "/etc/gpuscaler/tls/ca.crt")) -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}
