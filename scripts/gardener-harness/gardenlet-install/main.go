// Command gardenlet-install installs a seed extension's chart the way gardenlet's
// ControllerInstallation reconciler does, and removes it the way its deletion does: a test
// harness for isthmus (issue 46 point 1), built from Gardener v1.149.3 (go.mod/go.sum here) by
// scripts/build-gardener-harness.sh into $ISTHMUS_CACHE/gardener-harness-v1.149.3/.
//
//	gardenlet-install install   --kubeconfig K --chart C.tgz --name N --values V [--values V...]
//	gardenlet-install uninstall --kubeconfig K --name N [--timeout D] [--interval D]
//	gardenlet-install status    --kubeconfig K --name N
//	gardenlet-install version [--source HASH]
//
// Each prints one JSON document on stdout (logs go to stderr) and exits 0 when done, 1 when
// `status` finds the installation not ready, 2 on any other error ({"error": ...}).
//
// What it mirrors (github.com/gardener/gardener@v1.149.3):
//   - install: pkg/gardenlet/controller/controllerinstallation/controllerinstallation/
//     reconciler.go `reconcile` for a seed (install.go here says step by step).
//   - uninstall: the same file's `delete`: the ManagedResource and its Secret
//     (managedresources.Delete), then, once the resource manager has removed it, the namespace.
//   - status: pkg/gardenlet/controller/controllerinstallation/care/reconciler.go, the
//     ControllerInstallation's Installed/Healthy/Progressing from the ManagedResource's
//     conditions, and what pkg/controllermanager/controller/seed/extensionscheck makes of them
//     for the Seed's ExtensionsReady.
//
// Stand-ins for what needs a garden cluster (gardener-apiserver): the ControllerInstallation
// (gardener-controller-manager creates it with generateName `<registration>-`; here the same
// name generator, and a later install finds it again through its ManagedResource's label), the
// ControllerDeployment's values and the Seed (the --values files: their `gardener` key is what
// gardenlet computes from the Seed, the rest the Extension's values). Not mirrored: the garden
// kubeconfig injection (the Extension does not ask for it), the self-hosted-shoot paths.
package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener/pkg/client/kubernetes"

	"isthmus.invalid/gardener-harness/harness"
)

// errNotReady marks `status`'s verdict (exit 1) as opposed to a failure to ask (exit 2).
var errNotReady = errors.New("not ready")

func main() { harness.Main("gardenlet-install", errNotReady, run) }

func run(args []string) (map[string]any, error) {
	if len(args) == 0 {
		return nil, errors.New("usage: gardenlet-install install|uninstall|status --kubeconfig K --name N [flags] (-h for flags), or version")
	}
	if args[0] == "version" {
		// The build script's freshness check.
		return harness.Version(args[1:], map[string]string{"gardener": "github.com/gardener/gardener"})
	}
	switch args[0] {
	case "install", "uninstall", "status":
	default:
		return nil, fmt.Errorf("unknown command %q (install, uninstall, status, version)", args[0])
	}
	f, err := parseFlags(args[0], args[1:])
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout+time.Minute)
	defer cancel()
	cfg, c, err := connect(f.kubeconfig)
	if err != nil {
		return nil, err
	}
	switch args[0] {
	case "install":
		return install(ctx, cfg, c, f)
	case "uninstall":
		return uninstall(ctx, c, f)
	default:
		return status(ctx, c, f)
	}
}

// gardenerVersion is the Gardener module this binary was built from: the gardenlet it stands
// in for (gardenlet injects its own version as `gardener.version`).
func gardenerVersion() string { return harness.Dep("github.com/gardener/gardener") }

// connect builds the client gardenlet's seed client set has: the seed scheme of Gardener's
// pkg/client/kubernetes (what its chart renderer and managedresources helpers are used with).
func connect(kubeconfig string) (*rest.Config, client.Client, error) {
	return harness.Connect(kubeconfig, kubernetes.SeedScheme)
}
