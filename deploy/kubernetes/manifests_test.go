// Package kubernetes holds nandi's Kubernetes manifests; this test decodes
// each strictly with the Kubernetes API types (an unknown or misspelt
// field fails), with no cluster, and checks what docs/kubernetes.md promises of
// them.
package kubernetes

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/prometheus/promql/parser"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	psapi "k8s.io/pod-security-admission/api"
	pspolicy "k8s.io/pod-security-admission/policy"
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
	more, _ := filepath.Glob("monitoring/*.yaml")
	files = append(files, more...)
	kinds := map[string]bool{}
	var secret *corev1.Secret
	var deployment *appsv1.Deployment
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
			deployment = &d
		case "Secret":
			var sec corev1.Secret
			decode(t, f, &sec)
			if !strings.Contains(f, "example") {
				t.Errorf("%s: a Secret in the repository must be an example (named *.example.yaml), never a real one", f)
			}
			secret = &sec
		case "PodMonitor":
			var pm monitoringv1.PodMonitor
			decode(t, f, &pm)
			if len(pm.Spec.PodMetricsEndpoints) == 0 || pm.Spec.PodMetricsEndpoints[0].Port == nil || *pm.Spec.PodMetricsEndpoints[0].Port != "http" {
				t.Errorf("%s: the PodMonitor must scrape the worker's http port", f)
			}
		case "PrometheusRule":
			var pr monitoringv1.PrometheusRule
			decode(t, f, &pr)
			checkRules(t, f, &pr)
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
				Images     []struct {
					Name    string `json:"name"`
					NewTag  string `json:"newTag"`
					NewName string `json:"newName,omitempty"`
				} `json:"images,omitempty"`
			}
			decode(t, f, &k)
			for _, r := range k.Resources {
				if _, err := os.Stat(filepath.Join(filepath.Dir(f), r)); err != nil {
					t.Errorf("%s names %s: %v", f, r, err)
				}
			}
		default:
			t.Errorf("%s: kind %q is not checked by this test", f, head.Kind)
		}
	}
	for _, k := range []string{"Deployment", "HorizontalPodAutoscaler", "PodDisruptionBudget", "Secret", "PodMonitor", "PrometheusRule"} {
		if !kinds[k] {
			t.Errorf("no %s among the manifests", k)
		}
	}
	// The Secret the Deployment reads is the one shipped as an example.
	if secret != nil && deployment != nil {
		for _, e := range deployment.Spec.Template.Spec.Containers[0].Env {
			if ref := e.ValueFrom; ref != nil && ref.SecretKeyRef != nil {
				if ref.SecretKeyRef.Name != secret.Name || secret.StringData[ref.SecretKeyRef.Key] == "" {
					t.Errorf("%s reads Secret %s key %s, which secret.example.yaml (%s: %v) does not show", e.Name, ref.SecretKeyRef.Name, ref.SecretKeyRef.Key, secret.Name, secret.StringData)
				}
			}
		}
	}
}

// alerts are what the PrometheusRule must have (docs/kubernetes.md).
var alerts = []string{"NandiGroupNotFullyAssigned", "NandiOldestTaskStuck", "NandiHandlersOverdue", "NandiShareUnserved", "NandiDeadLetters", "NandiDeadLettersFailing", "NandiLedgerCorrupt", "NandiBacklogGrowing", "NandiGroupPausedLong"}

// checkRules parses every rule's PromQL with Prometheus's own parser and
// checks that each alert says what to do.
func checkRules(t *testing.T, f string, pr *monitoringv1.PrometheusRule) {
	t.Helper()
	have := map[string]bool{}
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			have[r.Alert] = true
			if _, err := parser.NewParser(parser.Options{}).ParseExpr(r.Expr.String()); err != nil {
				t.Errorf("%s: alert %s: %v", f, r.Alert, err)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: alert %s has no summary or description", f, r.Alert)
			}
		}
	}
	for _, a := range alerts {
		if !have[a] {
			t.Errorf("%s: no alert %s", f, a)
		}
	}
}

