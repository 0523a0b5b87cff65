{{/*
Derived values. Every seed fact is read from what gardenlet injects (`gardener.seed.*`, see
README.md) and falls back to `.Values.seed` for installs by hand.
*/}}

{{- define "isthmus.gardenerSeed" -}}
{{- $g := .Values.gardener | default dict -}}
{{- toJson ($g.seed | default dict) -}}
{{- end -}}

{{- define "isthmus.seedName" -}}
{{- $s := include "isthmus.gardenerSeed" . | fromJson -}}
{{- $s.name | default .Values.seed.name -}}
{{- end -}}

{{/* The seed's ingress domain: gardener.seed.ingressDomain, else gardener.seed.spec.ingress.domain. */}}
{{- define "isthmus.ingressDomain" -}}
{{- $s := include "isthmus.gardenerSeed" . | fromJson -}}
{{- $s.ingressDomain | default (dig "spec" "ingress" "domain" "" $s) | default .Values.seed.ingressDomain -}}
{{- end -}}

{{/* The seed's spec.settings.loadBalancerServices (JSON object, {} if unset). */}}
{{- define "isthmus.seedLoadBalancer" -}}
{{- $s := include "isthmus.gardenerSeed" . | fromJson -}}
{{- toJson (dig "spec" "settings" "loadBalancerServices" dict $s) -}}
{{- end -}}

{{- define "isthmus.externalTrafficPolicy" -}}
{{- $lb := include "isthmus.seedLoadBalancer" . | fromJson -}}
{{- .Values.proxy.service.externalTrafficPolicy | default $lb.externalTrafficPolicy | default "Local" -}}
{{- end -}}

{{- define "isthmus.loadBalancerClass" -}}
{{- $lb := include "isthmus.seedLoadBalancer" . | fromJson -}}
{{- .Values.proxy.service.loadBalancerClass | default $lb.class | default "" -}}
{{- end -}}

{{/* "true" when the listeners accept PROXY headers: the explicit value, else the seed's setting. */}}
{{- define "isthmus.proxyProtocol" -}}
{{- $lb := include "isthmus.seedLoadBalancer" . | fromJson -}}
{{- $v := .Values.proxy.proxyProtocol.enabled -}}
{{- if kindIs "bool" $v -}}{{ $v }}
{{- else if eq (toString $v) "" -}}{{ dig "proxyProtocol" "allowed" false $lb }}
{{- else -}}{{ fail (printf "proxy.proxyProtocol.enabled: want true, false or empty (the seed's setting), got %q" (toString $v)) }}
{{- end -}}
{{- end -}}

{{/*
The load balancer's addresses whose PROXY headers count (JSON list): proxy.proxyProtocol.trustedProxies
only. Not the seed's node network: any hostNetwork pod there could forge a client address
past every allow-list. A catch-all range is refused.
*/}}
{{- define "isthmus.trustedProxies" -}}
{{- $list := .Values.proxy.proxyProtocol.trustedProxies | default list -}}
{{- range $list -}}
{{- if has (toString .) (list "0.0.0.0/0" "::/0") -}}
{{- fail (printf "proxy.proxyProtocol.trustedProxies: %s trusts every address to name any client: list the load balancer's own address ranges" .) -}}
{{- end -}}
{{- end -}}
{{- toJson $list -}}
{{- end -}}

{{/*
The proxy's ports as a JSON list of {name, port (load balancer), target (listener)}:
member i on peer 2380+i and client 2379-i, or, with the seedIngress scheme, load-balancer
ports 2380+i and 2379 onto listeners 12380+i and 12379; then the VPN port.
*/}}
{{- define "isthmus.lbPorts" -}}
{{- $m := int .Values.exposure.members -}}
{{- if or (lt $m 1) (gt $m 10) -}}{{ fail (printf "exposure.members: want 1 to 10 (the EtcdMigration CRD's range), got %d" $m) }}{{- end -}}
{{- $ports := list -}}
{{- if eq .Values.exposure.scheme "perMemberRecords" -}}
{{- range $i := until $m -}}
{{- $ports = append $ports (dict "name" (printf "peer-%d" (add 2380 $i)) "port" (add 2380 $i) "target" (add 2380 $i)) -}}
{{- $ports = append $ports (dict "name" (printf "client-%d" (sub 2379 $i)) "port" (sub 2379 $i) "target" (sub 2379 $i)) -}}
{{- end -}}
{{- else if eq .Values.exposure.scheme "seedIngress" -}}
{{- if not (include "isthmus.ingressDomain" .) -}}{{ fail "exposure.scheme seedIngress needs the seed's ingress domain (gardener.seed.ingressDomain, or seed.ingressDomain)" }}{{- end -}}
{{- range $i := until $m -}}
{{- $ports = append $ports (dict "name" (printf "peer-%d" (add 12380 $i)) "port" (add 2380 $i) "target" (add 12380 $i)) -}}
{{- end -}}
{{- $ports = append $ports (dict "name" "client-12379" "port" 2379 "target" 12379) -}}
{{- else -}}
{{ fail (printf "exposure.scheme: want perMemberRecords or seedIngress, got %q" .Values.exposure.scheme) }}
{{- end -}}
{{- $v := int .Values.proxy.vpnPort -}}
{{- $ports = append $ports (dict "name" (printf "vpn-%d" $v) "port" $v "target" $v) -}}
{{- toJson $ports -}}
{{- end -}}

