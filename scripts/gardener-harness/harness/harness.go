// Package harness is what the two commands of this module share: one JSON document on stdout
// and an exit code that tells a verdict from a failure, the version report the build script's
// freshness check reads, and the client of a kubeconfig.
package harness

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/debug"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Source is the hash of the command's files the build script stamps in (its freshness check).
var Source = "unknown"

// Main runs a command on os.Args and exits: 0 when it is done, 1 when its error wraps verdict
// (an oracle said no), 2 on any other error. Its document goes to stdout, indented; an error
// without one becomes {"error": ...}. Logs and the error go to stderr, prefixed with name.
func Main(name string, verdict error, run func(args []string) (map[string]any, error)) {
	out, err := run(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0) // the flag package printed the usage
	}
	code := 0
	if err != nil {
		code = 2
		if errors.Is(err, verdict) {
			code = 1
		}
		if out == nil {
			out = map[string]any{"error": err.Error()}
		}
		fmt.Fprintln(os.Stderr, name+":", err)
	}
	if out != nil {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			code = 2
		}
	}
	os.Exit(code)
}

// Dep is the version of module path this binary was built with, "unknown" without build
// information or when the binary does not use it.
func Dep(path string) string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, d := range info.Deps {
			if d.Path == path {
				return d.Version
			}
		}
	}
	return "unknown"
}

// Version says what the binary was built from: Go, Source, and the version of each module of
// deps (key: module path), under its key. With --source HASH (the build script's freshness
// check) it fails unless Source is HASH.
func Version(args []string, deps map[string]string) (map[string]any, error) {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	want := fs.String("source", "", "fail unless the binary was built from this source hash")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return nil, errors.New("no build information in the binary")
	}
	out := map[string]any{"go": info.GoVersion, "source": Source}
	for key, path := range deps {
		out[key] = Dep(path)
	}
	if *want != "" && *want != Source {
		return out, fmt.Errorf("built from source %s, not %s", Source, *want)
	}
	return out, nil
}

// Connect builds a client of the cluster of kubeconfig that knows the types of scheme.
func Connect(kubeconfig string, scheme *runtime.Scheme) (*rest.Config, client.Client, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, nil, fmt.Errorf("reading kubeconfig %s: %w", kubeconfig, err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, nil, fmt.Errorf("client of %s: %w", kubeconfig, err)
	}
	return cfg, c, nil
}
