{{- define "gpuscaler.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}{{ .Release.Name | trunc 63 | trimSuffix "-" }}{{- else -}}{{ printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}{{- end -}}
{{- end -}}

{{/* The labels of every object; the component is gpuscaler's mode
(provider, controller, karpenter). */}}
{{- define "gpuscaler.labels" -}}
{{ include "gpuscaler.commonLabels" . }}
app.kubernetes.io/component: {{ .Values.mode }}
{{- end -}}

{{/* The labels of the objects of the cluster-autoscaler the chart runs
in provider mode. */}}
{{- define "gpuscaler.caLabels" -}}
{{ include "gpuscaler.commonLabels" . }}
app.kubernetes.io/component: cluster-autoscaler
{{- end -}}

{{- define "gpuscaler.commonLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpuscaler
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
{{- if not $cfg.clusterName -}}
{{- $clouds := keys (default dict $cfg.clouds) | sortAlpha -}}
{{- if and $clouds (ne (join "," $clouds) "sim") -}}
{{- fail "config.clusterName is required: gpuscaler takes as its own every instance of the cloud account marked with it, so two installs sharing one delete each other's nodes; name this cluster" -}}
{{- end -}}
{{- $_ := set $cfg "clusterName" .Release.Name -}}
{{- end -}}
{{- with .Values.scriptServer.tls.existingSecret -}}
{{- $ss := deepCopy (default dict $cfg.scriptServer) -}}
{{- $_ := set $ss "tls" (dict "certFile" "/etc/gpuscaler/scripts-tls/tls.crt" "keyFile" "/etc/gpuscaler/scripts-tls/tls.key" "caCertFile" "/etc/gpuscaler/scripts-tls/ca.crt") -}}
{{- $_ := set $cfg "scriptServer" $ss -}}
{{- end -}}
{{- $metrics := dict "address" (printf "0.0.0.0:%v" .Values.metrics.port) -}}
{{- if ne .Values.mode "karpenter" -}}
{{- $_ := set $metrics "healthAddress" (printf "0.0.0.0:%v" .Values.metrics.healthPort) -}}
{{- end -}}
{{- $_ := set $cfg "metrics" (merge $metrics (default dict $cfg.metrics)) -}}
{{- if eq .Values.mode "provider" -}}
{{- $_ := set $cfg "provider" (dict "listenAddress" (printf "0.0.0.0:%v" .Values.provider.grpcPort) "tls" (dict "certFile" "/etc/gpuscaler/tls/tls.crt" "keyFile" "/etc/gpuscaler/tls/tls.key" "caCertFile" "/etc/gpuscaler/tls/ca.crt" "clientNames" .Values.provider.tls.clientNames)) -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/* The leader Lease's name: the controller's --leader-election-id default,
or Karpenter core's. */}}
{{- define "gpuscaler.leaseName" -}}
{{- if eq .Values.mode "karpenter" -}}karpenter-leader-election{{- else -}}gpuscaler-controller{{- end -}}
{{- end -}}

{{/* What the config's bootstrap needs of Secrets, by namespace, as YAML:
mint (bootstrap tokens, always in kube-system) and the names of the
Secrets tokenSecretRef reads. Empty when no group bootstraps with a
token. */}}
{{- define "gpuscaler.tokenAccess" -}}
{{- $out := dict -}}
{{- range .Values.config.nodeGroups -}}
{{- with .bootstrap -}}
{{- if .mintToken -}}
{{- $a := get $out "kube-system" | default dict -}}
{{- $_ := set $a "mint" true -}}
{{- $_ := set $out "kube-system" $a -}}
{{- end -}}
{{- with .tokenSecretRef -}}
{{- $ns := required "config.nodeGroups[].bootstrap.tokenSecretRef.namespace is required" .namespace -}}
{{- $a := get $out $ns | default dict -}}
{{- $_ := set $a "names" (append (get $a "names" | default list) (required "config.nodeGroups[].bootstrap.tokenSecretRef.name is required" .name) | uniq | sortAlpha) -}}
{{- $_ := set $out $ns $a -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* The identity of cluster-autoscaler's client certificate (its CN and
DNS SAN), the one the provider accepts. */}}
{{- define "gpuscaler.clientName" -}}
{{- first .Values.provider.tls.clientNames | default "cluster-autoscaler" -}}
{{- end -}}

{{/* The script server's port, from config.scriptServer.listenAddress
(host:port); empty when the config runs no script server. */}}
{{- define "gpuscaler.scriptPort" -}}
{{- with (.Values.config.scriptServer | default dict).listenAddress -}}
{{- splitList ":" (toString .) | last -}}
{{- end -}}
{{- end -}}
