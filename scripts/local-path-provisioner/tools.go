//go:build tools

// Package tools pins the one command this module builds (scripts/build-go-tool.sh).
package tools

import _ "github.com/rancher/local-path-provisioner"
