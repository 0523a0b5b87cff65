# Sourced by scripts/cluster.sh: the node's PKI (openssl) and tokens, made once per state dir.
# One CA signs the kube-apiserver's serving certificate and its kubelet client certificate; the
# ServiceAccount key pair signs projected tokens. Components authenticate with static tokens
# (--token-auth-file): one per component, with the user names the default RBAC binds
# (system:kube-controller-manager, system:kube-scheduler, system:kube-proxy, system:node:<node>).

pki_make() {
  local d="$1"
  [[ -f "$d/.done" ]] && return 0
  mkdir -p "$d"
  (
    cd "$d"
    umask 077
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
      -subj "/CN=isthmus-node-ca" -keyout ca.key -out ca.crt 2>/dev/null
    cat > apiserver.ext <<EXT
subjectAltName=DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:$NODE_IP,IP:$API_SERVICE_IP
extendedKeyUsage=serverAuth
EXT
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=kube-apiserver" \
      -keyout apiserver.key -out apiserver.csr 2>/dev/null
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile apiserver.ext -out apiserver.crt 2>/dev/null
    printf 'extendedKeyUsage=clientAuth\n' > client.ext
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
      -subj "/O=system:masters/CN=kube-apiserver-kubelet-client" \
      -keyout kubelet-client.key -out kubelet-client.csr 2>/dev/null
    openssl x509 -req -in kubelet-client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile client.ext -out kubelet-client.crt 2>/dev/null
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out sa.key 2>/dev/null
    openssl pkey -in sa.key -pubout -out sa.pub 2>/dev/null
    : > tokens.csv
    local who
    for who in "admin,admin,system:masters" \
      "kube-controller-manager,system:kube-controller-manager," \
      "kube-scheduler,system:kube-scheduler," \
      "kube-proxy,system:kube-proxy," \
      "kube-router,system:kube-router," \
      "gardener-resource-manager,system:gardener-resource-manager,system:masters" \
      "kubelet,system:node:$NODE_NAME,system:nodes"; do
      IFS=, read -r file user group <<<"$who"
      local token
      token="$(openssl rand -hex 24)"
      echo "$token" > "token-$file"
      # tokens.csv: token,user,uid[,"group1,group2"]
      if [[ -n "$group" ]]; then
        echo "$token,$user,$user,\"$group\"" >> tokens.csv
      else
        echo "$token,$user,$user" >> tokens.csv
      fi
    done
    rm -f ./*.csr ./*.ext ca.srl
  )
  touch "$d/.done"
}

# kubeconfig_make FILE TOKEN-FILE SERVER: a kubeconfig for one component.
kubeconfig_make() {
  local file="$1" token_file="$2" server="$3"
  (umask 077 && cat > "$file") <<EOF2
apiVersion: v1
kind: Config
clusters:
  - name: $NODE_NAME
    cluster:
      server: $server
      certificate-authority: $PKI/ca.crt
      tls-server-name: kubernetes
users:
  - name: user
    user:
      token: $(cat "$token_file")
contexts:
  - name: $NODE_NAME
    context: {cluster: $NODE_NAME, user: user}
current-context: $NODE_NAME
EOF2
}