{{/*
Every port a proxy pod listens on (JSON list of {name, port}): the controller always binds the
GEP scheme's listeners (its --members), the seedIngress scheme adds its own, then the VPN.
*/}}
{{- define "isthmus.containerPorts" -}}
{{- $m := int .Values.exposure.members -}}
{{- $ports := list -}}
{{- range $i := until $m -}}
{{- $ports = append $ports (dict "name" (printf "peer-%d" (add 2380 $i)) "port" (add 2380 $i)) -}}
{{- $ports = append $ports (dict "name" (printf "client-%d" (sub 2379 $i)) "port" (sub 2379 $i)) -}}
{{- end -}}
{{- if eq .Values.exposure.scheme "seedIngress" -}}
{{- range $i := until $m -}}
{{- $ports = append $ports (dict "name" (printf "peer-%d" (add 12380 $i)) "port" (add 12380 $i)) -}}
{{- end -}}
{{- $ports = append $ports (dict "name" "client-12379" "port" 12379) -}}
{{- end -}}
{{- $v := int .Values.proxy.vpnPort -}}
{{- $ports = append $ports (dict "name" (printf "vpn-%d" $v) "port" $v) -}}
{{- toJson $ports -}}
{{- end -}}

{{- define "isthmus.labels" -}}
app.kubernetes.io/part-of: isthmus
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* repository:tag, and @digest when image.digest is set (the runtime then pulls exactly that image; the tag only documents it). */}}
{{- define "isthmus.image" -}}
{{- $ref := printf "%s:%s" .Values.image.repository (toString (.Values.image.tag | default .Chart.AppVersion)) -}}
{{- with .Values.image.digest -}}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" .) -}}{{ fail (printf "image.digest: want sha256:<64 hex digits>, got %q" .) }}{{- end -}}
{{- $ref = printf "%s@%s" $ref . -}}
{{- end -}}
{{ $ref }}
{{- end -}}

