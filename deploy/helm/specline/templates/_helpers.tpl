{{/* Names, labels and the pipeline wiring shared by every template. */}}

{{- define "specline.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "specline.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "specline.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "specline.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/*
Pipelines (docs/deploy.md, "N pipelines"): pipelines.mode "plain" renders
one set of objects per pipeline (with pipelines.replicas 1: today's
objects under today's names), "leaderWorkerSet" one LeaderWorkerSet whose
groups are the pipelines. A template renders a pipeline's objects with the
root context plus "Pipeline" (dict "index" i); helpers called without it
name the release-wide objects.
*/}}
{{- define "specline.mode" -}}
{{- $m := .Values.pipelines.mode -}}
{{- if not (has $m (list "plain" "leaderWorkerSet")) -}}{{- fail (printf "pipelines.mode must be plain or leaderWorkerSet, not %q" $m) -}}{{- end -}}
{{- $m -}}
{{- end -}}

{{/* "true" when the schedulers publish their KV events: the router routes on them (router.policy kv_aware; docs/routers.md "KV events"). */}}
{{- define "specline.kvEvents" -}}
{{- if and .Values.router.enabled (eq .Values.router.policy "kv_aware") -}}true{{- end -}}
{{- end -}}

{{/* "true" when plain mode runs more than one pipeline: names and selectors then carry the pipeline's index. */}}
{{- define "specline.multiPlain" -}}
{{- if and (eq (include "specline.mode" .) "plain") (gt (int .Values.pipelines.replicas) 1) -}}true{{- end -}}
{{- end -}}

{{/* <fullname>, or <fullname>-<i> for pipeline i of several plain ones. */}}
{{- define "specline.pipelineBase" -}}
{{- if and (hasKey . "Pipeline") (include "specline.multiPlain" .) -}}
{{- $suffix := printf "-%d" (int .Pipeline.index) -}}
{{- printf "%s%s" (include "specline.fullname" . | trunc (sub 63 (len $suffix) | int) | trimSuffix "-") $suffix -}}
{{- else -}}
{{- include "specline.fullname" . -}}
{{- end -}}
{{- end -}}

{{/* Component names: <base>-gateway, -scheduler, -stage (base: pipelineBase). */}}
{{- define "specline.gateway" -}}{{ include "specline.pipelineBase" . | trunc 55 }}-gateway{{- end -}}
{{- define "specline.scheduler" -}}{{ include "specline.pipelineBase" . | trunc 53 }}-scheduler{{- end -}}
{{- define "specline.stage" -}}{{ include "specline.pipelineBase" . | trunc 57 }}-stage{{- end -}}
{{- define "specline.configMapName" -}}{{ include "specline.pipelineBase" . }}{{- end -}}
{{/* The release-wide gateway Service (every pipeline's gateways) and the router. */}}
{{- define "specline.gatewayService" -}}{{ include "specline.fullname" . | trunc 55 }}-gateway{{- end -}}
{{- define "specline.router" -}}{{ include "specline.fullname" . | trunc 56 }}-router{{- end -}}
{{/*
The LeaderWorkerSet: its groups' pods are <lws>-<group> (leader) and
<lws>-<group>-<worker>, and LWS names its headless Service <lws> too, so
the name leaves room for both indexes within a 63-character host name.
*/}}
{{- define "specline.lws" -}}{{ include "specline.fullname" . | trunc 52 | trimSuffix "-" }}{{- end -}}

