package main

import (
	"fmt"
	"os"

	"k8s.io/component-base/featuregate"
	"sigs.k8s.io/yaml"

	"github.com/gardener/gardener/pkg/features"
	"github.com/gardener/gardener/pkg/utils"
)

// values is what the reconciler has before it renders: the ControllerDeployment's helm values
// (the Extension's) and the `gardener` map it mixes in.
type values struct {
	extension    map[string]any
	gardener     map[string]any
	featureGates int
}

// readValues merges the files in order (later wins, deep, as utils.MergeMaps does); each
// file's `gardener` key goes to the injected map, the rest to the Extension's.
func readValues(paths []string) (values, error) {
	v := values{extension: map[string]any{}, gardener: map[string]any{}}
	for _, p := range paths {
		text, err := os.ReadFile(p)
		if err != nil {
			return v, err
		}
		var doc map[string]any
		if err := yaml.Unmarshal(text, &doc); err != nil {
			return v, fmt.Errorf("%s: %w", p, err)
		}
		if g, ok := doc["gardener"]; ok {
			m, ok := g.(map[string]any)
			if !ok {
				return v, fmt.Errorf("%s: gardener: want a map, got %T", p, g)
			}
			v.gardener = utils.MergeMaps(v.gardener, m)
			delete(doc, "gardener")
		}
		v.extension = utils.MergeMaps(v.extension, doc)
	}
	// What gardenlet itself knows rather than reads from the Seed: its version and its
	// feature gates (reconciler.go, "Mix-in some standard values for garden and seed").
	featureToEnabled := make(map[featuregate.Feature]bool)
	for feature := range features.DefaultFeatureGate.GetAll() {
		featureToEnabled[feature] = features.DefaultFeatureGate.Enabled(feature)
	}
	v.gardener["version"] = gardenerVersion()
	v.gardener["gardenlet"] = map[string]any{"featureGates": featureToEnabled}
	v.featureGates = len(featureToEnabled)
	return v, nil
}

// seed is what the reconciler reads from the Seed object; here from `gardener.seed`.
type seed struct {
	name, clusterIdentity string
	zones                 []string
}

func (v values) seed() (seed, error) {
	s, _ := v.gardener["seed"].(map[string]any)
	name, _ := s["name"].(string)
	if name == "" {
		return seed{}, fmt.Errorf("gardener.seed.name: missing in the values files (the Seed the installation is for)")
	}
	id, _ := s["clusterIdentity"].(string)
	if id == "" {
		// reconciler.go refuses a Seed without status.clusterIdentity.
		return seed{}, fmt.Errorf("cluster-identity of seed %q not set (gardener.seed.clusterIdentity)", name)
	}
	out := seed{name: name, clusterIdentity: id}
	spec, _ := s["spec"].(map[string]any)
	provider, _ := spec["provider"].(map[string]any)
	zones, _ := provider["zones"].([]any)
	for _, z := range zones {
		if z, ok := z.(string); ok {
			out.zones = append(out.zones, z)
		}
	}
	return out, nil
}
