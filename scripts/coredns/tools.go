//go:build tools

// Package tools pins the one command this module builds (scripts/build-coredns.sh).
package tools

import _ "github.com/coredns/coredns"
