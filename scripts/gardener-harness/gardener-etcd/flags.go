package main

import (
	"errors"
	"flag"
	"fmt"
	"time"
)

type flags struct {
	kubeconfig      string
	timestamp       string // check/wait: the gardener.cloud/timestamp the deploy wrote
	expectTimestamp string // scale
	replicasScale   int
	timeout         time.Duration
	interval        time.Duration
	wait            bool
	cleanup         bool
	shoot           shoot
}

func parseFlags(cmd string, args []string) (*flags, error) {
	f := &flags{}
	fs := flag.NewFlagSet("gardener-etcd "+cmd, flag.ContinueOnError)
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig of the seed (required)")
	fs.StringVar(&f.shoot.namespace, "namespace", "", "the shoot's control-plane namespace, e.g. shoot--project--name (required)")
	fs.DurationVar(&f.timeout, "timeout", 5*time.Minute, "wait/--wait: give up after this long (waiter.go DefaultTimeout)")
	fs.DurationVar(&f.interval, "interval", 5*time.Second, "wait/--wait: poll interval (waiter.go DefaultInterval)")
	switch cmd {
	case "deploy", "redeploy":
		s := &f.shoot
		var rotationStart string
		fs.StringVar(&s.uid, "shoot-uid", "", "Shoot.status.uid, seeds the defragmentation schedule (default: the namespace)")
		fs.StringVar(&s.purpose, "purpose", "evaluation", "Shoot.spec.purpose (production/infrastructure: VPA evictions never)")
		fs.BoolVar(&s.ha, "ha", true, "high-availability control plane (3 replicas, peer TLS)")
		replicas := fs.Int("replicas", 0, "spec.replicas gardenlet asks for (0: 3 with --ha, else 1)")
		fs.StringVar(&s.storageCapacity, "storage-capacity", "25Gi", "etcd-main's volume size (Botanist.GetValidVolumeSize)")
		fs.StringVar(&s.storageClass, "storage-class", "", "spec.storageClass (gardenlet sets none)")
		fs.StringVar(&s.memberNamePrefix, "member-name-prefix", "", "the seed's name, as gardenlet sets it with its UpgradeEtcdVersion gate on (create only)")
		fs.StringVar(&s.windowBegin, "maintenance-begin", "220000+0000", "Shoot.spec.maintenance.timeWindow.begin")
		fs.StringVar(&s.windowEnd, "maintenance-end", "230000+0000", "Shoot.spec.maintenance.timeWindow.end")
		fs.StringVar(&s.caRotationPhase, "ca-rotation-phase", "", "the shoot's CA rotation phase (Preparing, Prepared, Completing, Completed)")
		fs.StringVar(&rotationStart, "ca-rotation-started", "", "RFC 3339 time the CA rotation was initiated (empty: never rotated)")
		fs.BoolVar(&f.wait, "wait", false, "after Deploy, run the component's Wait (needs etcd-druid)")
		fs.BoolVar(&f.cleanup, "cleanup", false, "after Deploy, run the secrets manager's Cleanup (deletes secrets of identity gardenlet this run did not generate)")
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		s.replicas = int32(*replicas)
		if s.uid == "" {
			s.uid = s.namespace
		}
		if rotationStart != "" {
			t, err := time.Parse(time.RFC3339, rotationStart)
			if err != nil {
				return nil, fmt.Errorf("--ca-rotation-started: %w", err)
			}
			s.caRotationStart = t
		}
	case "check", "wait":
		fs.StringVar(&f.timestamp, "timestamp", "", "the gardener.cloud/timestamp the deploy wrote (the waiter's freshness guard)")
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
	case "scale":
		fs.IntVar(&f.replicasScale, "replicas", -1, "the replicas to scale to (required)")
		fs.StringVar(&f.expectTimestamp, "expect-timestamp", "", "the gardener.cloud/timestamp gardenlet last wrote (Scale refuses another)")
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if f.replicasScale < 0 {
			return nil, errors.New("scale: --replicas is required")
		}
	default:
		return nil, fmt.Errorf("unknown command %q (deploy|redeploy|check|wait|scale)", cmd)
	}
	if fs.NArg() != 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if f.kubeconfig == "" || f.shoot.namespace == "" {
		return nil, errors.New("--kubeconfig and --namespace are required")
	}
	return f, nil
}
