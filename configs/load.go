package configs

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
)

// Load resolves a daemon's typed config: def (the defaults), then file
// (if not empty; YAML/JSON/TOML), then DAMSELFLY_* environment variables
// named after the keys (mount's backend.proxy.url is
// DAMSELFLY_BACKEND_PROXY_URL; keys follow the struct's mapstructure
// tags). Unknown keys in the file are an error, so a typo does not pass
// silently.
func Load[T any](file string, def T) (T, error) {
	v := viper.New()
	v.SetEnvPrefix(EnvPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_", "-", "_"))
	v.AutomaticEnv()
	setDefaults(v, "", reflect.ValueOf(def))
	if file != "" {
		v.SetConfigFile(file)
		if err := v.ReadInConfig(); err != nil {
			return def, fmt.Errorf("read config %s: %w", file, err)
		}
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

// setDefaults registers every leaf key of the struct so that viper knows
// it, which is what lets environment variables override it.
func setDefaults(v *viper.Viper, prefix string, val reflect.Value) {
	if val.Kind() == reflect.Pointer {
		if val.IsNil() {
			return
		}
		val = val.Elem()
	}
	t := val.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name := f.Tag.Get("mapstructure")
		if name == "-" {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		key := name
		if prefix != "" {
			key = prefix + "." + name
		}
		fv := val.Field(i)
		if fv.Kind() == reflect.Struct && fv.Type() != reflect.TypeOf(time.Duration(0)) {
			setDefaults(v, key, fv)
			continue
		}
		if fv.Kind() == reflect.Pointer && fv.IsNil() {
			v.SetDefault(key, nil)
			continue
		}
		v.SetDefault(key, fv.Interface())
	}
}
