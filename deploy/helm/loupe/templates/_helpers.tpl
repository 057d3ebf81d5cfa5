{{/* The release's name, cut to what a DNS label holds. */}}
{{- define "loupe.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "loupe.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "loupe.labels" -}}
{{ include "loupe.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: agent
app.kubernetes.io/part-of: loupe
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "loupe.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "loupe.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "loupe.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* Paths inside the agent's container. The bpf file system is not
mounted on /sys/fs/bpf: container runtimes' default AppArmor profiles
deny writes under /sys/fs/ but cgroup, which would refuse the pins. */}}
{{- define "loupe.bpffsMount" -}}/bpffs{{- end -}}
{{- define "loupe.tokenDir" -}}/etc/loupe/token{{- end -}}

{{/* The agent's configuration file: the user's config, with the keys
that must agree with the chart's mounts and ports set by the chart. The
addresses on the node's IP are set through the environment, which
Kubernetes expands $(POD_IP) in. */}}
{{- define "loupe.config" -}}
{{- $owned := dict
  "listen" (printf "127.0.0.1:%v" .Values.metrics.port)
  "store" (dict "path" (printf "%s/flows" .Values.hostPaths.store))
  "control" (dict "socket" (printf "%s/loupe.sock" .Values.hostPaths.run))
  "pin_dir" (ternary (printf "%s/loupe" (include "loupe.bpffsMount" .)) "none" .Values.bpffs.pin)
-}}
{{- if .Values.control.service.enabled -}}
{{- $_ := set $owned.control "token_file" (printf "%s/token" (include "loupe.tokenDir" .)) -}}
{{- end -}}
{{- $cfg := mergeOverwrite (deepCopy (default (dict) .Values.config)) $owned -}}
{{- if hasKey $cfg "control" -}}
{{- $_ := unset $cfg.control "listen" -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}
