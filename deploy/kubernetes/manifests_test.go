// Package kubernetes holds nandi's Kubernetes manifests; this test decodes
// each strictly with the Kubernetes API types (an unknown or misspelt
// field fails), with no cluster, and checks what the README promises of
// them.
package kubernetes

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// shutdownTimeout is consumer.Options.ShutdownTimeout's default, in seconds.
const shutdownTimeout = 30

func decode(t *testing.T, name string, into any) {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, into); err != nil {
		t.Fatalf("%s does not decode strictly: %v", name, err)
	}
}

func TestEveryManifestDecodesStrictly(t *testing.T) {
	files, _ := filepath.Glob("*.yaml")
	kinds := map[string]bool{}
	for _, f := range files {
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		b, _ := os.ReadFile(f)
		if err := yaml.Unmarshal(b, &head); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		kinds[head.Kind] = true
		switch head.Kind {
		case "Deployment":
			var d appsv1.Deployment
			decode(t, f, &d)
			checkDeployment(t, &d)
		case "HorizontalPodAutoscaler":
			var h autoscalingv2.HorizontalPodAutoscaler
			decode(t, f, &h)
			if h.Spec.Behavior == nil || h.Spec.Behavior.ScaleDown == nil || h.Spec.Behavior.ScaleDown.StabilizationWindowSeconds == nil ||
				*h.Spec.Behavior.ScaleDown.StabilizationWindowSeconds < 120 {
				t.Errorf("%s: the HPA must hold scale-downs (behavior.scaleDown.stabilizationWindowSeconds of minutes)", f)
			}
		case "PodDisruptionBudget":
			var p policyv1.PodDisruptionBudget
			decode(t, f, &p)
			if p.Spec.MaxUnavailable == nil || p.Spec.MaxUnavailable.IntValue() != 1 {
				t.Errorf("%s: maxUnavailable must be 1", f)
			}
		case "Kustomization":
			var k struct {
				APIVersion string   `json:"apiVersion"`
				Kind       string   `json:"kind"`
				Resources  []string `json:"resources"`
			}
			decode(t, f, &k)
			for _, r := range k.Resources {
				if _, err := os.Stat(r); err != nil {
					t.Errorf("%s names %s: %v", f, r, err)
				}
			}
		default:
			t.Errorf("%s: kind %q is not checked by this test", f, head.Kind)
		}
	}
	for _, k := range []string{"Deployment", "HorizontalPodAutoscaler", "PodDisruptionBudget"} {
		if !kinds[k] {
			t.Errorf("no %s among the manifests", k)
		}
	}
}

func checkDeployment(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	s := d.Spec.Strategy.RollingUpdate
	if s == nil || s.MaxSurge.String() != "100%" || s.MaxUnavailable.String() != "0" {
		t.Errorf("the rolling update must be maxSurge 100%%, maxUnavailable 0 (what BenchmarkRollingUpdate favours)")
	}
	if d.Spec.MinReadySeconds != 0 {
		t.Errorf("minReadySeconds %d: each step would be a change of its own", d.Spec.MinReadySeconds)
	}
	pod := d.Spec.Template.Spec
	if pod.TerminationGracePeriodSeconds == nil || *pod.TerminationGracePeriodSeconds <= shutdownTimeout {
		t.Errorf("terminationGracePeriodSeconds must be above the consumer's ShutdownTimeout (%ds)", shutdownTimeout)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers; want the worker", len(pod.Containers))
	}
	c := pod.Containers[0]
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/ready" {
		t.Errorf("the readiness probe must be GET /ready (health.ConsumerHandler, Registering)")
	}
	if c.LivenessProbe != nil && c.LivenessProbe.HTTPGet != nil && strings.Contains(c.LivenessProbe.HTTPGet.Path, "holding") {
		t.Errorf("a liveness probe on /holding restarts the fleet at every rebalance")
	}
	args := strings.Join(c.Args, " ")
	for _, want := range []string{"-role=worker", "-http=:9090"} {
		if !strings.Contains(args, want) {
			t.Errorf("the worker's args %q lack %s", args, want)
		}
	}
}
