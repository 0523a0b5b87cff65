package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage/names"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"
	v1beta1constants "github.com/gardener/gardener/pkg/apis/core/v1beta1/constants"
	resourcesv1alpha1 "github.com/gardener/gardener/pkg/apis/resources/v1alpha1"
	"github.com/gardener/gardener/pkg/chartrenderer"
	"github.com/gardener/gardener/pkg/controllerutils"
	ctrlinstutils "github.com/gardener/gardener/pkg/gardenlet/controller/controllerinstallation/utils"
	"github.com/gardener/gardener/pkg/utils"
	gardenerutils "github.com/gardener/gardener/pkg/utils/gardener"
	gardenletutils "github.com/gardener/gardener/pkg/utils/gardener/gardenlet"
	kubernetesutils "github.com/gardener/gardener/pkg/utils/kubernetes"
	"github.com/gardener/gardener/pkg/utils/managedresources"
)

// install is reconciler.go's `reconcile` for a seed, in its order.
func install(ctx context.Context, cfg *rest.Config, c client.Client, f flags) (map[string]any, error) {
	start := time.Now()
	archive, err := os.ReadFile(f.chart)
	if err != nil {
		return nil, err
	}
	vals, err := readValues(f.values)
	if err != nil {
		return nil, err
	}
	s, err := vals.seed()
	if err != nil {
		return nil, err
	}
	seedIsGarden, err := gardenletutils.ClusterIsGarden(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("failed checking whether the seed is the garden cluster at the same time: %w", err)
	}
	name, err := controllerInstallationName(ctx, c, f.name)
	if err != nil {
		return nil, err
	}
	ci := gardenerutils.ManagedResourceNameForControllerInstallation(controllerInstallation(name, f.name))

	// The namespace, labelled as the reconciler labels it.
	namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: gardenerutils.NamespaceNameForControllerInstallation(controllerInstallation(name, f.name)),
	}}
	if _, err := controllerutils.GetAndCreateOrMergePatch(ctx, c, namespace, func() error {
		metav1.SetMetaDataLabel(&namespace.ObjectMeta, v1beta1constants.GardenRole, v1beta1constants.GardenRoleExtension)
		metav1.SetMetaDataLabel(&namespace.ObjectMeta, v1beta1constants.LabelControllerRegistrationName, f.name)
		metav1.SetMetaDataLabel(&namespace.ObjectMeta, resourcesv1alpha1.HighAvailabilityConfigConsider, "true")
		metav1.SetMetaDataAnnotation(&namespace.ObjectMeta, resourcesv1alpha1.HighAvailabilityConfigZones, strings.Join(s.zones, ","))
		if seedIsGarden {
			metav1.SetMetaDataLabel(&namespace.ObjectMeta, v1beta1constants.LabelNetworkPolicyAccessTargetAPIServer, "allowed")
		}
		return nil
	}); err != nil {
		return nil, err
	}

	// No garden kubeconfig asked for (ControllerDeployment.injectGardenKubeconfig unset): the
	// reconciler deletes a garden access secret a former version may have left.
	gardenAccessSecret := gardenerutils.NewGardenAccessSecret("extension", namespace.Name)
	if err := c.Delete(ctx, gardenAccessSecret.Secret); client.IgnoreNotFound(err) != nil {
		return nil, fmt.Errorf("failed to delete garden access secret: %w", err)
	}

	// gardenlet's seed client set renders with the seed's server version (chartrenderer.NewForConfig).
	renderer, err := chartrenderer.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	release, err := renderer.RenderArchive(archive, f.name, namespace.Name, utils.MergeMaps(vals.extension, map[string]any{"gardener": vals.gardener}))
	if err != nil {
		return nil, fmt.Errorf("chart rendering process failed: %w", err)
	}
	renderTime := time.Since(t0)
	secretData := release.AsSecretData()

	// Every container of the apps/batch workloads in the namespace gets SEED_NAME.
	if err := gardenerutils.MutateObjectsInSecretData(secretData, namespace.Name, []string{appsv1.GroupName, batchv1.GroupName},
		func(obj runtime.Object) error {
			return kubernetesutils.VisitPodSpec(obj, func(podSpec *corev1.PodSpec) {
				kubernetesutils.VisitContainers(podSpec, func(container *corev1.Container) {
					kubernetesutils.AddEnvVar(container, corev1.EnvVar{Name: v1beta1constants.EnvSeedName, Value: s.name}, true)
				})
			})
		}); err != nil {
		return nil, fmt.Errorf("failed to inject garden access secrets: %w", err)
	}

	labels := map[string]string{
		ctrlinstutils.LabelKeyControllerInstallationName: name,
		ctrlinstutils.LabelKeyControllerRegistrationName: f.name,
	}
	if err := managedresources.Create(ctx, c, v1beta1constants.GardenNamespace, ci, labels, false,
		v1beta1constants.SeedResourceManagerClass, secretData, nil, nil, nil); err != nil {
		return nil, fmt.Errorf("creation of ManagedResource %q failed: %w", ci, err)
	}

	mr := &resourcesv1alpha1.ManagedResource{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: v1beta1constants.GardenNamespace, Name: ci}, mr); err != nil {
		return nil, err
	}
	objects, err := objectIDs(secretData)
	if err != nil {
		return nil, err
	}
	var secrets []string
	for _, r := range mr.Spec.SecretRefs {
		secrets = append(secrets, r.Name)
	}
	return map[string]any{
		"controllerInstallation": name,
		"release":                f.name,
		"namespace":              map[string]any{"name": namespace.Name, "labels": namespace.Labels, "annotations": namespace.Annotations},
		"managedResource": map[string]any{
			"namespace": mr.Namespace, "name": mr.Name, "class": mr.Spec.Class, "labels": mr.Labels,
			"secretRefs": secrets, "keepObjects": mr.Spec.KeepObjects,
		},
		"secretKeys": len(secretData),
		"objects":    objects,
		"injected":   map[string]any{"version": vals.gardener["version"], "seed": s.name, "featureGates": vals.featureGates},
		"seconds":    map[string]any{"render": renderTime.Seconds(), "total": time.Since(start).Seconds()},
	}, nil
}

