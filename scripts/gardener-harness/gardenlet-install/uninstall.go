package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1beta1constants "github.com/gardener/gardener/pkg/apis/core/v1beta1/constants"
	resourcesv1alpha1 "github.com/gardener/gardener/pkg/apis/resources/v1alpha1"
	ctrlinstutils "github.com/gardener/gardener/pkg/gardenlet/controller/controllerinstallation/utils"
	gardenerutils "github.com/gardener/gardener/pkg/utils/gardener"
	"github.com/gardener/gardener/pkg/utils/managedresources"
)

// uninstall is reconciler.go's `delete`: the ManagedResource and its Secret, then (once the
// resource manager has deleted the objects and dropped its finalizer) the namespace. gardenlet
// requeues while either is still there; here the same steps loop every --interval.
func uninstall(ctx context.Context, c client.Client, f flags) (map[string]any, error) {
	ci, err := installed(ctx, c, f.name)
	if err != nil {
		return nil, err
	}
	if ci == "" {
		return map[string]any{"controllerInstallation": nil, "message": "no ManagedResource of registration " + f.name}, nil
	}
	start := time.Now()
	deadline := start.Add(f.timeout)
	mr := &resourcesv1alpha1.ManagedResource{ObjectMeta: metav1.ObjectMeta{Name: ci, Namespace: v1beta1constants.GardenNamespace}}
	for {
		if err := client.IgnoreNotFound(managedresources.Delete(ctx, c, mr.Namespace, mr.Name, false)); err != nil {
			return nil, fmt.Errorf("deletion of ManagedResource %q and its secrets failed: %w", ci, err)
		}
		err := c.Get(ctx, client.ObjectKeyFromObject(mr), mr)
		if apierrors.IsNotFound(err) {
			break
		}
		if err != nil {
			return nil, err
		}
		if err := sleepUntil(ctx, deadline, f.interval, "ManagedResource "+ci); err != nil {
			return nil, err
		}
	}
	mrGone := time.Since(start)
	namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: gardenerutils.NamespaceNameForControllerInstallation(controllerInstallation(ci, f.name)),
	}}
	for {
		err := c.Delete(ctx, namespace)
		if apierrors.IsNotFound(err) {
			break
		}
		if err != nil && !apierrors.IsConflict(err) {
			return nil, fmt.Errorf("deletion of Namespace %q failed: %w", namespace.Name, err)
		}
		if err := sleepUntil(ctx, deadline, f.interval, "Namespace "+namespace.Name); err != nil {
			return nil, err
		}
	}
	return map[string]any{
		"controllerInstallation": ci,
		"managedResource":        map[string]any{"namespace": mr.Namespace, "name": ci},
		"namespace":              namespace.Name,
		"seconds":                map[string]any{"managedResourceGone": mrGone.Seconds(), "namespaceGone": time.Since(start).Seconds()},
	}, nil
}

// installed is the name of the registration's ControllerInstallation (for a seed, its
// ManagedResource's: gardenerutils.ManagedResourceNameForControllerInstallation), "" if there
// is none.
func installed(ctx context.Context, c client.Client, registration string) (string, error) {
	list := &resourcesv1alpha1.ManagedResourceList{}
	if err := c.List(ctx, list, client.InNamespace(v1beta1constants.GardenNamespace),
		client.MatchingLabels{ctrlinstutils.LabelKeyControllerRegistrationName: registration}); err != nil {
		return "", err
	}
	switch len(list.Items) {
	case 0:
		return "", nil
	case 1:
		return list.Items[0].Name, nil
	}
	return "", fmt.Errorf("%d ManagedResources in %s carry %s=%s; want at most one", len(list.Items),
		v1beta1constants.GardenNamespace, ctrlinstutils.LabelKeyControllerRegistrationName, registration)
}

func sleepUntil(ctx context.Context, deadline time.Time, interval time.Duration, what string) error {
	if time.Now().Add(interval).After(deadline) {
		return fmt.Errorf("deletion of %s is still pending after the timeout", what)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(interval):
		return nil
	}
}
