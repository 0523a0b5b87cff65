package main

import (
	"fmt"
	"os"

	"sigs.k8s.io/yaml"
)

// skipPeerClientSAN reports whether the configuration at path asks etcd not to check the SANs
// of its peers' client certificates. etcd-druid v0.38.1 writes
// `peer-transport-security.skip-client-san-verification` for
// `spec.etcd.peerUrlTls.skipClientSANVerification`
// (internal/component/configmap/etcdconfig.go); etcd v3.5's configuration file has no such key
// (embed/config.go securityConfig), so etcd-wrapper turns it into etcd's
// `--experimental-peer-skip-client-san-verification` (gardener/etcd-wrapper#92, as druid's API
// doc of the field says), which is `PeerTLSInfo.SkipClientSANVerify` here. A migration needs it:
// peers reached through a proxy connect from the proxy's address, which no peer certificate
// names.
func skipPeerClientSAN(path string) (bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	var c struct {
		Peer struct {
			Skip bool `json:"skip-client-san-verification"`
		} `json:"peer-transport-security"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	return c.Peer.Skip, nil
}
