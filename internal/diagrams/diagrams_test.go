package diagrams

import (
	"bytes"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// The SVGs in docs/img are what the code draws, and each is well-formed
// XML with a title (what a screen reader says).
func TestCheckedInDiagramsAreTheDrawnOnes(t *testing.T) {
	for name, want := range Draw() {
		got, err := os.ReadFile(filepath.Join("../../docs/img", name))
		if err != nil {
			t.Errorf("%s: %v (go generate ./internal/diagrams)", name, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("docs/img/%s differs from what package diagrams draws: run go generate ./internal/diagrams", name)
		}
		d := xml.NewDecoder(bytes.NewReader(want))
		titled := false
		for {
			tok, err := d.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s is not well-formed XML: %v", name, err)
			}
			if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "title" {
				titled = true
			}
		}
		if !titled {
			t.Errorf("%s has no <title>", name)
		}
	}
}
