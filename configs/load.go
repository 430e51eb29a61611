package configs

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"

	"damselfly/configs/field"
)

// renamed lists, per command, keys of older files and their names now
// (a key under an old name is renamed with everything inside it). A file
// that still uses one is refused with the new name, as is one that sets
// a tunable outside advanced:.
var renamed = map[string]map[string]string{
	"peer": {
		"upstream": "registry",
		// One bound on one question to the schedulers: the node's.
		"scheduler.route_timeout": "advanced.node.route_timeout",
		// One place for this peer's locality labels.
		"scheduler.labels": "labels",
	},
	"scheduler": {
		// The proxy's name for the same permission.
		"admin.allow_non_loopback": "admin.allow_remote",
	},
}

// Load resolves a daemon's typed config: def (the defaults), then file
// (if not empty; YAML/JSON/TOML), then DAMSELFLY_* environment variables
// named after the file's keys (mount's backend.proxy.url is
// DAMSELFLY_BACKEND_PROXY_URL; peer's advanced.node.hedge_delay is
// DAMSELFLY_ADVANCED_NODE_HEDGE_DELAY). Keys follow the struct's
// mapstructure tags; fields tagged `config:"advanced"` are read under
// advanced:. The file's keys may also be wrapped in one section named
// after the command ("peer: {dir: ...}").
//
// Unknown keys in the file are an error, so a typo does not pass
// silently; a key of an older file that was renamed or moved under
// advanced: is an error naming its new key, and so is an environment
// variable of its old name.
func Load[T any](file, command string, def T) (T, error) {
	s := shapeOf(reflect.TypeOf(def))
	var errs []error
	values := map[string]any{}
	if file != "" {
		fv := viper.New()
		fv.SetConfigFile(file)
		if err := fv.ReadInConfig(); err != nil {
			return def, fmt.Errorf("read config %s: %w", file, err)
		}
		raw := unwrap(fv.AllSettings(), command, s)
		for _, l := range s.leaves {
			if v, ok := take(raw, l.file); ok {
				put(values, l.path, v)
			}
		}
		for _, k := range leftovers(raw, "") {
			errs = append(errs, fmt.Errorf("config %s: %s", file, s.explain(k, renamed[command])))
		}
	}
	errs = append(errs, s.oldEnv(renamed[command])...)
	if err := errors.Join(errs...); err != nil {
		return def, err
	}

	v := viper.New()
	root := reflect.ValueOf(def)
	for _, l := range s.leaves {
		v.SetDefault(l.path, root.FieldByIndex(l.index).Interface())
		if err := v.BindEnv(l.path, envName(l.file)); err != nil {
			return def, err
		}
	}
	if err := v.MergeConfigMap(values); err != nil {
		return def, fmt.Errorf("config %s: %w", file, err)
	}
	out := def
	err := v.Unmarshal(&out, func(c *mapstructure.DecoderConfig) {
		c.ErrorUnused = true
		c.DecodeHook = mapstructure.ComposeDecodeHookFunc(
			mapstructure.StringToTimeDurationHookFunc(),
			mapstructure.StringToSliceHookFunc(","),
		)
	})
	if err != nil {
		return def, fmt.Errorf("config %s: %w", file, err)
	}
	return out, nil
}

// Validate runs cfg's Validate and names every problem by its key in the
// file: a tunable's problem "node.hedge_delay: ..." reads
// "advanced.node.hedge_delay: ...".
func Validate(cfg interface{ Validate() error }) error {
	err := cfg.Validate()
	if err == nil {
		return nil
	}
	t := reflect.TypeOf(cfg)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	s := shapeOf(t)
	var out []error
	for _, p := range field.Problems(err) {
		msg := p.Error()
		key := msg
		if i := strings.IndexAny(msg, ":[ "); i >= 0 {
			key = msg[:i]
		}
		if fk := s.fileKey(key); fk != key {
			p = &renamedProblem{msg: fk + msg[len(key):], err: p}
		}
		out = append(out, p)
	}
	return errors.Join(out...)
}

type renamedProblem struct {
	msg string
	err error
}

func (r *renamedProblem) Error() string { return r.msg }
func (r *renamedProblem) Unwrap() error { return r.err }

