{{/* Names and labels. */}}
{{- define "sigcast.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "sigcast.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/name: sigcast
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sigcast
{{- end -}}

{{/* Selector labels of one component: (dict "root" $ "component" "gateway"). */}}
{{- define "sigcast.selector" -}}
app.kubernetes.io/name: sigcast
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "sigcast.image" -}}
{{ printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end -}}

{{- define "sigcast.signerServiceAccount" -}}
{{- if .Values.signer.serviceAccount.create -}}
{{ default (printf "%s-signer" (include "sigcast.fullname" .)) .Values.signer.serviceAccount.name }}
{{- else -}}
{{ default "default" .Values.signer.serviceAccount.name }}
{{- end -}}
{{- end -}}

{{- define "sigcast.embedded" -}}
{{- if eq .Values.store.mode "embedded" }}true{{ end -}}
{{- end -}}

{{/* The [store] table. */}}
{{- define "sigcast.storeToml" -}}
[store]
{{- if include "sigcast.embedded" . }}
backend = "sqlite"
path = "/var/lib/sigcast/sigcast.db"
{{- else }}
backend = "fdb"
cluster_file = "/var/fdb/fdb.cluster"
{{- end }}
namespace = {{ .Values.store.namespace | quote }}
{{- end -}}

{{/* The metrics address and the [log] and [tracing] tables: (dict "root" $ "offset" N), the
     metrics port being metrics.port + N (the containers of the embedded Pod share one network). */}}
{{- define "sigcast.telemetryToml" -}}
{{- $v := .root.Values -}}
metrics_listen = "0.0.0.0:{{ add $v.metrics.port .offset }}"

[log]
format = {{ $v.log.format | quote }}
filter = {{ $v.log.filter | quote }}

[tracing]
otlp_endpoint = {{ $v.tracing.otlpEndpoint | quote }}
sample_ratio = {{ printf "%.4f" (float64 $v.tracing.sampleRatio) }}
{{- end -}}

{{/* Offset of a component's metrics port: 0 in the cluster, distinct in the embedded Pod. */}}
{{- define "sigcast.metricsOffset" -}}
{{- if include "sigcast.embedded" .root -}}
{{- get (dict "gateway" 0 "signer" 1 "broadcaster" 2) .component -}}
{{- else -}}
0
{{- end -}}
{{- end -}}

{{/* [[evm_chains]] and [[solana_clusters]]: (dict "root" $ "withSettings" true) adds the
     signer's per-chain settings. */}}
{{- define "sigcast.chainsToml" -}}
{{- range .root.Values.chains.evm }}

[[evm_chains]]
chain_id = {{ int64 .chainId }}
rpc_urls = [{{ range $i, $u := .rpcUrls }}{{ if $i }}, {{ end }}{{ $u | quote }}{{ end }}]
{{- if $.withSettings }}
tx_type = {{ default "eip1559" .txType | quote }}
{{- if .maxFeePerGasGwei }}
max_fee_per_gas_gwei = {{ int64 .maxFeePerGasGwei }}
{{- end }}
{{- end }}
{{- end }}
{{- range .root.Values.chains.solana }}

[[solana_clusters]]
cluster = {{ .cluster | quote }}
rpc_urls = [{{ range $i, $u := .rpcUrls }}{{ if $i }}, {{ end }}{{ $u | quote }}{{ end }}]
{{- if $.withSettings }}
compute_unit_price_micro_lamports = {{ int64 (default 0 .computeUnitPriceMicroLamports) }}
{{- if .maxComputeUnitPriceMicroLamports }}
max_compute_unit_price_micro_lamports = {{ int64 .maxComputeUnitPriceMicroLamports }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Probes on a gRPC health port (.port). Liveness and startup ask the process's own name
     (""); readiness asks .readiness when given: the gateway's public service, which turns
     NOT_SERVING when the gateway begins to shut down, so the Pod leaves its Services first. */}}
{{- define "sigcast.probes" -}}
startupProbe:
  grpc:
    port: {{ .port }}
  periodSeconds: 2
  failureThreshold: 60
readinessProbe:
  grpc:
    port: {{ .port }}
    {{- with .readiness }}
    service: {{ . | quote }}
    {{- end }}
  periodSeconds: 5
  failureThreshold: 2
