{{- define "agentbox.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}{{ .Release.Name | trunc 63 | trimSuffix "-" }}{{- else -}}{{ printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}{{- end -}}
{{- end -}}
{{- define "agentbox.labels" -}}
app.kubernetes.io/name: agentbox-controller
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}
{{- define "agentbox.selector" -}}
app.kubernetes.io/name: agentbox-controller
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
{{- define "agentbox.serviceAccount" -}}
{{- default (include "agentbox.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}
