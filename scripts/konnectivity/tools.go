//go:build tools

// Package tools names the commands this module builds, so that `go mod tidy` keeps their
// dependencies pinned in go.sum.
package tools

import (
	_ "sigs.k8s.io/apiserver-network-proxy/cmd/agent"
	_ "sigs.k8s.io/apiserver-network-proxy/cmd/server"
)