{{- define "specline.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "specline.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: specline
{{- end -}}

{{/*
Selector labels of one component; call with (dict "ctx" $ "component" "gateway").
A pipeline's objects of several plain ones add specline.io/pipeline.
*/}}
{{- define "specline.selectorLabels" -}}
app.kubernetes.io/name: {{ include "specline.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- if and (hasKey .ctx "Pipeline") (include "specline.multiPlain" .ctx) }}
specline.io/pipeline: {{ .ctx.Pipeline.index | quote }}
{{- end }}
{{- end -}}

{{- define "specline.componentLabels" -}}
{{ include "specline.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "specline.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "specline.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "specline.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if and (not .Values.image.tag) (or (eq .Values.stage.device "cuda") (eq .Values.scheduler.device "cuda")) -}}
{{- $tag = printf "%s-cuda" $tag -}}
{{- end -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}

{{/* Cluster DNS names: the scheduler's Service and each stage pod behind the headless Service. */}}
{{- define "specline.schedulerHost" -}}
{{ include "specline.scheduler" . }}.{{ .Release.Namespace }}.svc.cluster.local
{{- end -}}
{{- define "specline.stageHost" -}}
{{ include "specline.stage" .ctx }}-{{ .index }}.{{ include "specline.stage" .ctx }}.{{ .ctx.Release.Namespace }}.svc.cluster.local
{{- end -}}

{{/* The layer ranges, one "A:B" per stage: pipeline.partition, or the even split `specline serve` uses. */}}
{{- define "specline.partition" -}}
{{- $p := .Values.pipeline -}}
{{- $n := int $p.stages -}}
{{- if lt $n 1 -}}{{- fail "pipeline.stages must be at least 1" -}}{{- end -}}
{{- if $p.partition -}}
{{- if ne (len $p.partition) $n -}}
{{- fail (printf "pipeline.partition has %d ranges for %d stages" (len $p.partition) $n) -}}
{{- end -}}
{{- join "," $p.partition -}}
{{- else -}}
{{- $layers := int $p.layers -}}
{{- if gt $n $layers -}}{{- fail (printf "pipeline.stages (%d) exceeds pipeline.layers (%d)" $n $layers) -}}{{- end -}}
{{- $begin := 0 -}}
{{- $ranges := list -}}
{{- range $i := until $n -}}
{{- $size := div $layers $n -}}
{{- if lt $i (mod $layers $n) -}}{{- $size = add1 $size -}}{{- end -}}
{{- $ranges = append $ranges (printf "%d:%d" $begin (add $begin $size)) -}}
{{- $begin = add $begin $size -}}
{{- end -}}
{{- join "," $ranges -}}
{{- end -}}
{{- end -}}

{{- define "specline.stageGrpcList" -}}
{{- $ctx := . -}}
{{- $addrs := list -}}
{{- range $i := until (int .Values.pipeline.stages) -}}
{{- $addrs = append $addrs (printf "%s:%d" (include "specline.stageHost" (dict "ctx" $ctx "index" $i)) (int $ctx.Values.stage.grpcPort)) -}}
{{- end -}}
{{- join "," $addrs -}}
{{- end -}}

{{- define "specline.transport" -}}
{{- $t := .Values.pipeline.transport -}}
{{- if not (has $t (list "tcp" "nccl")) -}}{{- fail (printf "pipeline.transport must be tcp or nccl, not %q" $t) -}}{{- end -}}
{{- $t -}}
{{- end -}}

{{/* pipeline.json: every stage pod reads its entry (--stage = pod index). */}}
{{- define "specline.pipelineJson" -}}
{{- $ctx := . -}}
{{- $scheme := include "specline.transport" . -}}
{{- $ranges := splitList "," (include "specline.partition" .) -}}
{{- $n := int .Values.pipeline.stages -}}
{{- $stages := list -}}
{{- range $i := until $n -}}
{{- $self := printf "%s://%s:%d" $scheme (include "specline.stageHost" (dict "ctx" $ctx "index" $i)) (int $ctx.Values.pipeline.dataPort) -}}
{{- $next := printf "%s://%s:%d" $scheme (include "specline.schedulerHost" $ctx) (int $ctx.Values.scheduler.dataPort) -}}
{{- if lt (add1 $i) $n -}}
{{- $next = printf "%s://%s:%d" $scheme (include "specline.stageHost" (dict "ctx" $ctx "index" (add1 $i))) (int $ctx.Values.pipeline.dataPort) -}}
{{- end -}}
{{- if eq (include "specline.mode" $ctx) "leaderWorkerSet" -}}
{{- /* The group's addresses come from LWS's environment (the stage's --next, --data-advertise). */ -}}
{{- $stages = append $stages (dict "layers" (index $ranges $i)) -}}
{{- else -}}
{{- $stages = append $stages (dict "layers" (index $ranges $i) "data_advertise" $self "next" $next) -}}
{{- end -}}
{{- end -}}
{{- dict "stages" $stages | toPrettyJson -}}
{{- end -}}

{{/* The ConfigMap of a pipeline (plain mode) or of the LeaderWorkerSet; pods hash it (checksum/config). */}}
{{- define "specline.configMap" -}}
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ include "specline.configMapName" . }}
  labels:
    {{- include "specline.labels" . | nindent 4 }}
data:
  model: {{ include "specline.modelPath" . | quote }}
  default-policy: {{ .Values.scheduler.defaultPolicy | quote }}
  spec-policy: {{ .Values.scheduler.specPolicy | quote }}
  pipeline.json: |
    {{- include "specline.pipelineJson" . | nindent 4 }}
{{- end -}}

{{- define "specline.modelPath" -}}
{{ .Values.modelCache.mountPath }}/{{ required "model.file is required" .Values.model.file }}
{{- end -}}

{{/* Pod-level pieces every component shares. */}}
{{- define "specline.podCommon" -}}
serviceAccountName: {{ include "specline.serviceAccountName" . }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- if .Values.model.download.enabled }}
initContainers:
  - name: fetch-model
    image: {{ .Values.model.download.image }}
    # Downloads next to the target and renames, so pods starting together
    # never see a half-written file; skips when the file is already cached.
    command: ["/bin/sh", "-ec"]
    args:
      - |
        dest="{{ include "specline.modelPath" . }}"
        if [ -s "$dest" ]; then echo "model cached: $dest"; exit 0; fi
        mkdir -p "$(dirname "$dest")"
        tmp="$dest.part.$HOSTNAME"
        curl -fsSL --retry 5 -o "$tmp" "$MODEL_URL"
        if [ -n "$MODEL_SHA256" ]; then echo "$MODEL_SHA256  $tmp" | sha256sum -c -; fi
        mv -f "$tmp" "$dest"
        echo "model fetched: $dest"
    env:
      - {name: MODEL_URL, value: {{ required "model.download.url is required when model.download.enabled" .Values.model.download.url | quote }}}
      - {name: MODEL_SHA256, value: {{ .Values.model.download.sha256 | quote }}}
    securityContext:
      {{- toYaml .Values.securityContext | nindent 6 }}
    volumeMounts:
      - {name: models, mountPath: {{ .Values.modelCache.mountPath }}}
      - {name: tmp, mountPath: /tmp}
{{- end }}
volumes:
  - name: models
    {{- if .Values.modelCache.existingClaim }}
    persistentVolumeClaim: {claimName: {{ .Values.modelCache.existingClaim }}}
    {{- else if .Values.modelCache.create }}
    persistentVolumeClaim: {claimName: {{ include "specline.fullname" . }}-models}
    {{- else }}
    emptyDir: {}
    {{- end }}
  - name: config
    configMap: {name: {{ include "specline.configMapName" . }}}
  # The root filesystem is read-only; scratch space for the runtime.
  - name: tmp
    emptyDir: {}
  {{- if .Values.internalAuth.enabled }}
  # The internal plane's shared secret, as the file "secret" whatever the
  # Secret's key; readable by the pod's group (fsGroup) only.
  - name: cluster-secret
    secret:
      secretName: {{ include "specline.clusterSecretName" . }}
      items: [{key: {{ .Values.internalAuth.secretKey }}, path: secret}]
      defaultMode: 0440
  {{- end }}
{{- end -}}

{{/* Environment from the ConfigMap; call with (dict "ctx" $ "keys" (list "model" ...)). */}}
{{- define "specline.configEnv" -}}
{{- $ctx := .ctx -}}
{{- range .keys }}
- name: SPECLINE_{{ . | upper | replace "-" "_" }}
  valueFrom:
    configMapKeyRef: {name: {{ include "specline.configMapName" $ctx }}, key: {{ . }}}
{{- end }}
{{- end -}}

{{- define "specline.volumeMounts" -}}
- {name: models, mountPath: {{ .Values.modelCache.mountPath }}, readOnly: true}
- {name: config, mountPath: /etc/specline, readOnly: true}
- {name: tmp, mountPath: /tmp}
{{- if .Values.internalAuth.enabled }}
- {name: cluster-secret, mountPath: {{ include "specline.clusterSecretDir" . }}, readOnly: true}
{{- end }}
{{- end -}}

{{/* Probes on the gRPC health service; liveness is a TCP check so a scheduler waiting for its stages is not restarted. Call with (dict "ctx" $ "port" N "startup" "grpc"|"tcp"). */}}
{{- define "specline.probes" -}}
{{- $p := .ctx.Values.probes -}}
startupProbe:
  {{- if eq .startup "grpc" }}
  grpc: {port: {{ .port }}}
  {{- else }}
  tcpSocket: {port: {{ .port }}}
  {{- end }}
  periodSeconds: {{ $p.startup.periodSeconds }}
  failureThreshold: {{ $p.startup.failureThreshold }}
readinessProbe:
  grpc: {port: {{ .port }}}
  periodSeconds: {{ $p.readiness.periodSeconds }}
  failureThreshold: {{ $p.readiness.failureThreshold }}
livenessProbe:
  tcpSocket: {port: {{ .port }}}
  periodSeconds: {{ $p.liveness.periodSeconds }}
  failureThreshold: {{ $p.liveness.failureThreshold }}
{{- end -}}

{{/*
The gateway's probes over its HTTP port: GET /health answers 200 while
serving and 503 while draining, so readiness drops as the drain starts.
*/}}
{{- define "specline.httpProbes" -}}
{{- $p := .ctx.Values.probes -}}
startupProbe:
  httpGet: {path: /health, port: {{ .port }}, scheme: {{ .scheme }}}
  periodSeconds: {{ $p.startup.periodSeconds }}
  failureThreshold: {{ $p.startup.failureThreshold }}
readinessProbe:
  httpGet: {path: /health, port: {{ .port }}, scheme: {{ .scheme }}}
  periodSeconds: {{ $p.readiness.periodSeconds }}
  failureThreshold: {{ $p.readiness.failureThreshold }}
livenessProbe:
  tcpSocket: {port: {{ .port }}}
  periodSeconds: {{ $p.liveness.periodSeconds }}
  failureThreshold: {{ $p.liveness.failureThreshold }}
{{- end -}}

{{- define "specline.gracePeriod" -}}
{{- add (div (int .drainMs) 1000) (int .ctx.Values.terminationGraceExtraSeconds) -}}
{{- end -}}

{{/*
The heads of pipeline.ptpHead / pipeline.pipoHead, as container args: the
scheduler loads each whole, every stage hosts what runs on it (PTP's
adapter, PIPO's backbone as a weight set).
*/}}
{{- define "specline.pipelineHeadArgs" -}}
{{- with .Values.pipeline.ptpHead }}
- --ptp-head={{ $.Values.modelCache.mountPath }}/{{ . }}
{{- end }}
{{- with .Values.pipeline.pipoHead }}
- --pipo-head={{ $.Values.modelCache.mountPath }}/{{ . }}
{{- end }}
{{- end -}}

{{- define "specline.stageHeadArgs" -}}
{{- with .Values.pipeline.ptpHead }}
- --adapter={{ $.Values.modelCache.mountPath }}/{{ . }}
{{- end }}
{{- with .Values.pipeline.pipoHead }}
- --weight-set={{ $.Values.modelCache.mountPath }}/{{ . }}
{{- end }}
{{- end -}}


{{/*
The internal plane's shared secret (internalAuth): the Secret's name, where
pods mount it, the flag every binary gets, and the checksum annotation that
rolls the pods when the value changes.
*/}}
{{- define "specline.clusterSecretName" -}}
{{- default (printf "%s-cluster-secret" (include "specline.fullname" .)) .Values.internalAuth.existingSecret -}}
{{- end -}}

{{- define "specline.clusterSecretDir" -}}/var/run/secrets/specline/cluster{{- end -}}

{{- define "specline.clusterSecretArgs" -}}
{{- if .Values.internalAuth.enabled }}
- --cluster-secret-file={{ include "specline.clusterSecretDir" . }}/secret
{{- end }}
{{- end -}}

{{/*
The secret's value as Secret.data holds it (base64): the value the cluster
already has (lookup, so `helm upgrade` keeps it), else, for the generated
Secret, 48 random characters drawn once per render (kept in .Values so the
Secret and every pod's checksum agree). With internalAuth.existingSecret it
is that Secret's value where lookup sees it, else "" (helm template).
*/}}
{{- define "specline.clusterSecretData" -}}
{{- $a := .Values.internalAuth -}}
{{- if not (hasKey $a "_data") -}}
{{- $data := "" -}}
{{- $found := lookup "v1" "Secret" .Release.Namespace (include "specline.clusterSecretName" .) -}}
{{- $foundData := default dict (get $found "data") -}}
{{- if hasKey $foundData $a.secretKey -}}
{{- $data = index $foundData $a.secretKey -}}
{{- else if not $a.existingSecret -}}
{{- $data = randAlphaNum 48 | b64enc -}}
{{- end -}}
{{- $_ := set $a "_data" $data -}}
{{- end -}}
{{- $a._data -}}
{{- end -}}

{{/* Pod annotation: a new secret value restarts the pods, which read it at start. */}}
{{- define "specline.clusterSecretAnnotation" -}}
{{- if .Values.internalAuth.enabled -}}
{{- with include "specline.clusterSecretData" . -}}
checksum/cluster-secret: {{ sha256sum . }}
{{- end -}}
{{- end -}}
{{- end -}}


{{/*
Who may call the gateways' APIs (an ingress rule's "from"):
networkPolicy.gatewayFrom ([]: everyone, no "from"), plus the router's
pods when it is on, which must reach the gateways it routes to.
*/}}
{{- define "specline.gatewayPeers" -}}
{{- with .Values.networkPolicy.gatewayFrom }}
from:
  {{- toYaml . | nindent 2 }}
  {{- if $.Values.router.enabled }}
  # The router, which routes to them.
  - podSelector:
      matchLabels:
        {{- include "specline.selectorLabels" (dict "ctx" $ "component" "router") | nindent 8 }}
  {{- end }}
{{- end }}
{{- end -}}
