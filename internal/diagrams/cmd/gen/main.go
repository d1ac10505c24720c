// Command gen writes the guide's diagrams (package diagrams) into the
// directory it is given: go generate ./internal/diagrams.
package main

import (
	"log"
	"os"
	"path/filepath"

	"github.com/nandi-go/nandi/internal/diagrams"
)

func main() {
	if len(os.Args) != 2 {
		log.Fatal("usage: gen DIR")
	}
	for name, b := range diagrams.Draw() {
		if err := os.WriteFile(filepath.Join(os.Args[1], name), b, 0o644); err != nil {
			log.Fatal(err)
		}
	}
}
