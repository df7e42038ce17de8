{{/* The three containers, shared by the plain objects and the LeaderWorkerSet. */}}

{{/*
The gateway container: in its own Deployment (plain mode) or in a group's
leader pod (dialling its scheduler on the pod's loopback). Call with
(dict "ctx" $ "scheduler" "HOST:PORT").
*/}}
{{- define "specline.gatewayContainer" -}}
{{- $scheduler := .scheduler -}}
{{- with .ctx -}}
{{- $ctx := . -}}
- name: gateway
  image: {{ include "specline.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command: ["specline-gateway"]
  args:
    - --model=$(SPECLINE_MODEL)
    {{- with .Values.model.tokenizer }}
    - --tokenizer={{ $ctx.Values.modelCache.mountPath }}/{{ . }}
    {{- end }}
    {{- with .Values.model.chatTemplate }}
    - --chat-template={{ $ctx.Values.modelCache.mountPath }}/{{ . }}
    {{- end }}
    - --scheduler={{ $scheduler }}
    - --host=0.0.0.0
    - --port={{ .Values.gateway.grpcPort }}
    - --metrics-port={{ .Values.gateway.metricsPort }}
    {{- if .Values.gateway.httpPort }}
    - --http-port={{ .Values.gateway.httpPort }}
    {{- end }}
    - --default-max-tokens={{ .Values.gateway.defaultMaxTokens }}
    - --max-concurrent-streams={{ .Values.gateway.maxConcurrentStreams }}
    - --drain-timeout-ms={{ .Values.gateway.drainTimeoutMs }}
    - --log-level={{ .Values.logLevel }}
    {{- include "specline.clusterSecretArgs" . | trim | nindent 4 }}
    {{- if .Values.gateway.authSecret }}
    - --auth-token-file=/var/run/secrets/specline/auth/token
    {{- end }}
    {{- range $group, $members := .Values.gateway.cacheShareGroups }}
    {{- if not $ctx.Values.gateway.authSecret }}{{ fail "gateway.cacheShareGroups needs gateway.authSecret" }}{{ end }}
    - --cache-share-group={{ $group }}={{ join "," $members }}
    {{- end }}
    {{- with .Values.gateway.maxTokensPerMinutePerPrincipal }}
    - --max-tokens-per-minute-per-principal={{ int64 . }}
    {{- end }}
    {{- if .Values.gateway.metricsPerPrincipal }}
    - --metrics-per-principal=true
    {{- end }}
    {{- if .Values.gateway.acceptAnyModel }}
    - --accept-any-model=true
    {{- end }}
    {{- if .Values.gateway.tlsSecret }}
    - --tls-cert=/var/run/secrets/specline/tls/tls.crt
    - --tls-key=/var/run/secrets/specline/tls/tls.key
    {{- end }}
    {{- with .Values.gateway.corsOrigins }}
    - --cors-origins={{ . }}
    {{- end }}
    {{- with .Values.gateway.extraArgs }}{{ toYaml . | nindent 4 }}{{ end }}
  env:
    {{- include "specline.configEnv" (dict "ctx" . "keys" (list "model")) | nindent 4 }}
  ports:
    - {name: grpc, containerPort: {{ .Values.gateway.grpcPort }}, protocol: TCP}
    - {name: metrics, containerPort: {{ .Values.gateway.metricsPort }}, protocol: TCP}
    {{- if .Values.gateway.httpPort }}
    - {name: http, containerPort: {{ .Values.gateway.httpPort }}, protocol: TCP}
    {{- end }}
  {{- if eq .Values.gateway.probe "http" }}
  {{- if not .Values.gateway.httpPort }}{{ fail "gateway.probe=http needs gateway.httpPort" }}{{ end }}
  {{- include "specline.httpProbes" (dict "ctx" . "port" .Values.gateway.httpPort "scheme" (ternary "HTTP" "HTTPS" (empty .Values.gateway.tlsSecret))) | nindent 2 }}
  {{- else }}
  {{- include "specline.probes" (dict "ctx" . "port" .Values.gateway.grpcPort "startup" "grpc") | nindent 2 }}
  {{- end }}
  securityContext:
    {{- toYaml .Values.securityContext | nindent 4 }}
  resources:
    {{- toYaml .Values.gateway.resources | nindent 4 }}
  volumeMounts:
    {{- include "specline.volumeMounts" . | nindent 4 }}
    {{- if .Values.gateway.authSecret }}
    - {name: auth, mountPath: /var/run/secrets/specline/auth, readOnly: true}
    {{- end }}
    {{- if .Values.gateway.tlsSecret }}
    - {name: tls, mountPath: /var/run/secrets/specline/tls, readOnly: true}
    {{- end }}
{{- end -}}
{{- end -}}

{{/*
The scheduler container: in its own Deployment (plain mode) or in a
group's leader pod, where the gateway's ports come first and the
scheduler's gRPC and metrics ports are named sched-grpc, sched-metrics.
Call with (dict "ctx" $ "stageGrpc" "HOST:PORT,..." "portPrefix" ""), and
"extraEnv" (YAML list items) for more environment.
*/}}
{{- define "specline.schedulerContainer" -}}
{{- $stageGrpc := .stageGrpc -}}
{{- $prefix := .portPrefix -}}
{{- $extraEnv := .extraEnv -}}
{{- with .ctx -}}
{{- $ctx := . -}}
- name: scheduler
  image: {{ include "specline.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command: ["specline-scheduler"]
  args:
    - --model=$(SPECLINE_MODEL)
    - --stage-grpc={{ $stageGrpc }}
    - --data-listen={{ include "specline.transport" . }}://0.0.0.0:{{ .Values.scheduler.dataPort }}
    - --host=0.0.0.0
    - --grpc-port={{ .Values.scheduler.grpcPort }}
    - --metrics-port={{ .Values.scheduler.metricsPort }}
    - --kv-capacity-tokens={{ .Values.pipeline.kvCapacityTokens }}
    - --kv-block-size={{ .Values.pipeline.kvBlockSize }}
    - --max-waiting={{ .Values.scheduler.maxWaiting }}
    - --admission={{ .Values.scheduler.admission }}
    - --max-kv-blocks-per-tenant={{ int64 .Values.scheduler.maxKvBlocksPerTenant }}
    - --prefix-cache={{ ternary "on" "off" .Values.scheduler.prefixCache }}
    - --default-policy=$(SPECLINE_DEFAULT_POLICY)
    - --spec-policy=$(SPECLINE_SPEC_POLICY)
    {{- with .Values.scheduler.ppsdHead }}
    - --ppsd-head={{ $ctx.Values.modelCache.mountPath }}/{{ . }}
    {{- end }}
    {{- with .Values.scheduler.spdHead }}
    - --spd-head={{ $ctx.Values.modelCache.mountPath }}/{{ . }}
    {{- end }}
    {{- include "specline.pipelineHeadArgs" . | trim | nindent 4 }}
    - --drain-timeout-ms={{ .Values.scheduler.drainTimeoutMs }}
    - --device={{ .Values.scheduler.device }}
    - --log-level={{ .Values.logLevel }}
    {{- include "specline.clusterSecretArgs" . | trim | nindent 4 }}
    {{- if include "specline.kvEvents" . }}
    # KV events on every address; the gateway names a reachable host on
    # GET /kv_event_sources (the router substitutes the gateway's for "*").
    - '--kv-events-config={"enable_kv_cache_events":true,"endpoint":"tcp://*:{{ .Values.scheduler.kvEventsPort }}","replay_endpoint":"tcp://*:{{ .Values.scheduler.kvEventsReplayPort }}"}'
    {{- end }}
    {{- with .Values.scheduler.extraArgs }}{{ toYaml . | nindent 4 }}{{ end }}
  env:
    {{- include "specline.configEnv" (dict "ctx" . "keys" (list "model" "default-policy" "spec-policy")) | nindent 4 }}
    {{- with $extraEnv }}{{ . | nindent 4 }}{{ end }}
  ports:
    - {name: {{ $prefix }}grpc, containerPort: {{ .Values.scheduler.grpcPort }}, protocol: TCP}
    - {name: data, containerPort: {{ .Values.scheduler.dataPort }}, protocol: TCP}
    - {name: {{ $prefix }}metrics, containerPort: {{ .Values.scheduler.metricsPort }}, protocol: TCP}
    {{- if include "specline.kvEvents" . }}
    - {name: kv-events, containerPort: {{ .Values.scheduler.kvEventsPort }}, protocol: TCP}
    - {name: kv-replay, containerPort: {{ .Values.scheduler.kvEventsReplayPort }}, protocol: TCP}
    {{- end }}
  # Ready once every stage answers; started as soon as it listens.
  {{- include "specline.probes" (dict "ctx" . "port" .Values.scheduler.grpcPort "startup" "tcp") | nindent 2 }}
  securityContext:
    {{- toYaml .Values.securityContext | nindent 4 }}
  resources:
    {{- $res := deepCopy .Values.scheduler.resources }}
    {{- if eq .Values.scheduler.device "cuda" }}
    {{- $_ := set $res "limits" (merge (dict .Values.stage.gpuResource 1) (default dict $res.limits)) }}
    {{- end }}
    {{- toYaml $res | nindent 4 }}
  volumeMounts:
    {{- include "specline.volumeMounts" . | nindent 4 }}
{{- end -}}
{{- end -}}

{{/*
A stage container: of the StatefulSet (plain mode: --stage is the pod's
ordinal, pipeline.json has its addresses) or a LeaderWorkerSet worker. A
worker's index in its group (LWS_WORKER_INDEX, 1..stages) is one more than
its stage's, and its neighbours' names are its group's: a few lines of
shell derive --stage, --next and --data-advertise from what LWS injects
(LWS_LEADER_ADDRESS = <lws>-<group>.<lws>.<namespace>, the leader's pod
name under LWS's headless Service; the workers are <lws>-<group>-<index>
under the same Service; LWS_GROUP_SIZE = stages + 1), then exec the
binary with the same flags as in plain mode ("$@"). $$ is the kubelet's
escape of a literal $. Call with (dict "ctx" $ "lws" true|false).
*/}}
{{- define "specline.stageContainer" -}}
{{- $lws := .lws -}}
{{- with .ctx -}}
{{- $ctx := . -}}
{{- $scheme := include "specline.transport" . -}}
- name: stage
  image: {{ include "specline.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  {{- if $lws }}
  command:
    - /bin/sh
    - -ec
    - |
      stage=$$((LWS_WORKER_INDEX - 1))
      group=${LWS_LEADER_ADDRESS%%.*}
      domain=${LWS_LEADER_ADDRESS#*.}
      if [ "$LWS_WORKER_INDEX" -lt "$$((LWS_GROUP_SIZE - 1))" ]; then
        next="{{ $scheme }}://${group}-$$((LWS_WORKER_INDEX + 1)).${domain}:{{ .Values.pipeline.dataPort }}"
      else
        next="{{ $scheme }}://${LWS_LEADER_ADDRESS}:{{ .Values.scheduler.dataPort }}"
      fi
      exec specline-stage --stage="$stage" --next="$next" --data-advertise="{{ $scheme }}://${group}-${LWS_WORKER_INDEX}.${domain}:{{ .Values.pipeline.dataPort }}" "$@"
    - specline-stage
  {{- else }}
  command: ["specline-stage"]
  {{- end }}
  args:
    - --model=$(SPECLINE_MODEL)
    - --pipeline=/etc/specline/pipeline.json
    {{- if not $lws }}
    - --stage=$(POD_INDEX)
    {{- end }}
    - --data-listen={{ include "specline.transport" . }}://0.0.0.0:{{ .Values.pipeline.dataPort }}
    - --host=0.0.0.0
    - --grpc-port={{ .Values.stage.grpcPort }}
    - --metrics-port={{ .Values.stage.metricsPort }}
    - --threads={{ .Values.stage.threads }}
    - --kv-capacity-tokens={{ .Values.pipeline.kvCapacityTokens }}
    - --kv-block-size={{ .Values.pipeline.kvBlockSize }}
    - --device={{ .Values.stage.device }}
    {{- if eq .Values.stage.device "cuda" }}
    - --dtype={{ .Values.stage.dtype }}
    - --cuda-graphs={{ .Values.stage.cudaGraphs }}
    {{- end }}
    - --log-level={{ .Values.logLevel }}
    {{- include "specline.clusterSecretArgs" . | trim | nindent 4 }}
    {{- include "specline.stageHeadArgs" . | trim | nindent 4 }}
    {{- with .Values.stage.extraArgs }}{{ toYaml . | nindent 4 }}{{ end }}
  env:
    {{- include "specline.configEnv" (dict "ctx" . "keys" (list "model")) | nindent 4 }}
    {{- if not $lws }}
    # The StatefulSet ordinal (label set by Kubernetes 1.28+).
    - name: POD_INDEX
      valueFrom:
        fieldRef: {fieldPath: "metadata.labels['apps.kubernetes.io/pod-index']"}
    {{- end }}
  ports:
    - {name: grpc, containerPort: {{ .Values.stage.grpcPort }}, protocol: TCP}
    - {name: data, containerPort: {{ .Values.pipeline.dataPort }}, protocol: TCP}
    - {name: metrics, containerPort: {{ .Values.stage.metricsPort }}, protocol: TCP}
  {{- include "specline.probes" (dict "ctx" . "port" .Values.stage.grpcPort "startup" "grpc") | nindent 2 }}
  {{- if $lws }}
  # A group's rollout sends SIGTERM to all its pods at once, and a stage
  # exits once its batch in hand is done: it keeps serving for the
  # scheduler's drain first, so the group's open streams finish.
  lifecycle:
    preStop:
      exec: {command: ["/bin/sleep", "{{ div (add (int .Values.scheduler.drainTimeoutMs) 999) 1000 }}"]}
  {{- end }}
  securityContext:
    {{- toYaml .Values.securityContext | nindent 4 }}
  resources:
    {{- $res := deepCopy .Values.stage.resources }}
    {{- if eq .Values.stage.device "cuda" }}
    {{- $_ := set $res "limits" (merge (dict .Values.stage.gpuResource 1) (default dict $res.limits)) }}
    {{- end }}
    {{- toYaml $res | nindent 4 }}
  volumeMounts:
    {{- include "specline.volumeMounts" . | nindent 4 }}
{{- end -}}
{{- end -}}
