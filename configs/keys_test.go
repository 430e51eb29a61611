package configs

import (
	schedd "damselfly/scheduler/daemon"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/viper"

	"damselfly/fusemount"
	"damselfly/fusemount/snapshotter"
	"damselfly/peer/daemon"
)

// Every key of each daemon is documented in its shipped sample, where
// the operator reads about it: set, or (for values derived from the
// image) commented out under its section.
func TestSamplesNameEveryKey(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		file string
		typ  reflect.Type
	}{
		{"peer.yaml", reflect.TypeOf(daemon.Config{})},
		{"scheduler.yaml", reflect.TypeOf(schedd.Config{})},
		{"mount.yaml", reflect.TypeOf(fusemount.Config{})},
		{"snapshotter.yaml", reflect.TypeOf(snapshotter.Config{})},
	} {
		v := viper.New()
		v.SetConfigFile(tt.file)
		if err := v.ReadInConfig(); err != nil {
			t.Fatal(err)
		}
		commented := commentedKeys(t, tt.file)
		for _, l := range shapeOf(tt.typ).leaves {
			if !v.IsSet(l.file) && !commented[l.file] {
				t.Errorf("%s: no key %s", tt.file, l.file)
			}
		}
	}
}

// commentedKeys returns the keys of "# key: value" lines, by their path
// from the indentation of the sections above them.
func commentedKeys(t *testing.T, file string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	data := readFile(t, file)
	var stack []string // section names by depth (two spaces each)
	for _, line := range strings.Split(data, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		depth := (len(line) - len(trimmed)) / 2
		commented := strings.HasPrefix(trimmed, "# ")
		if commented {
			trimmed = strings.TrimPrefix(trimmed, "# ")
		}
		key, _, ok := strings.Cut(trimmed, ":")
		if !ok || key == "" || strings.ContainsAny(key, " #") {
			continue
		}
		if depth > len(stack) {
			continue
		}
		path := strings.Join(append(append([]string(nil), stack[:depth]...), key), ".")
		if commented {
			out[path] = true
			continue
		}
		stack = append(stack[:depth], key)
	}
	return out
}
