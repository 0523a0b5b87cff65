package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

type flags struct {
	kubeconfig string
	chart      string
	name       string
	values     []string
	timeout    time.Duration
	interval   time.Duration
}

// valueFiles is a repeatable --values.
type valueFiles []string

func (v *valueFiles) String() string     { return strings.Join(*v, ",") }
func (v *valueFiles) Set(s string) error { *v = append(*v, s); return nil }

func parseFlags(cmd string, args []string) (flags, error) {
	var f flags
	fs := flag.NewFlagSet("gardenlet-install "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "the seed cluster's kubeconfig (required)")
	fs.StringVar(&f.name, "name", "", "the ControllerRegistration's name (= the Extension's): the release name (required)")
	var values valueFiles
	if cmd == "install" {
		fs.StringVar(&f.chart, "chart", "", "the packaged chart archive (.tgz; what the Extension's OCI reference holds) (required)")
		fs.Var(&values, "values", "a values file, repeatable, merged in order: its `gardener` key is what gardenlet injects, the rest the Extension's values")
	}
	// gardenlet requeues every 5 s while the ManagedResource or the namespace is still there.
	fs.DurationVar(&f.interval, "interval", 5*time.Second, "uninstall: how often to look whether the ManagedResource and the namespace are gone")
	fs.DurationVar(&f.timeout, "timeout", 5*time.Minute, "uninstall: how long to wait for them")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stderr)
			fs.PrintDefaults()
		}
		return f, err
	}
	if fs.NArg() != 0 {
		return f, fmt.Errorf("%s: unexpected arguments %q", cmd, fs.Args())
	}
	f.values = values
	var missing []string
	if f.kubeconfig == "" {
		missing = append(missing, "--kubeconfig")
	}
	if f.name == "" {
		missing = append(missing, "--name")
	}
	if cmd == "install" && f.chart == "" {
		missing = append(missing, "--chart")
	}
	if len(missing) > 0 {
		return f, fmt.Errorf("%s: missing %s", cmd, strings.Join(missing, ", "))
	}
	return f, nil
}
