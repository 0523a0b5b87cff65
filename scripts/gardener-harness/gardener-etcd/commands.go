package main

import (
	"context"
	"fmt"
	"time"

	druidcorev1alpha1 "github.com/gardener/etcd-druid/api/core/v1alpha1"
	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1beta1constants "github.com/gardener/gardener/pkg/apis/core/v1beta1/constants"
	"github.com/gardener/gardener/pkg/component/etcd/etcd"
	"github.com/gardener/gardener/pkg/extensions"
	"github.com/gardener/gardener/pkg/utils/kubernetes/health"
	"github.com/gardener/gardener/pkg/utils/retry"
)

var etcdMainName = etcd.Name(v1beta1constants.ETCDRoleMain)

func deploy(ctx context.Context, log logr.Logger, cfg *rest.Config, c client.Client, f *flags, redeploy bool) (map[string]any, error) {
	ns := f.shoot.namespace
	before, err := etcdObject(ctx, c, ns)
	if err != nil {
		return nil, err
	}
	if redeploy && before == nil {
		return nil, fmt.Errorf("redeploy: Etcd %s/%s does not exist (deploy creates it)", ns, etcdMainName)
	}
	sm, err := secretsManager(ctx, log, c, f.shoot)
	if err != nil {
		return nil, err
	}
	e, err := etcdMain(log, cfg, c, sm, f.shoot)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := deployEtcd(ctx, e, f.shoot); err != nil {
		return nil, fmt.Errorf("Deploy: %w", err)
	}
	out := map[string]any{"deploySeconds": time.Since(start).Seconds()}
	if f.cleanup {
		if err := sm.Cleanup(ctx); err != nil {
			return nil, fmt.Errorf("secrets manager Cleanup: %w", err)
		}
	}
	after, err := etcdObject(ctx, c, ns)
	if err != nil {
		return nil, err
	}
	secrets, err := secretsReport(ctx, c, ns)
	if err != nil {
		return nil, err
	}
	objects, err := objectsReport(ctx, c, ns)
	if err != nil {
		return nil, err
	}
	out["before"], out["after"], out["secrets"], out["objects"] = before, after, secrets, objects
	out["secretsManager"] = managerReport(sm)
	out["timestamp"] = annotation(after, v1beta1constants.GardenerTimestamp)
	if f.wait {
		etcd.DefaultInterval, etcd.DefaultTimeout = f.interval, f.timeout
		werr := e.Wait(ctx)
		out["wait"] = verdict(werr)
		if werr != nil {
			return out, fmt.Errorf("%w: Wait: %v", errUnhealthy, werr)
		}
	}
	return out, nil
}

func check(ctx context.Context, c client.Client, f *flags) (map[string]any, error) {
	obj := &druidcorev1alpha1.Etcd{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: f.shoot.namespace, Name: etcdMainName}, obj); err != nil {
		return nil, err
	}
	checks := map[string]error{
		"checkEtcdObject": etcd.CheckEtcdObject(obj),
		"checkEtcd":       health.CheckEtcd(obj),
	}
	if f.timestamp != "" {
		checks["timestamp"] = health.ObjectHasAnnotationWithValue(v1beta1constants.GardenerTimestamp, f.timestamp)(obj)
	}
	healthy, results := true, map[string]any{}
	for name, err := range checks {
		results[name] = verdict(err)
		healthy = healthy && err == nil
	}
	out := map[string]any{
		"etcd": f.shoot.namespace + "/" + etcdMainName, "generation": obj.Generation,
		"observedGeneration": obj.Status.ObservedGeneration, "healthy": healthy, "checks": results,
	}
	if !healthy {
		return out, fmt.Errorf("%w: %v", errUnhealthy, results)
	}
	return out, nil
}

func wait(ctx context.Context, log logr.Logger, c client.Client, f *flags) (map[string]any, error) {
	obj := &druidcorev1alpha1.Etcd{ObjectMeta: metav1.ObjectMeta{Namespace: f.shoot.namespace, Name: etcdMainName}}
	if f.timestamp != "" {
		obj.Annotations = map[string]string{v1beta1constants.GardenerTimestamp: f.timestamp}
	}
	start := time.Now()
	err := extensions.WaitUntilObjectReadyWithHealthFunction(ctx, c, log, etcd.CheckEtcdObject, obj, "Etcd",
		f.interval, etcd.DefaultSevereThreshold, f.timeout, nil)
	out := map[string]any{"ready": err == nil, "seconds": time.Since(start).Seconds(), "result": verdict(err)}
	if err != nil {
		return out, fmt.Errorf("%w: %v", errUnhealthy, err)
	}
	return out, nil
}

func scale(ctx context.Context, log logr.Logger, c client.Client, f *flags) (map[string]any, error) {
	e := etcd.New(log, c, f.shoot.namespace, nil, etcd.Values{Role: v1beta1constants.ETCDRoleMain})
	live, err := e.Get(ctx)
	if err != nil {
		return nil, err
	}
	refuse := func(err error) (map[string]any, error) {
		return map[string]any{"scaled": false, "result": verdict(err)}, fmt.Errorf("%w: Scale: %v", errUnhealthy, err)
	}
	if f.expectTimestamp != "" {
		if err := health.ObjectHasAnnotationWithValue(v1beta1constants.GardenerTimestamp, f.expectTimestamp)(live); err != nil {
			return refuse(err)
		}
	}
	if err := e.Scale(ctx, int32(f.replicasScale)); err != nil {
		return refuse(err)
	}
	after, err := etcdObject(ctx, c, f.shoot.namespace)
	if err != nil {
		return nil, err
	}
	return map[string]any{"scaled": true, "after": after, "timestamp": annotation(after, v1beta1constants.GardenerTimestamp)}, nil
}

// verdict is an oracle's answer as JSON: retriable is Gardener's retry.IsRetriable (the
// waiter turns a retriable error into a severe one after DefaultSevereThreshold).
func verdict(err error) map[string]any {
	if err == nil {
		return map[string]any{"ok": true}
	}
	return map[string]any{"ok": false, "error": err.Error(), "retriable": retry.IsRetriable(err)}
}
