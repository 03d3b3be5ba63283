{{/* The chart's name as objects and labels carry it: nameOverride, or
the chart's. */}}
{{- define "gpuscaler.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The objects' name: fullnameOverride, or the release's name with the
chart's (once, if the release's holds it already). */}}
{{- define "gpuscaler.fullname" -}}
{{- if .Values.fullnameOverride -}}{{ .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else -}}
{{- $name := include "gpuscaler.name" . -}}
{{- if contains $name .Release.Name -}}{{ .Release.Name | trunc 63 | trimSuffix "-" }}{{- else -}}{{ printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}{{- end -}}
{{- end -}}
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
app.kubernetes.io/name: {{ include "gpuscaler.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpuscaler
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "gpuscaler.selector" -}}
app.kubernetes.io/name: {{ include "gpuscaler.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: {{ .Values.mode }}
{{- end -}}

{{- define "gpuscaler.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}{{ default (include "gpuscaler.fullname" .) .Values.serviceAccount.name }}{{- else -}}{{ required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}{{- end -}}
{{- end -}}

{{- define "gpuscaler.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end -}}
{{- end -}}

{{/* The config file: the user's, with what the chart decides set. */}}
{{- define "gpuscaler.config" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- $_ := set $cfg "kubeconfig" "in-cluster" -}}
{{- /* A group without managedBy is the mode's: the NodeProvisioner's in
controller mode, a GPUNodeClass template in karpenter mode (the config's
own default, cluster-autoscaler, is the provider mode's). */ -}}
{{- $owner := get (dict "controller" "node-provisioner" "karpenter" "karpenter" "provider" "cluster-autoscaler") .Values.mode -}}
{{- $groups := list -}}
{{- range (default list $cfg.nodeGroups) -}}
{{- $g := deepCopy . -}}
{{- if not $g.managedBy -}}
{{- $_ := set $g "managedBy" $owner -}}
{{- end -}}
{{- $groups = append $groups $g -}}
{{- end -}}
{{- if $cfg.nodeGroups -}}
{{- $_ := set $cfg "nodeGroups" $groups -}}
{{- end -}}
{{- /* The simulated cloud stands in for its instances' kubelets: without a
kubeconfig of its own it registers their Nodes in this cluster (the chart
grants it), so that the defaults scale a GPU pod onto a node. An explicit
kubeconfig: "" registers none. */ -}}
{{- if hasKey (default dict $cfg.clouds) "sim" -}}
{{- $sim := deepCopy (default dict $cfg.clouds.sim) -}}
{{- if not (hasKey $sim "kubeconfig") -}}
{{- $_ := set $sim "kubeconfig" "in-cluster" -}}
{{- end -}}
{{- $_ := set $cfg.clouds "sim" $sim -}}
{{- end -}}
{{- if not $cfg.clusterName -}}
{{- $clouds := keys (default dict $cfg.clouds) | sortAlpha -}}
{{- if and $clouds (ne (join "," $clouds) "sim") -}}
{{- fail "config.clusterName is required: gpuscaler takes as its own every instance of the cloud account marked with it, so two installs sharing one delete each other's nodes; name this cluster" -}}
{{- end -}}
{{- $_ := set $cfg "clusterName" .Release.Name -}}
{{- end -}}
{{- with .Values.scriptServer.tls.existingSecret -}}
{{- $ss := deepCopy (default dict $cfg.scriptServer) -}}
{{- $tls := dict "certFile" "/etc/gpuscaler/scripts-tls/tls.crt" "keyFile" "/etc/gpuscaler/scripts-tls/tls.key" -}}
{{- if $.Values.scriptServer.tls.pinCA -}}
{{- $_ := set $tls "caCertFile" "/etc/gpuscaler/scripts-tls/ca.crt" -}}
{{- end -}}
{{- $_ := set $ss "tls" $tls -}}
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

{{/* The parts of the config a reload refuses to change (a restart puts
them in force): the clouds, cluster access, the script server, the
metrics and provider listeners, and the Kamatera and Scaleway groups,
which their clouds are built from (daemon.Runtime.Reload). */}}
{{- define "gpuscaler.restartConfig" -}}
{{- $cfg := include "gpuscaler.config" . | fromYaml -}}
{{- $built := list -}}
{{- range (default list $cfg.nodeGroups) -}}
{{- if has .cloud (list "kamatera" "scaleway") -}}
{{- $built = append $built (pick . "name" "cloud" "instanceType" "locations" "cloudOptions") -}}
{{- end -}}
{{- end -}}
{{- toYaml (dict "clouds" $cfg.clouds "kubeconfig" $cfg.kubeconfig "scriptServer" $cfg.scriptServer "metrics" $cfg.metrics "provider" $cfg.provider "builtGroups" $built) -}}
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

{{/* The mTLS Secrets' data the chart makes itself, as JSON: server and
client (each tls.crt, tls.key, ca.crt, base64) and notAfter (Unix seconds).
The Secrets in the cluster are kept until 30 days (or a third of the
lifetime, if shorter) before they expire; then, at install, or when they
carry no expiry (made by an earlier chart), a CA and two certificates are
made. Made once
a render (kept in .Values), so that the Secrets and cluster-autoscaler's
pod, which carries their fingerprint and rolls when they change (it reads
its certificate only at start), agree. */}}
{{- define "gpuscaler.providerTLS" -}}
{{- if not (hasKey .Values "__providerTLS") -}}
{{- $name := include "gpuscaler.fullname" . -}}
{{- $days := int .Values.provider.tls.durationDays -}}
{{- $now := now | unixEpoch | int64 -}}
{{- $renewBefore := min (mul 30 86400) (div (mul $days 86400) 3) -}}
{{- $server := lookup "v1" "Secret" .Release.Namespace (printf "%s-server-tls" $name) -}}
{{- $client := lookup "v1" "Secret" .Release.Namespace (printf "%s-client-tls" $name) -}}
{{- $stored := "" -}}
{{- with $server }}{{ $stored = index (default dict .metadata.annotations) "gpuscaler.dev/not-after" | default "" }}{{ end -}}
{{- $data := dict -}}
{{- /* Secrets made before the expiry was recorded are due: made anew once. */ -}}
{{- if and $server $client $stored (gt (sub (int64 $stored) $now) (int64 $renewBefore)) -}}
{{- $data = dict "server" $server.data "client" $client.data "notAfter" $stored -}}
{{- else -}}
{{- $host := printf "%s.%s.svc" $name .Release.Namespace -}}
{{- $ca := genCA (printf "%s-ca" $name) $days -}}
{{- $srv := genSignedCert $host nil (list $host (printf "%s.%s" $name .Release.Namespace)) $days $ca -}}
{{- $cli := genSignedCert (include "gpuscaler.clientName" .) nil (list (include "gpuscaler.clientName" .)) $days $ca -}}
{{- $data = dict "notAfter" (toString (add $now (mul $days 86400)))
    "server" (dict "tls.crt" ($srv.Cert | b64enc) "tls.key" ($srv.Key | b64enc) "ca.crt" ($ca.Cert | b64enc))
    "client" (dict "tls.crt" ($cli.Cert | b64enc) "tls.key" ($cli.Key | b64enc) "ca.crt" ($ca.Cert | b64enc)) -}}
{{- end -}}
{{- $_ := set .Values "__providerTLS" $data -}}
{{- end -}}
{{- toJson (get .Values "__providerTLS") -}}
{{- end -}}

{{/* The topology spread constraints of a Deployment's pods: each given
the pods' selector when it names none. selector is the rendered
matchLabels. */}}
{{- define "gpuscaler.spread" -}}
{{- $out := list -}}
{{- range .constraints -}}
{{- $c := deepCopy . -}}
{{- if not $c.labelSelector -}}
{{- $_ := set $c "labelSelector" (dict "matchLabels" ($.selector | fromYaml)) -}}
{{- end -}}
{{- $out = append $out $c -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* Where the provider's mTLS certificates come from: "existing" (two
Secrets you manage, provider.tls.existingSecrets), "cert-manager", or
"generated" (by the chart at install, kept on upgrade). */}}
{{- define "gpuscaler.tlsSource" -}}
{{- $e := .Values.provider.tls.existingSecrets -}}
{{- if or $e.server $e.client -}}
{{- if not (and $e.server $e.client) -}}{{- fail "provider.tls.existingSecrets needs both server and client" -}}{{- end -}}
{{- if .Values.provider.tls.certManager.enabled -}}{{- fail "provider.tls.existingSecrets and provider.tls.certManager.enabled are two sources of the same certificates: choose one" -}}{{- end -}}
existing
{{- else if .Values.provider.tls.certManager.enabled -}}
cert-manager
{{- else -}}
generated
{{- end -}}
{{- end -}}

{{/* The Secret of the provider's certificate (which: server or client). */}}
{{- define "gpuscaler.tlsSecret" -}}
{{- if eq (include "gpuscaler.tlsSource" .root) "existing" -}}
{{- get .root.Values.provider.tls.existingSecrets .which -}}
{{- else -}}
{{- printf "%s-%s-tls" (include "gpuscaler.fullname" .root) .which -}}
{{- end -}}
{{- end -}}
