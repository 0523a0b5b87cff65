package main

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1beta1constants "github.com/gardener/gardener/pkg/apis/core/v1beta1/constants"
	resourcesv1alpha1 "github.com/gardener/gardener/pkg/apis/resources/v1alpha1"
	"github.com/gardener/gardener/pkg/utils/kubernetes/health"
)

// status is the care controller's reading of the ManagedResource (care/reconciler.go): the
// ControllerInstallation's Installed, Healthy and Progressing, and whether the seed's
// extensions check (extensionscheck/reconciler.go) would count the installation as ready for
// the Seed's ExtensionsReady: Installed and Healthy True, Progressing False.
func status(ctx context.Context, c client.Client, f flags) (map[string]any, error) {
	ci, err := installed(ctx, c, f.name)
	if err != nil {
		return nil, err
	}
	if ci == "" {
		return map[string]any{"controllerInstallation": nil}, fmt.Errorf("%w: no ManagedResource of registration %s", errNotReady, f.name)
	}
	mr := &resourcesv1alpha1.ManagedResource{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: v1beta1constants.GardenNamespace, Name: ci}, mr); err != nil {
		return nil, err
	}
	condition := func(ok bool, whenOK, whenNot string, err error) map[string]any {
		if ok {
			return map[string]any{"status": whenOK}
		}
		return map[string]any{"status": whenNot, "message": err.Error()}
	}
	applied := health.CheckManagedResourceApplied(mr)
	healthy := health.CheckManagedResourceHealthy(mr)
	progressing := health.CheckManagedResourceProgressing(mr)
	ready := applied == nil && healthy == nil && progressing == nil
	var mrConditions []map[string]any
	for _, c := range mr.Status.Conditions {
		mrConditions = append(mrConditions, map[string]any{
			"type": c.Type, "status": c.Status, "reason": c.Reason, "message": c.Message,
			"lastTransitionTime": c.LastTransitionTime.Time,
		})
	}
	out := map[string]any{
		"controllerInstallation": ci,
		"conditions": map[string]any{
			"Installed":   condition(applied == nil, "True", "False", applied),
			"Healthy":     condition(healthy == nil, "True", "False", healthy),
			"Progressing": condition(progressing == nil, "False", "True", progressing),
		},
		"extensionReady":  ready,
		"managedResource": map[string]any{"generation": mr.Generation, "observedGeneration": mr.Status.ObservedGeneration, "conditions": mrConditions},
	}
	if !ready {
		return out, errNotReady
	}
	return out, nil
}
