package main

// What gardenlet does for a shoot's etcd-main, rebuilt from gardener v1.149.3's own code:
//   - pkg/gardenlet/operation/botanist/botanist.go  New: the secrets manager (identity
//     "gardenlet", the shoot's control-plane namespace, the CA rotation start times)
//   - pkg/gardenlet/operation/botanist/secrets.go   generateCertificateAuthorities and
//     caCertGenerateOptionsFor: ca-etcd and ca-etcd-peer (the other CAs gardenlet generates
//     there do not touch the etcd and are left out)
//   - pkg/gardenlet/operation/botanist/etcd.go      DefaultEtcd (the Values), DeployEtcd
//     (RolloutPeerCA first while a CA rotation prepares), getEtcdReplicas
//   - pkg/gardenlet/operation/botanist/components.go  etcd-main is ClassImportant

import (
	"context"
	"fmt"
	"time"

	"github.com/Masterminds/semver/v3"
	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"
	v1beta1constants "github.com/gardener/gardener/pkg/apis/core/v1beta1/constants"
	"github.com/gardener/gardener/pkg/apis/utils/timewindow"
	"github.com/gardener/gardener/pkg/component/etcd/etcd"
	secretsutils "github.com/gardener/gardener/pkg/utils/secrets"
	secretsmanager "github.com/gardener/gardener/pkg/utils/secrets/manager"
)

// shoot is the part of a Shoot (and of gardenlet's configuration) that decides etcd-main.
type shoot struct {
	namespace        string
	uid              string // Shoot.status.uid: seeds the defragmentation schedule
	purpose          string // Shoot.spec.purpose: "production" makes VPA evictions "never"
	ha               bool   // Shoot.spec.controlPlane.highAvailability set
	replicas         int32  // 0: gardenlet's getEtcdReplicas (3 with HA, else 1)
	storageCapacity  string // Botanist.GetValidVolumeSize("25Gi")
	storageClass     string // not set by gardenlet; "" keeps it nil
	memberNamePrefix string // the seed's name when gardenlet's UpgradeEtcdVersion gate is on
	windowBegin      string // Shoot.spec.maintenance.timeWindow
	windowEnd        string
	caRotationPhase  string    // Shoot.status.credentials.rotation.certificateAuthorities.phase
	caRotationStart  time.Time // ... .lastInitiationTime; zero: never rotated
}

// secretsManager is botanist.New's secrets manager followed by generateCertificateAuthorities
// for the etcd CAs: the same identity and namespace, so every run finds the secrets the
// previous one wrote (a shoot reconcile does exactly this on every run).
func secretsManager(ctx context.Context, log logr.Logger, c client.Client, s shoot) (secretsmanager.Interface, error) {
	caNames := []string{v1beta1constants.SecretNameCAETCD, v1beta1constants.SecretNameCAETCDPeer}
	times := map[string]time.Time{}
	if !s.caRotationStart.IsZero() {
		for _, n := range caNames {
			times[n] = s.caRotationStart
		}
	}
	sm, err := secretsmanager.New(ctx, log.WithName("secretsmanager"), clock.RealClock{}, c,
		v1beta1constants.SecretManagerIdentityGardenlet,
		secretsmanager.WithSecretNamesToTimes(times),
		secretsmanager.WithNamespaces(s.namespace))
	if err != nil {
		return nil, fmt.Errorf("failed to instantiate secrets manager: %w", err)
	}
	configs := []*secretsutils.CertificateSecretConfig{
		{Name: v1beta1constants.SecretNameCAETCD, CommonName: "etcd", CertType: secretsutils.CACert},
		{Name: v1beta1constants.SecretNameCAETCDPeer, CommonName: "etcd-peer", CertType: secretsutils.CACert},
	}
	for _, config := range configs {
		opts := []secretsmanager.GenerateOption{secretsmanager.Persist(), secretsmanager.Rotate(secretsmanager.KeepOld)}
		if gardencorev1beta1.CredentialsRotationPhase(s.caRotationPhase) == gardencorev1beta1.RotationCompleting {
			opts = append(opts, secretsmanager.IgnoreOldSecrets())
		}
		if s.caRotationStart.IsZero() {
			opts = append(opts, secretsmanager.IgnoreConfigChecksumForCASecretName())
		}
		if _, err := sm.Generate(ctx, config, opts...); err != nil {
			return nil, err
		}
	}
	return sm, nil
}

// etcdMain is Botanist.DefaultEtcd(ETCDRoleMain, ClassImportant) for a shoot that is not
// hibernated, not self-hosted and has no backup (SetBackupConfig is never called).
func etcdMain(log logr.Logger, cfg *rest.Config, c client.Client, sm secretsmanager.Interface, s shoot) (etcd.Interface, error) {
	runtimeVersion, err := serverVersion(cfg)
	if err != nil {
		return nil, err
	}
	defrag, err := timewindow.DetermineSchedule("%d %d * * *", s.windowBegin, s.windowEnd,
		types.UID(s.uid), metav1.Time{}, timewindow.RandomizeWithinTimeWindow)
	if err != nil {
		return nil, err
	}
	replicas := s.replicas
	if replicas == 0 {
		replicas = 1
		if s.ha {
			replicas = 3
		}
	}
	eviction := v1beta1constants.EvictionRequirementInMaintenanceWindowOnly
	if s.purpose == string(gardencorev1beta1.ShootPurposeProduction) || s.purpose == string(gardencorev1beta1.ShootPurposeInfrastructure) {
		eviction = v1beta1constants.EvictionRequirementNever
	}
	values := etcd.Values{
		Role:                     v1beta1constants.ETCDRoleMain,
		Class:                    etcd.ClassImportant,
		CARotationPhase:          gardencorev1beta1.CredentialsRotationPhase(s.caRotationPhase),
		RuntimeKubernetesVersion: runtimeVersion,
		MaintenanceTimeWindow:    gardencorev1beta1.MaintenanceTimeWindow{Begin: s.windowBegin, End: s.windowEnd},
		EvictionRequirement:      &eviction,
		PriorityClassName:        v1beta1constants.PriorityClassNameShootControlPlane500,
		HighAvailabilityEnabled:  s.ha,
		MemberNamePrefix:         s.memberNamePrefix,
		DefragmentationSchedule:  &defrag,
		Replicas:                 &replicas,
		StorageCapacity:          s.storageCapacity,
	}
	if s.storageClass != "" {
		values.StorageClassName = &s.storageClass
	}
	return etcd.New(log, c, s.namespace, sm, values), nil
}

// deployEtcd is Botanist.DeployEtcd without a backup and without the restore phase.
func deployEtcd(ctx context.Context, e etcd.Interface, s shoot) error {
	switch gardencorev1beta1.CredentialsRotationPhase(s.caRotationPhase) {
	case gardencorev1beta1.RotationPreparing, gardencorev1beta1.RotationPreparingWithoutWorkersRollout:
		if err := e.RolloutPeerCA(ctx); err != nil {
			return err
		}
	}
	return e.Deploy(ctx)
}

// serverVersion is the seed's Kubernetes version (Shoot.RuntimeKubernetesVersion).
func serverVersion(cfg *rest.Config) (*semver.Version, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	info, err := dc.ServerVersion()
	if err != nil {
		return nil, fmt.Errorf("reading the server version: %w", err)
	}
	return semver.NewVersion(info.GitVersion)
}
