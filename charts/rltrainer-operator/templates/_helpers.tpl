{{/*
Names. Every name is capped at 63 characters: Kubernetes names and label values are DNS
labels (RFC 1123), and a long release name must not produce an object the API rejects.
*/}}

{{/* The chart name (or nameOverride). */}}
{{- define "rltrainer-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The full name: fullnameOverride, else "<release>-<name>", or just the release name when it
already contains the chart name.
*/}}
{{- define "rltrainer-operator.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The helm.sh/chart label: "<name>-<version>". */}}
{{- define "rltrainer-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "rltrainer-operator.labels" -}}
helm.sh/chart: {{ include "rltrainer-operator.chart" . }}
{{ include "rltrainer-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: rltrainer
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Labels selecting the operator pod (immutable in the Deployment: no version here). */}}
{{- define "rltrainer-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rltrainer-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{/* The metrics Service: the full name with a "-metrics" suffix, still within 63 characters. */}}
{{- define "rltrainer-operator.metricsServiceName" -}}
{{- printf "%s-metrics" (include "rltrainer-operator.fullname" . | trunc 55 | trimSuffix "-") -}}
{{- end -}}

{{/* The chart's Secret with the operator's Ray token key: "<full name>-ray-token-key", within 63. */}}
{{- define "rltrainer-operator.rayTokenKeySecretName" -}}
{{- printf "%s-ray-token-key" (include "rltrainer-operator.fullname" . | trunc 49 | trimSuffix "-") -}}
{{- end -}}

{{/* The Secret the operator's Ray token key comes from: rayToken.existingSecret, else the
chart's when rayToken.create, else none (empty). */}}
{{- define "rltrainer-operator.rayTokenKeySecret" -}}
{{- if .Values.rayToken.existingSecret -}}
{{- .Values.rayToken.existingSecret -}}
{{- else if .Values.rayToken.create -}}
{{- include "rltrainer-operator.rayTokenKeySecretName" . -}}
{{- end -}}
{{- end -}}

{{/* The operator's service account. */}}
{{- define "rltrainer-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "rltrainer-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The operator image, tag defaulting to the appVersion. */}}
{{- define "rltrainer-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The trainer image experiments without spec.image run. */}}
{{- define "rltrainer-operator.trainerImage" -}}
{{- printf "%s:%s" .Values.trainerImage.repository (default (printf "%s-cpu" .Chart.AppVersion) .Values.trainerImage.tag) -}}
{{- end -}}

{{/* The watched namespaces when not cluster-wide, as a list (the release namespace by default). */}}
{{- define "rltrainer-operator.watchNamespaces" -}}
{{- if .Values.watch.namespaces -}}
{{- toYaml (uniq .Values.watch.namespaces) -}}
{{- else -}}
{{- toYaml (list .Release.Namespace) -}}
{{- end -}}
{{- end -}}

{{/*
The operator's RBAC rules: exactly the API calls it makes, no more (tests/charts/expected_rbac.py
holds the same table, and a test checks the rendered rules against it). kopf runs --standalone,
so no peering objects; its handler state lives in annotations on the RLExperiment itself.
Same rules in the ClusterRole (cluster-wide) and in each namespaced Role.
*/}}
{{- define "rltrainer-operator.rules" -}}
# Watch experiments; patch their annotations/finalizers (kopf state); delete after ttlSecondsAfterFinished.
- apiGroups: ["rltrainer.io"]
  resources: ["rlexperiments"]
  verbs: ["list", "watch", "patch", "delete"]
# Write phase, conditions and progress.
- apiGroups: ["rltrainer.io"]
  resources: ["rlexperiments/status"]
  verbs: ["patch"]
# One RayCluster per experiment: create, scale the rollout group, delete on finish/suspend;
# watched so that a cluster becoming ready (or losing its head) is acted on at once.
- apiGroups: ["ray.io"]
  resources: ["rayclusters"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Events on the experiments (kopf posts handler events to the core API).
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
# Its RayClusters' Pods, read while a cluster is not ready: why (an image the node lacks, no
# node that fits, OOMKilled, a crash loop) becomes the experiment's condition.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list"]
# Each experiment's Ray token Secret (rayAuth.mode token): created once, never read.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["create"]
# Kueue's Workload of a queued experiment's RayCluster: why it waits, or was preempted.
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads"]
  verbs: ["list"]
# spec.preemption.podDisruptionBudget: created once with the cluster (the GC deletes it).
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["create"]
{{- end -}}
