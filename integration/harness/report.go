package harness

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// WriteReport saves a run's report in dir (created if needed) as
// NAME.json, v indented, and NAME.md, markdown as given: the JSON for
// tools and for merging runs, the markdown for people.
func WriteReport(dir, name string, v any, markdown string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s report: %w", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".json"), append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".md"), []byte(markdown), 0o644)
}

// Esc makes s safe inside a markdown table cell.
func Esc(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
