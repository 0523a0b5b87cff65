//go:build tools

// Package tools pins the one command this module builds (scripts/build-kube-router.sh).
package tools

import _ "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"
