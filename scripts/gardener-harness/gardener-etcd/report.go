package main

import (
	"context"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1beta1constants "github.com/gardener/gardener/pkg/apis/core/v1beta1/constants"
	secretsmanager "github.com/gardener/gardener/pkg/utils/secrets/manager"
)

// etcdObject is the live Etcd as the API server holds it, read without Gardener's Go types so
// that fields those types do not know (a newer CRD's) show too; nil when absent.
func etcdObject(ctx context.Context, c client.Client, ns string) (map[string]any, error) {
	return object(ctx, c, schema.GroupVersionKind{Group: "druid.gardener.cloud", Version: "v1alpha1", Kind: "Etcd"}, ns, etcdMainName)
}

func object(ctx context.Context, c client.Client, gvk schema.GroupVersionKind, ns, name string) (map[string]any, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	unstructured.RemoveNestedField(u.Object, "metadata", "managedFields")
	return u.Object, nil
}

func annotation(obj map[string]any, key string) string {
	v, _, _ := unstructured.NestedString(obj, "metadata", "annotations", key)
	return v
}

// secretsReport lists what the secrets manager keeps for gardenlet in the namespace: names,
// labels and data keys (never the data).
func secretsReport(ctx context.Context, c client.Client, ns string) ([]map[string]any, error) {
	list := &corev1.SecretList{}
	if err := c.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{
		secretsmanager.LabelKeyManagedBy:       secretsmanager.LabelValueSecretsManager,
		secretsmanager.LabelKeyManagerIdentity: v1beta1constants.SecretManagerIdentityGardenlet,
	}); err != nil {
		return nil, err
	}
	out := []map[string]any{}
	for _, s := range list.Items {
		keys := []string{}
		for k := range s.Data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		out = append(out, map[string]any{"name": s.Name, "type": s.Type, "immutable": s.Immutable, "labels": s.Labels, "keys": keys})
	}
	sort.Slice(out, func(i, j int) bool { return out[i]["name"].(string) < out[j]["name"].(string) })
	return out, nil
}

// managerReport is which secret the secrets manager hands out for each config Deploy uses.
func managerReport(sm secretsmanager.Interface) map[string]any {
	out := map[string]any{}
	for _, name := range []string{v1beta1constants.SecretNameCAETCD, v1beta1constants.SecretNameCAETCDPeer, "etcd-client", "etcd-server-main", "etcd-peer-server-main"} {
		entry := map[string]string{}
		for class, opt := range map[string]secretsmanager.GetOption{"current": secretsmanager.Current, "bundle": secretsmanager.Bundle, "old": secretsmanager.Old} {
			if s, ok := sm.Get(name, opt); ok {
				entry[class] = s.Name
			}
		}
		out[name] = entry
	}
	return out
}

// objectsReport says which of Deploy's other objects exist (names from etcd.go).
func objectsReport(ctx context.Context, c client.Client, ns string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, o := range []struct {
		gvk  schema.GroupVersionKind
		name string
	}{
		{schema.GroupVersionKind{Group: "autoscaling.k8s.io", Version: "v1", Kind: "VerticalPodAutoscaler"}, etcdMainName},
		{schema.GroupVersionKind{Group: "monitoring.coreos.com", Version: "v1", Kind: "ServiceMonitor"}, "shoot-" + etcdMainName},
		{schema.GroupVersionKind{Group: "monitoring.coreos.com", Version: "v1", Kind: "PrometheusRule"}, "shoot-" + etcdMainName},
	} {
		obj, err := object(ctx, c, o.gvk, ns, o.name)
		if err != nil {
			return nil, err
		}
		out[o.gvk.Kind+"/"+o.name] = obj != nil
	}
	return out, nil
}