{{/* The pod security context every isthmus pod shares (non-root, RuntimeDefault). */}}
{{- define "isthmus.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "isthmus.containerSecurityContext" -}}
allowPrivilegeEscalation: false
privileged: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* The label that lets a pod reach a Service port through gardener-resource-manager's policies. */}}
{{- define "isthmus.toShootsLabel" -}}
networking.resources.gardener.cloud/to-{{ .alias }}-{{ .service }}-tcp-{{ .port }}
{{- end -}}

{{/*
The addresses whose PROXY v2 header the tunnel servers believe (JSON list, the controller's
--tunnel-trusted-proxies): tunnel.trustedProxies, else the seed's pod network (the proxies dial
from their pod addresses; only proxy pods reach the agents' port). Empty without either: the
controller then refuses a migration whose VPN route sends the header.
*/}}
{{- define "isthmus.tunnelTrustedProxies" -}}
{{- $s := include "isthmus.gardenerSeed" . | fromJson -}}
{{- $list := .Values.tunnel.trustedProxies -}}
{{- if and (not $list) (dig "networks" "pods" "" $s) -}}
{{- $list = list (dig "networks" "pods" "" $s) -}}
{{- end -}}
{{- toJson ($list | default list) -}}
{{- end -}}

{{/* The tunnel servers' agents port: the controller's (isthmus_controller::tunnel_server::AGENTS_PORT). */}}
{{- define "isthmus.tunnelAgentPort" -}}9443{{- end -}}

{{/* "true" when gardenlet installs the chart: it injects gardener.seed (README.md). */}}
{{- define "isthmus.onGardener" -}}
{{- $s := include "isthmus.gardenerSeed" . | fromJson -}}
{{- if $s }}true{{ end -}}
{{- end -}}

{{/*
The labels that select the release namespace (JSON object). gardenlet's namespace is
`extension-<installation>` and changes with every (re)install, so under gardenlet it is selected
by the registration label gardenlet puts on it (the registration's name is the release name);
by its name otherwise.
*/}}
{{- define "isthmus.ownNamespaceLabels" -}}
{{- if include "isthmus.onGardener" . -}}
{{- toJson (dict "controllerregistration.core.gardener.cloud/name" .Release.Name) -}}
{{- else -}}
{{- toJson (dict "kubernetes.io/metadata.name" .Release.Namespace) -}}
{{- end -}}
{{- end -}}

{{/*
The proxy Service's IP families (JSON list): proxy.service.ipFamilies, else as gardenlet sets
up istio-ingressgateway: [IPv6, IPv4] on a dual-stack seed (gardener.seed.networks.ipFamilies
holds both), else none (the cluster's default family).
*/}}
{{- define "isthmus.ipFamilies" -}}
{{- $s := include "isthmus.gardenerSeed" . | fromJson -}}
{{- $seed := dig "networks" "ipFamilies" list $s | default (dig "spec" "networks" "ipFamilies" list $s) -}}
{{- $list := .Values.proxy.service.ipFamilies | default list -}}
{{- if and (not $list) (has "IPv4" $seed) (has "IPv6" $seed) -}}
{{- $list = list "IPv6" "IPv4" -}}
{{- end -}}
{{- range $list -}}
{{- if not (has . (list "IPv4" "IPv6")) -}}{{ fail (printf "proxy.service.ipFamilies: want IPv4 or IPv6, got %q" .) }}{{- end -}}
{{- end -}}
{{- toJson $list -}}
{{- end -}}

{{/* The proxy Service's ipFamilyPolicy: proxy.service.ipFamilyPolicy, else PreferDualStack with two families, else none. */}}
{{- define "isthmus.ipFamilyPolicy" -}}
{{- $families := include "isthmus.ipFamilies" . | fromJsonArray -}}
{{- $p := .Values.proxy.service.ipFamilyPolicy | default (ternary "PreferDualStack" "" (eq (len $families) 2)) -}}
{{- if and $p (not (has $p (list "SingleStack" "PreferDualStack" "RequireDualStack"))) -}}
{{- fail (printf "proxy.service.ipFamilyPolicy: want SingleStack, PreferDualStack or RequireDualStack, got %q" $p) -}}
{{- end -}}
{{- $p -}}
{{- end -}}

{{/*
The wildcard the pods listen on: `::` (one dual-stack socket, IPv4 clients as ::ffff:a.b.c.d,
which the proxy's allow-lists match as IPv4) when the seed or the Service has IPv6, so the
Service's IPv6 traffic and probes of an IPv6 pod address find a listener; else 0.0.0.0.
*/}}
{{- define "isthmus.listenIP" -}}
{{- $s := include "isthmus.gardenerSeed" . | fromJson -}}
{{- $seed := dig "networks" "ipFamilies" list $s | default (dig "spec" "networks" "ipFamilies" list $s) -}}
{{- $all := concat $seed (include "isthmus.ipFamilies" . | fromJsonArray) -}}
{{- ternary "::" "0.0.0.0" (has "IPv6" $all) -}}
{{- end -}}

{{/* `<listen ip>:<port>` (brackets for IPv6); dict: root, port. */}}
{{- define "isthmus.listenAddress" -}}
{{- $ip := include "isthmus.listenIP" .root -}}
{{- if contains ":" $ip -}}[{{ $ip }}]:{{ .port }}{{- else -}}{{ $ip }}:{{ .port }}{{- end -}}
{{- end -}}

{{/* isthmus.ownNamespaceLabels as `key=value,…` (the controller's --proxy-namespace-labels). */}}
{{- define "isthmus.ownNamespaceLabelPairs" -}}
{{- $pairs := list -}}
{{- range $k, $v := include "isthmus.ownNamespaceLabels" . | fromJson -}}
{{- $pairs = append $pairs (printf "%s=%s" $k $v) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}
