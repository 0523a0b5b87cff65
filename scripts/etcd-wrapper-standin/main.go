// Command etcd-wrapper-standin is the one stand-in left in the etcd pods of the node
// (scripts/cluster.sh): the `etcd` container's entrypoint that etcd-druid v0.38.1's StatefulSet
// runs as `start-etcd --backup-restore-host-port=… --etcd-server-name=… …`. The real one,
// github.com/gardener/etcd-wrapper, is not served as a Go module; this program does exactly its
// part of the contract with etcd-backup-restore and druid, and nothing else, mirroring
// gardener/etcd-wrapper at commit 0d41e79 (the etcd v3.5.27 line druid names
// `etcd-wrapper-next`):
//
//   - main.go, cmd/etcd.go: the `start-etcd` command and its flags, same names and defaults;
//   - internal/bootstrap/bootstrap.go: poll backup-restore's GET /initialization/status until
//     "Successful", triggering GET /initialization/start?mode=sanity|full when it says "New"
//     (sanity only after a graceful exit recorded in /var/etcd/data/exit_code);
//   - internal/brclient/brclient.go: GET /config, written to $HOME/etcd.conf.yaml (0600), and
//     go.etcd.io/etcd/server/v3/embed started from it (umask 0077 first, as app.Setup does);
//   - internal/app/readycheck.go: the wrapper port (9095) serving GET /readyz (200 while a Get of
//     "foo" through the client port succeeds, polled every 2 s — druid's readiness probe) and
//     POST /stop, over TLS when etcd's client URLs are;
//   - internal/signal/signal.go: SIGTERM/SIGINT write the signal's name to the exit-code file,
//     removed again once etcd has started;
//   - the bridge of gardener/etcd-wrapper#92: druid's `skip-client-san-verification` under
//     `peer-transport-security`, which etcd v3.5 does not read, as etcd's
//     --experimental-peer-skip-client-san-verification (peersan.go).
//
// What backup-restore serves at /config reaches etcd unchanged: for a member that joins an
// existing cluster (a scale-up, or a destination `Etcd` with bootstrapWithExistingCluster,
// which backup-restore v0.43.0 adds as a learner itself: pkg/initializer/initializer.go) that is
// `initial-cluster-state: existing` and an `initial-cluster` of the cluster's members and itself
// (pkg/server/httpAPI.go serveConfig). tests/cluster/join.rs shows a destination joining so.
//
// Left out: the wrapper's one-off chmod of files an older release wrote without umask (its own
// TODO says it goes in v0.8.0) and its zap logger configuration (logs are plain lines here).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/api/v3/version"
	"go.etcd.io/etcd/server/v3/embed"
)

// exitCodeFile is types.DefaultExitCodeFilePath upstream.
const exitCodeFile = "/var/etcd/data/exit_code"

type config struct {
	wrapperPort     int
	brHostPort      string
	brTLS           bool
	brCABundle      string
	serverName      string
	clientPort      int
	clientCert      string
	clientKey       string
	etcdReadyTimout time.Duration
}

func main() {
	if len(os.Args) == 2 && os.Args[1] == "--version" {
		fmt.Printf("etcd-wrapper-standin, etcd %s\n", version.Version)
		return
	}
	if len(os.Args) < 2 || os.Args[1] != "start-etcd" {
		fmt.Fprintln(os.Stderr, "usage: etcd-wrapper-standin start-etcd [flags] (the stand-in for gardener/etcd-wrapper's only command)")
		os.Exit(1)
	}
	var c config
	fs := flag.NewFlagSet("start-etcd", flag.ExitOnError)
	fs.IntVar(&c.wrapperPort, "etcd-wrapper-port", 9095, "port of the /readyz and /stop endpoints")
	fs.BoolVar(&c.brTLS, "backup-restore-tls-enabled", false, "talk to backup-restore over TLS")
	fs.StringVar(&c.brHostPort, "backup-restore-host-port", ":8080", "backup-restore's host:port, no scheme")
	fs.StringVar(&c.brCABundle, "backup-restore-ca-cert-bundle-path", "", "CA bundle for backup-restore's TLS")
	fs.StringVar(&c.serverName, "etcd-server-name", "", "host name of etcd's client URL (and its TLS server name)")
	fs.IntVar(&c.clientPort, "etcd-client-port", 2379, "etcd's client port")
	fs.StringVar(&c.clientCert, "etcd-client-cert-path", "", "client certificate for etcd's client TLS")
	fs.StringVar(&c.clientKey, "etcd-client-key-path", "", "client key for etcd's client TLS")
	fs.DurationVar(&c.etcdReadyTimout, "etcd-ready-timeout", 0, "how long to wait for etcd to be ready (0: forever)")
	_ = fs.Parse(os.Args[2:])
	if err := run(c); err != nil {
		log.Fatalf("etcd-wrapper-standin: %v", err)
	}
}

func run(c config) error {
	br, err := newBackupRestore(c)
	if err != nil {
		return err
	}
	ctx, cancel := signalContext()
	defer cancel()

	cfgPath, err := br.initialize(ctx)
	if err != nil {
		return err
	}
	cfg, err := embed.ConfigFromFile(cfgPath)
	if err != nil {
		return fmt.Errorf("etcd configuration from backup-restore: %w", err)
	}
	skip, err := skipPeerClientSAN(cfgPath)
	if err != nil {
		return fmt.Errorf("etcd configuration from backup-restore: %w", err)
	}
	cfg.PeerTLSInfo.SkipClientSANVerify = skip
	syscall.Umask(0o077)

	ready, err := newReadiness(ctx, c, cfg)
	if err != nil {
		return err
	}
	defer ready.close()
	go ready.poll(ctx)
	go ready.serve(cancel)

	etcd, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("starting etcd: %w", err)
	}
	defer etcd.Close()
	if err := waitReady(ctx, etcd, c.etcdReadyTimout); err != nil {
		return err
	}
	if err := os.Remove(exitCodeFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		log.Printf("removing %s: %v", exitCodeFile, err)
	}
	select {
	case <-ctx.Done():
		log.Print("stopping etcd: context cancelled")
	case <-etcd.Server.StopNotify():
		log.Print("etcd server stopped")
	case err := <-etcd.Err():
		log.Printf("etcd error: %v", err)
	}
	return nil
}

func waitReady(ctx context.Context, etcd *embed.Etcd, timeout time.Duration) error {
	var deadline <-chan time.Time
	if timeout > 0 {
		deadline = time.After(timeout)
	}
	select {
	case <-etcd.Server.ReadyNotify():
		log.Print("etcd server is ready to serve client requests")
		return nil
	case <-etcd.Server.StopNotify():
		return errors.New("etcd server stopped before it was ready")
	case <-deadline:
		return fmt.Errorf("etcd not ready after %s", timeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// signalContext is cancelled by SIGTERM or SIGINT, after the signal's name ("terminated",
// "interrupt") is written to the exit-code file: the next start then asks backup-restore for
// a sanity validation only. A second signal exits at once.
func signalContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-ch
		if err := os.WriteFile(exitCodeFile, []byte(sig.String()), 0o600); err != nil {
			log.Printf("recording exit code: %v", err)
		}
		log.Printf("caught %v", sig)
		cancel()
		<-ch
		os.Exit(1)
	}()
	return ctx, cancel
}
