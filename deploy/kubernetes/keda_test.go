package kubernetes

import (
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// crdSchema returns the openAPIV3Schema of the CRD in testdata/keda/file
// (KEDA's own, see its README).
func crdSchema(t *testing.T, file string) map[string]any {
	t.Helper()
	var crd struct {
		Spec struct {
			Versions []struct {
				Name   string `json:"name"`
				Schema struct {
					OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	b, err := os.ReadFile(filepath.Join("testdata", "keda", file))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatal(err)
	}
	for _, v := range crd.Spec.Versions {
		if v.Name == "v1alpha1" {
			return v.Schema.OpenAPIV3Schema
		}
	}
	t.Fatalf("%s has no v1alpha1 schema", file)
	return nil
}

// validate checks v against a structural schema as the API server does
// with strict field validation: an unknown field, a wrong type, a value
// outside its enum or minimum, a required field missing: each is a
// problem, named by its path.
func validate(path string, v any, s map[string]any) []string {
	var out []string
	bad := func(format string, a ...any) { out = append(out, path+": "+fmt.Sprintf(format, a...)) }
	if s["x-kubernetes-int-or-string"] == true {
		switch v.(type) {
		case string, float64:
			return nil
		}
		bad("%v is neither an integer nor a string", v)
		return out
	}
	switch s["type"] {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			bad("%v is not an object", v)
			return out
		}
		props, _ := s["properties"].(map[string]any)
		addl, _ := s["additionalProperties"].(map[string]any)
		for k, x := range m {
			switch ps, ok := props[k].(map[string]any); {
			case ok:
				out = append(out, validate(path+"."+k, x, ps)...)
			case addl != nil:
				out = append(out, validate(path+"."+k, x, addl)...)
			case props != nil && s["x-kubernetes-preserve-unknown-fields"] != true:
				bad("unknown field %q", k)
			}
		}
		req, _ := s["required"].([]any)
		for _, r := range req {
			if _, ok := m[r.(string)]; !ok {
				bad("required field %q missing", r)
			}
		}
	case "array":
		a, ok := v.([]any)
		if !ok {
			bad("%v is not an array", v)
			return out
		}
		items, _ := s["items"].(map[string]any)
		for i, x := range a {
			out = append(out, validate(fmt.Sprintf("%s[%d]", path, i), x, items)...)
		}
	case "string":
		str, ok := v.(string)
		if !ok {
			bad("%v is not a string", v)
			return out
		}
		if enum, ok := s["enum"].([]any); ok && !slices.Contains(enum, any(str)) {
			bad("%q is not one of %v", str, enum)
		}
	case "integer":
		n, ok := v.(float64)
		if !ok || n != math.Trunc(n) {
			bad("%v is not an integer", v)
			return out
		}
		if min, ok := s["minimum"].(float64); ok && n < min {
			bad("%v is below the minimum %v", n, min)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			bad("%v is not a boolean", v)
		}
	case "number":
		if _, ok := v.(float64); !ok {
			bad("%v is not a number", v)
		}
	}
	return out
}

// kedaDoc is one YAML document of keda/: its kind and its JSON.
type kedaDoc struct {
	file, kind string
	raw        []byte
	obj        map[string]any
}

func kedaDocs(t *testing.T) []kedaDoc {
	t.Helper()
	files, _ := filepath.Glob("keda/*.yaml")
	more, _ := filepath.Glob("keda/examples/*.yaml")
	var out []kedaDoc
	for _, f := range append(files, more...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, part := range strings.Split(string(b), "\n---\n") {
			j, err := yaml.YAMLToJSON([]byte(part))
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			var obj map[string]any
			if err := json.Unmarshal(j, &obj); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			kind, _ := obj["kind"].(string)
			out = append(out, kedaDoc{file: f, kind: kind, raw: []byte(part), obj: obj})
		}
	}
	return out
}

// The validator refuses what the API server would: it is able to fail.
func TestTheCRDCheckRefusesBrokenScaledObjects(t *testing.T) {
	schema := crdSchema(t, "keda.sh_scaledobjects.yaml")
	for name, broken := range map[string]string{
		"a misspelt field":          `{"spec":{"scaleTargetRef":{"name":"x"},"minReplicaCount":0,"pollingIntervall":5,"triggers":[]}}`,
		"a string for an integer":   `{"spec":{"scaleTargetRef":{"name":"x"},"minReplicaCount":"0","triggers":[]}}`,
		"no scaleTargetRef":         `{"spec":{"triggers":[]}}`,
		"a negative count":          `{"spec":{"scaleTargetRef":{"name":"x"},"maxReplicaCount":-1,"triggers":[]}}`,
		"a misspelt trigger field":  `{"spec":{"scaleTargetRef":{"name":"x"},"triggers":[{"type":"metrics-api","metdata":{}}]}}`,
		"fallback without replicas": `{"spec":{"scaleTargetRef":{"name":"x"},"fallback":{"failureThreshold":3},"triggers":[]}}`,
	} {
		var v map[string]any
		if err := json.Unmarshal([]byte(broken), &v); err != nil {
			t.Fatal(err)
		}
		if problems := validate("ScaledObject", v, schema); len(problems) == 0 {
			t.Errorf("a ScaledObject with %s passes the check; want it refused", name)
		}
	}
}

// Every ScaledObject and TriggerAuthentication in keda/ is valid by KEDA's
// own CRDs, and the ScaledObjects do what docs/autoscaling.md says: a
// metrics-api trigger asks nandi scaler's Service for its group's
// "entries", scales from zero with a fallback for a group not yet run,
// and the mail-sender one scales the Deployment of that very group.
func TestKEDAManifests(t *testing.T) {
	schemas := map[string]map[string]any{
		"ScaledObject":          crdSchema(t, "keda.sh_scaledobjects.yaml"),
		"TriggerAuthentication": crdSchema(t, "keda.sh_triggerauthentications.yaml"),
	}
	var deployment appsv1.Deployment
	decode(t, "deployment.yaml", &deployment)
	var secret corev1.Secret
	decode(t, "secret.example.yaml", &secret)
	var hpa autoscalingv2.HorizontalPodAutoscaler
	decode(t, "hpa.yaml", &hpa)
	var svc corev1.Service
	var scalerDep appsv1.Deployment
	scaledObjects := 0
	for _, d := range kedaDocs(t) {
		switch d.kind {
		case "ScaledObject", "TriggerAuthentication":
			for _, p := range validate(d.kind, d.obj, schemas[d.kind]) {
				t.Errorf("%s: %s", d.file, p)
			}
		case "Service":
			if err := yaml.UnmarshalStrict(d.raw, &svc); err != nil {
				t.Errorf("%s: %v", d.file, err)
			}
		case "Deployment":
			if err := yaml.UnmarshalStrict(d.raw, &scalerDep); err != nil {
				t.Errorf("%s: %v", d.file, err)
			}
		case "Component":
			checkComponent(t, d, hpa.Name)
		default:
			t.Errorf("%s: kind %q is not checked by this test", d.file, d.kind)
		}
		if d.kind == "TriggerAuthentication" {
			for _, ref := range d.obj["spec"].(map[string]any)["secretTargetRef"].([]any) {
				r := ref.(map[string]any)
				if _, ok := secret.StringData[r["key"].(string)]; !ok || r["name"] != secret.Name {
					t.Errorf("%s reads Secret %v key %v, which secret.example.yaml does not show", d.file, r["name"], r["key"])
				}
			}
		}
	}
	for _, d := range kedaDocs(t) {
		if d.kind == "ScaledObject" {
			scaledObjects++
			checkScaledObject(t, d, &svc)
		}
	}
	if scaledObjects < 5 {
		t.Errorf("%d ScaledObjects; want one per log through nandi scaler (Redis, Kafka, JetStream) and the two native triggers", scaledObjects)
	}
	// The scaler runs restricted, and listens where its Service sends.
	if v := restrictedViolations(t, &scalerDep.Spec.Template.ObjectMeta, &scalerDep.Spec.Template.Spec); len(v) > 0 {
		t.Errorf("keda/scaler.yaml is not restricted: %v", v)
	}
	c := scalerDep.Spec.Template.Spec.Containers[0]
	if c.Args[0] != "scaler" || !slices.Contains(c.Args, "-addr=:"+strconv.Itoa(int(c.Ports[0].ContainerPort))) ||
		svc.Spec.Ports[0].TargetPort.String() != c.Ports[0].Name {
		t.Errorf("keda/scaler.yaml runs %v on port %v; its Service sends to %v", c.Args, c.Ports, svc.Spec.Ports)
	}
	// keda/scaledobject.yaml scales the group the Deployment runs.
	so := kedaDocs(t)
	for _, d := range so {
		if d.file != filepath.Join("keda", "scaledobject.yaml") {
			continue
		}
		spec := d.obj["spec"].(map[string]any)
		if spec["scaleTargetRef"].(map[string]any)["name"] != deployment.Name {
			t.Errorf("%s scales %v; the Deployment is %s", d.file, spec["scaleTargetRef"], deployment.Name)
		}
		u := spec["triggers"].([]any)[0].(map[string]any)["metadata"].(map[string]any)["url"].(string)
		if !slices.Contains(deployment.Spec.Template.Spec.Containers[0].Args, "-group="+strings.TrimPrefix(mustURL(t, u).Path, "/keda/")) {
			t.Errorf("%s asks for %s; the Deployment runs %v", d.file, u, deployment.Spec.Template.Spec.Containers[0].Args)
		}
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// checkScaledObject checks a ScaledObject's triggers beyond its schema.
func checkScaledObject(t *testing.T, d kedaDoc, svc *corev1.Service) {
	t.Helper()
	spec := d.obj["spec"].(map[string]any)
	for _, tr := range spec["triggers"].([]any) {
		trig := tr.(map[string]any)
		md := trig["metadata"].(map[string]any)
		switch trig["type"] {
		case "metrics-api":
			u := mustURL(t, md["url"].(string))
			host, port, _ := strings.Cut(u.Host, ":")
			if !strings.HasPrefix(host, svc.Name+".") || !strings.HasSuffix(host, ".svc.cluster.local") || port != strconv.Itoa(int(svc.Spec.Ports[0].Port)) {
				t.Errorf("%s: url %s is not nandi scaler's Service (%s, port %d) by a name KEDA's namespace resolves", d.file, u, svc.Name, svc.Spec.Ports[0].Port)
			}
			if !strings.HasPrefix(u.Path, "/keda/") || md["valueLocation"] != "entries" {
				t.Errorf("%s: url %s and valueLocation %v; want /keda/GROUP and entries", d.file, u, md["valueLocation"])
			}
			if spec["fallback"] == nil {
				t.Errorf("%s: no fallback: a group no worker has run yet is never started (the scaler answers 404)", d.file)
			}
		case "redis-streams":
			if md["lagCount"] == nil || md["consumerGroup"] == nil {
				t.Errorf("%s: KEDA's redis-streams trigger on a nandi group must read the mirrored group's lag (consumerGroup, lagCount)", d.file)
			}
		case "kafka":
			if md["allowIdleConsumers"] != "true" {
				t.Errorf("%s: KEDA's kafka trigger on a nandi CommitGroup needs allowIdleConsumers \"true\" (no member ever joins)", d.file)
			}
		default:
			t.Errorf("%s: trigger %v is not checked by this test", d.file, trig["type"])
		}
		if n, err := strconv.Atoi(fmt.Sprint(md["targetValue"], md["lagCount"], md["lagThreshold"])); err == nil && n <= 0 {
			t.Errorf("%s: a target of %d", d.file, n)
		}
	}
	if mn, _ := spec["minReplicaCount"].(float64); mn != 0 {
		t.Errorf("%s: minReplicaCount %v; a group scales from zero", d.file, mn)
	}
}

// checkComponent checks that keda/'s component names files that exist and
// removes the HPA that hpa.yaml makes (two autoscalers would fight).
func checkComponent(t *testing.T, d kedaDoc, hpa string) {
	t.Helper()
	var c struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
		Patches    []struct {
			Patch string `json:"patch"`
		} `json:"patches"`
	}
	if err := yaml.UnmarshalStrict(d.raw, &c); err != nil {
		t.Fatalf("%s: %v", d.file, err)
	}
	for _, r := range c.Resources {
		if _, err := os.Stat(filepath.Join(filepath.Dir(d.file), r)); err != nil {
			t.Errorf("%s names %s: %v", d.file, r, err)
		}
	}
	deletes := false
	for _, p := range c.Patches {
		var m struct {
			Patch    string `json:"$patch"`
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if yaml.Unmarshal([]byte(p.Patch), &m) == nil && m.Patch == "delete" && m.Kind == "HorizontalPodAutoscaler" && m.Metadata.Name == hpa {
			deletes = true
		}
	}
	if !deletes {
		t.Errorf("%s does not delete the HPA %s", d.file, hpa)
	}
}