// controllerInstallationName stands in for gardener-controller-manager, which creates one
// ControllerInstallation per registration and seed with generateName `<registration>-` (the
// apiserver's name generator, used here too). A later install is a later reconcile of the same
// installation, found through its ManagedResource's label.
func controllerInstallationName(ctx context.Context, c client.Client, registration string) (string, error) {
	ci, err := installed(ctx, c, registration)
	if ci != "" || err != nil {
		return ci, err
	}
	return names.SimpleNameGenerator.GenerateName(registration + "-"), nil
}

// controllerInstallation is the part of the ControllerInstallation the reconciler's naming
// helpers read.
func controllerInstallation(name, registration string) *gardencorev1beta1.ControllerInstallation {
	return &gardencorev1beta1.ControllerInstallation{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       gardencorev1beta1.ControllerInstallationSpec{RegistrationRef: corev1.ObjectReference{Name: registration}},
	}
}

// objectIDs lists the objects handed to the resource manager as
// apiVersion/Kind/namespace/name (the namespace empty for cluster-scoped ones).
func objectIDs(secretData map[string][]byte) ([]string, error) {
	objs, err := gardenerutils.ObjectsInSecretData(secretData)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, o := range objs {
		m, ok := o.(client.Object)
		if !ok {
			continue
		}
		apiVersion, kind := o.GetObjectKind().GroupVersionKind().ToAPIVersionAndKind()
		ids = append(ids, fmt.Sprintf("%s/%s/%s/%s", apiVersion, kind, m.GetNamespace(), m.GetName()))
	}
	sort.Strings(ids)
	return ids, nil
}