// envName is the environment variable of a file key.
func envName(fileKey string) string {
	return EnvPrefix + "_" + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(fileKey))
}

// unwrap returns the keys of a file wrapped in one section named after
// the command, or raw as it is.
func unwrap(raw map[string]any, command string, s shape) map[string]any {
	inner, ok := raw[command].(map[string]any)
	if !ok || len(raw) != 1 {
		return raw
	}
	for _, l := range s.leaves {
		if l.file == command || strings.HasPrefix(l.file, command+".") {
			return raw // a section of the command's own
		}
	}
	return inner
}

// take removes the value at a dotted key from m and its parents emptied
// by that.
func take(m map[string]any, key string) (any, bool) {
	head, rest, nested := strings.Cut(key, ".")
	v, ok := m[head]
	if !ok {
		return nil, false
	}
	if !nested {
		delete(m, head)
		return v, true
	}
	sub, ok := v.(map[string]any)
	if !ok {
		return nil, false
	}
	v, ok = take(sub, rest)
	if ok && len(sub) == 0 {
		delete(m, head)
	}
	return v, ok
}

// put sets a dotted key of m.
func put(m map[string]any, key string, v any) {
	head, rest, nested := strings.Cut(key, ".")
	if !nested {
		m[head] = v
		return
	}
	sub, ok := m[head].(map[string]any)
	if !ok {
		sub = map[string]any{}
		m[head] = sub
	}
	put(sub, rest, v)
}

// leftovers returns the dotted keys left in m, sorted; empty sections
// are not keys.
func leftovers(m map[string]any, prefix string) []string {
	var out []string
	for k, v := range m {
		if prefix != "" {
			k = prefix + "." + k
		}
		if sub, ok := v.(map[string]any); ok {
			out = append(out, leftovers(sub, k)...)
			continue
		}
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// explain says what became of a key the file has but the struct does not.
func (s shape) explain(key string, renames map[string]string) string {
	now := key
	best := ""
	for old := range renames {
		if (key == old || strings.HasPrefix(key, old+".")) && len(old) > len(best) {
			best = old
		}
	}
	if best != "" {
		now = renames[best] + key[len(best):]
	}
	// within reports whether k is the key of l or inside it (a map's).
	within := func(k, l string) bool { return k == l || strings.HasPrefix(k, l+".") }
	for _, l := range s.leaves {
		switch {
		case within(now, l.file) && now != key:
			return fmt.Sprintf("key %s was renamed: it is %s now", key, now)
		case within(now, l.path) && l.file != l.path:
			return fmt.Sprintf("key %s is %s now (a tunable whose default needs no touching; tunables live under %s:)", key, l.file+now[len(l.path):], AdvancedKey)
		case strings.HasPrefix(key, AdvancedKey+".") && l.file == strings.TrimPrefix(key, AdvancedKey+"."):
			return fmt.Sprintf("key %s is not a tunable: set %s, outside %s:", key, l.file, AdvancedKey)
		case strings.HasPrefix(l.file, key+"."):
			return fmt.Sprintf("key %s is a section: give its keys, such as %s", key, l.file)
		}
	}
	return fmt.Sprintf("unknown key %s", key)
}

// oldEnv reports environment variables named after keys that moved or
// were renamed, which would otherwise be ignored.
func (s shape) oldEnv(renames map[string]string) []error {
	old := map[string]string{}
	for _, l := range s.leaves {
		if l.file != l.path {
			old[envName(l.path)] = envName(l.file)
		}
	}
	for o, n := range renames {
		old[envName(o)] = envName(n)
	}
	var errs []error
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		for o, n := range old {
			if name == o || strings.HasPrefix(name, o+"_") && s.isRenamedEnv(name, o) {
				errs = append(errs, fmt.Errorf("environment variable %s: that key moved; set %s%s", name, n, name[len(o):]))
			}
		}
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return errs
}

// isRenamedEnv reports whether name, which starts with the old variable
// prefix o of a renamed section, is not also a variable of today's keys
// (DAMSELFLY_SCHEDULER_LABELS_X is not a key; DAMSELFLY_SCHEDULER_SCHEDULERS is).
func (s shape) isRenamedEnv(name, o string) bool {
	for _, l := range s.leaves {
		if envName(l.file) == name {
			return false
		}
	}
	return true
}