// restrictedViolations evaluates a pod with the Pod Security Admission's
// own checks at the "restricted" level, and adds a read-only root
// filesystem: the reasons it would be refused, none when it passes.
func restrictedViolations(t *testing.T, meta *metav1.ObjectMeta, spec *corev1.PodSpec) []string {
	t.Helper()
	ev, err := pspolicy.NewEvaluator(pspolicy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range ev.EvaluatePod(psapi.LevelVersion{Level: psapi.LevelRestricted, Version: psapi.LatestVersion()}, meta, spec) {
		if !r.Allowed {
			out = append(out, r.ForbiddenReason+": "+r.ForbiddenDetail)
		}
	}
	for _, c := range spec.Containers {
		if c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
			out = append(out, "container "+c.Name+": the root filesystem must be read-only")
		}
	}
	return out
}

// The Deployment passes the restricted Pod Security Standard; and the
// check is able to fail: each way of breaking it is refused.
func TestDeploymentIsRestricted(t *testing.T) {
	var d appsv1.Deployment
	decode(t, "deployment.yaml", &d)
	if v := restrictedViolations(t, &d.Spec.Template.ObjectMeta, &d.Spec.Template.Spec); len(v) > 0 {
		t.Errorf("deployment.yaml breaks the restricted Pod Security Standard: %v", v)
	}
	no, yes := false, true
	for name, breakIt := range map[string]func(p *corev1.PodSpec){
		"runAsNonRoot false":   func(p *corev1.PodSpec) { p.SecurityContext.RunAsNonRoot = &no },
		"privilege escalation": func(p *corev1.PodSpec) { p.Containers[0].SecurityContext.AllowPrivilegeEscalation = &yes },
		"a capability added": func(p *corev1.PodSpec) {
			p.Containers[0].SecurityContext.Capabilities.Add = []corev1.Capability{"NET_ADMIN"}
		},
		"capabilities not dropped":   func(p *corev1.PodSpec) { p.Containers[0].SecurityContext.Capabilities.Drop = nil },
		"no seccomp profile":         func(p *corev1.PodSpec) { p.SecurityContext.SeccompProfile = nil },
		"a writable root filesystem": func(p *corev1.PodSpec) { p.Containers[0].SecurityContext.ReadOnlyRootFilesystem = &no },
		"privileged":                 func(p *corev1.PodSpec) { p.Containers[0].SecurityContext.Privileged = &yes },
		"host network":               func(p *corev1.PodSpec) { p.HostNetwork = true },
	} {
		broken := d.DeepCopy()
		breakIt(&broken.Spec.Template.Spec)
		if v := restrictedViolations(t, &broken.Spec.Template.ObjectMeta, &broken.Spec.Template.Spec); len(v) == 0 {
			t.Errorf("a Deployment with %s passes the check; want it refused", name)
		}
	}
}

func checkDeployment(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	if d.Spec.Replicas != nil {
		t.Errorf("replicas %d beside the HPA: every kubectl apply would reset the count the HPA set", *d.Spec.Replicas)
	}
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
	if strings.HasSuffix(c.Image, ":latest") || !strings.Contains(c.Image, ":") {
		t.Errorf("image %q: name a version, never latest", c.Image)
	}
	gomem := false
	for _, e := range c.Env {
		if e.Name == "GOMEMLIMIT" && e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil && e.ValueFrom.ResourceFieldRef.Resource == "limits.memory" {
			gomem = true
		}
	}
	if !gomem || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("GOMEMLIMIT must come from the container's memory limit (resourceFieldRef limits.memory), and the limit be set")
	}
	args := strings.Join(c.Args, " ")
	for _, want := range []string{"-role=worker", "-http=:9090"} {
		if !strings.Contains(args, want) {
			t.Errorf("the worker's args %q lack %s", args, want)
		}
	}
}