livenessProbe:
  grpc:
    port: {{ .port }}
  periodSeconds: 10
  failureThreshold: 3
{{- end -}}

{{/* Copies the FoundationDB cluster file from the operator's ConfigMap into a writable
     volume: the client rewrites it when the coordinators change. */}}
{{- define "sigcast.fdbInit" -}}
- name: fdb-cluster-file
  image: {{ include "sigcast.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command: ["cp", "/etc/foundationdb-config/cluster-file", "/var/fdb/fdb.cluster"]
  securityContext:
    {{- toYaml .Values.securityContext | nindent 4 }}
  resources:
    requests: {cpu: 10m, memory: 16Mi}
    limits: {cpu: 100m, memory: 32Mi}
  volumeMounts:
    - name: fdb-config
      mountPath: /etc/foundationdb-config
      readOnly: true
    - name: fdb
      mountPath: /var/fdb
{{- end -}}

{{- define "sigcast.fdbVolumes" -}}
- name: fdb-config
  configMap:
    name: {{ default (printf "%s-config" .Values.store.foundationdb.clusterName) .Values.store.foundationdb.configMapName }}
    items:
      - key: {{ .Values.store.foundationdb.configMapKey }}
        path: cluster-file
- name: fdb
  emptyDir: {}
{{- end -}}

{{/* Volumes and mounts holding the signer's keys: only the signer container mounts them. */}}
{{- define "sigcast.signerKeyVolumes" -}}
- name: keystores
  secret:
    secretName: {{ .Values.signer.keys.keystore.secretName }}
    defaultMode: 0400
- name: passphrase
  secret:
    secretName: {{ .Values.signer.keys.passphrase.secretName }}
    defaultMode: 0400
    items:
      - key: {{ .Values.signer.keys.passphrase.key }}
        path: passphrase
{{- if .Values.signer.keys.pkcs11.enabled }}
- name: pkcs11-pin
  secret:
    secretName: {{ .Values.signer.keys.pkcs11.pin.secretName }}
    defaultMode: 0400
    items:
      - key: {{ .Values.signer.keys.pkcs11.pin.key }}
        path: pin
{{- if .Values.signer.keys.pkcs11.configSecretName }}
- name: pkcs11-config
  secret:
    secretName: {{ .Values.signer.keys.pkcs11.configSecretName }}
    defaultMode: 0400
{{- end }}
{{- end }}
{{- end -}}

{{- define "sigcast.signerKeyMounts" -}}
- name: keystores
  mountPath: /var/run/sigcast/keystores
  readOnly: true
- name: passphrase
  mountPath: /var/run/sigcast/passphrase
  readOnly: true
{{- if .Values.signer.keys.pkcs11.enabled }}
- name: pkcs11-pin
  mountPath: /var/run/sigcast/pkcs11-pin
  readOnly: true
{{- if .Values.signer.keys.pkcs11.configSecretName }}
- name: pkcs11-config
  mountPath: /etc/sigcast/pkcs11
  readOnly: true
{{- end }}
{{- end }}
{{- end -}}

{{/* The signer's key settings. */}}
{{- define "sigcast.signerKeysToml" -}}
keystore_dir = "/var/run/sigcast/keystores"
passphrase_file = "/var/run/sigcast/passphrase/passphrase"
{{- end -}}

{{- define "sigcast.signerTokenToml" -}}
{{- if .Values.signer.keys.pkcs11.enabled }}

[pkcs11]
module = {{ .Values.signer.keys.pkcs11.module | quote }}
token_label = {{ .Values.signer.keys.pkcs11.tokenLabel | quote }}
pin_file = "/var/run/sigcast/pkcs11-pin/pin"
{{- end }}
{{- end -}}

{{- define "sigcast.pod" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
terminationGracePeriodSeconds: {{ .Values.shutdown.terminationGracePeriodSeconds }}
{{- end -}}

{{/* A pause before SIGTERM, while the Pod leaves its Services' endpoints. */}}
{{- define "sigcast.preStop" -}}
lifecycle:
  preStop:
    exec:
      command: ["sleep", "{{ .Values.shutdown.preStopSleepSeconds }}"]
{{- end -}}
