// Package grafana holds nandi's Grafana dashboard; this test parses every
// query with Prometheus's own PromQL parser (package metrics checks that
// the series it names are exported).
package grafana

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
)

func TestDashboardQueriesParse(t *testing.T) {
	b, err := os.ReadFile("nandi.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Templating struct {
			List []struct{ Name string }
		}
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	vars := map[string]bool{}
	for _, v := range dash.Templating.List {
		vars[v.Name] = true
	}
	for _, v := range []string{"datasource", "cluster", "namespace", "group"} {
		if !vars[v] {
			t.Errorf("no $%s variable", v)
		}
	}
	// Grafana's variables, as Grafana substitutes them.
	sub := strings.NewReplacer("$__rate_interval", "1m", "$cluster", ".*", "$namespace", ".*", "$group", ".*")
	n := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			n++
			if strings.Contains(tg.Expr, "[5m]") || strings.Contains(tg.Expr, "[1m]") {
				t.Errorf("panel %q: %q fixes a rate's window; use $__rate_interval", p.Title, tg.Expr)
			}
			if !strings.Contains(tg.Expr, `namespace=~"$namespace"`) || !strings.Contains(tg.Expr, `cluster=~"$cluster"`) {
				t.Errorf("panel %q: %q ignores the cluster and namespace variables", p.Title, tg.Expr)
			}
			if _, err := parser.NewParser(parser.Options{}).ParseExpr(sub.Replace(tg.Expr)); err != nil {
				t.Errorf("panel %q: %q: %v", p.Title, tg.Expr, err)
			}
		}
	}
	if n == 0 {
		t.Fatal("no queries")
	}
}
