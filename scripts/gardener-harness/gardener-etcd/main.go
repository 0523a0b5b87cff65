// Command gardener-etcd deploys a shoot's etcd-main with Gardener's own code, as gardenlet does
// for an HA shoot, and asks Gardener's own health checks about it. It is a test harness for
// isthmus (issue 44 point 2): Gardener v1.149.3, pinned by go.mod/go.sum here, built by
// scripts/build-gardener-harness.sh into $ISTHMUS_CACHE/gardener-harness-v1.149.3/gardener-etcd.
//
//	gardener-etcd deploy   --kubeconfig K --namespace N [shoot flags] [--wait] [--cleanup]
//	gardener-etcd redeploy ...same; the Etcd must exist (a later shoot reconcile)
//	gardener-etcd check    --kubeconfig K --namespace N [--timestamp T]
//	gardener-etcd wait     --kubeconfig K --namespace N [--timestamp T] [--timeout D] [--interval D]
//	gardener-etcd scale    --kubeconfig K --namespace N --replicas R [--expect-timestamp T]
//	gardener-etcd version  [--source HASH] the pinned gardener and etcd-druid API versions it was built from
//
// Each prints one JSON document on stdout (logs go to stderr) and exits 0 when done and
// healthy, 1 when an oracle says unhealthy, 2 on any other error ({"error": ...}).
//
// What each mirrors (paths in github.com/gardener/gardener@v1.149.3):
//   - deploy/redeploy: gardenlet.go here (botanist New, secrets.go, etcd.go), then
//     pkg/component/etcd/etcd/etcd.go Deploy: the Etcd (merge patch of a whole new spec.etcd),
//     its secrets through the secrets manager (tls.go), the VPA, ServiceMonitor and
//     PrometheusRule. The secrets manager is rebuilt from the cluster on every run, as every
//     shoot reconcile does, so a redeploy finds the same secrets. --wait runs the component's
//     Wait after it in the same process (the flow's WaitUntilEtcdsReady), --cleanup the secrets
//     manager's Cleanup (the end of a successful reconcile flow).
//   - check: pkg/component/etcd/etcd/waiter.go CheckEtcdObject (what Wait polls) and
//     pkg/utils/kubernetes/health/etcd.go CheckEtcd (the care controller's check), once, on the
//     live object; --timestamp adds the waiter's guard that gardener.cloud/timestamp is the
//     value the deploy wrote (pkg/extensions/customresources.go).
//   - wait: the component's Wait: WaitUntilObjectReadyWithHealthFunction with CheckEtcdObject
//     and the timestamp guard (5 s interval, 5 min timeout by default, as waiter.go).
//   - scale: the component's Scale. gardenlet calls it on the component it deployed with, whose
//     in-memory object carries the timestamp it last wrote; a fresh process has none, so the
//     harness loads the live object (Get) and applies Scale's own timestamp guard with the
//     value given as --expect-timestamp.
//
// Built on exactly the modules Gardener v1.149.3 is released with, etcd-druid api v0.37.1
// included (whose EtcdConfig has no bootstrapWithExistingCluster). It cannot be built on api
// v0.38.1: that drops DisableEtcdRuntimeComponentCreationAnnotation and
// IsEtcdRuntimeComponentCreationEnabled, which etcd.go and waiter.go use.
//
// Left out: the backup (no BackupConfig, as for a shoot without a backup bucket), the restore
// phase, etcd-events, the CAs that do not touch the etcd, the image vector (v1.149.3's Deploy
// sets no images: etcd-druid picks them from its own image vector).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	druidcorev1alpha1 "github.com/gardener/etcd-druid/api/core/v1alpha1"
	"github.com/go-logr/logr/funcr"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"k8s.io/apimachinery/pkg/runtime"
	vpaautoscalingv1 "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"isthmus.invalid/gardener-harness/harness"
)

// errUnhealthy marks an oracle's verdict (exit 1) as opposed to a failure to ask (exit 2).
var errUnhealthy = errors.New("unhealthy")

func main() { harness.Main("gardener-etcd", errUnhealthy, run) }

func run(args []string) (map[string]any, error) {
	if len(args) == 0 {
		return nil, errors.New("usage: gardener-etcd deploy|redeploy|check|wait|scale --kubeconfig K --namespace N [flags] (-h for flags), or version")
	}
	if args[0] == "version" {
		// The pinned gardener and etcd-druid API (the build script's check that the cached
		// binary is the pinned one).
		return harness.Version(args[1:], map[string]string{
			"gardener":     "github.com/gardener/gardener",
			"etcdDruidAPI": "github.com/gardener/etcd-druid/api",
		})
	}
	f, err := parseFlags(args[0], args[1:])
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout+time.Minute)
	defer cancel()
	log := funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, prefix, args) }, funcr.Options{})
	cfg, c, err := connect(f.kubeconfig)
	if err != nil {
		return nil, err
	}
	switch args[0] {
	case "deploy", "redeploy":
		return deploy(ctx, log, cfg, c, f, args[0] == "redeploy")
	case "check":
		return check(ctx, c, f)
	case "wait":
		return wait(ctx, log, c, f)
	case "scale":
		return scale(ctx, log, c, f)
	}
	return nil, fmt.Errorf("unknown command %q", args[0])
}

// connect builds the client with the types Deploy writes (gardenlet's seed client knows more).
func connect(kubeconfig string) (*rest.Config, client.Client, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, druidcorev1alpha1.AddToScheme,
		vpaautoscalingv1.AddToScheme, monitoringv1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			return nil, nil, err
		}
	}
	return harness.Connect(kubeconfig, scheme)
}
