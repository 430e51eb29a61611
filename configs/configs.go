// Package configs loads damselfly's configuration: a YAML (or JSON/TOML)
// file, then DAMSELFLY_* environment variables, then command-line flags,
// each overriding the one before. Library packages take typed Config
// structs; only this package and cmd/ know about viper.
package configs

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"gopkg.in/yaml.v3"
)

// EnvPrefix prefixes every environment override: the key convert.chunk_size
// is DAMSELFLY_CONVERT_CHUNK_SIZE.
const EnvPrefix = "DAMSELFLY"

// Loader resolves one command's settings from file, environment and flags.
type Loader struct {
	v       *viper.Viper
	section string
}

// New reads file (if not empty) and returns a loader for the keys of
// section ("convert", "mount", ...).
func New(file, section string) (*Loader, error) {
	v := viper.New()
	v.SetEnvPrefix(EnvPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_", "-", "_"))
	v.AutomaticEnv()
	if file != "" {
		v.SetConfigFile(file)
		if err := v.ReadInConfig(); err != nil {
			return nil, fmt.Errorf("read config %s: %w", file, err)
		}
		// One file shape for every command: keys at the top level, as
		// the daemons' sample files have them, or under the command's
		// name.
		if !v.InConfig(section) {
			if err := v.MergeConfigMap(map[string]any{section: v.AllSettings()}); err != nil {
				return nil, fmt.Errorf("read config %s: %w", file, err)
			}
		}
	}
	return &Loader{v: v, section: section}, nil
}

// BindFlags makes every flag of fs a key of the section, so a flag set on
// the command line wins over the environment and the file, and an unset
// flag's default loses to both. Flag names use dashes, keys underscores.
func (l *Loader) BindFlags(fs *pflag.FlagSet) error {
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" || f.Name == "config" {
			return
		}
		key := l.section + "." + strings.ReplaceAll(f.Name, "-", "_")
		errs = append(errs, l.v.BindPFlag(key, f))
		errs = append(errs, l.v.BindEnv(key))
	})
	return errors.Join(errs...)
}

// Int, String, Bool, StringSlice read one resolved key of the section.
func (l *Loader) Int(key string) int       { return l.v.GetInt(l.key(key)) }
func (l *Loader) String(key string) string { return l.v.GetString(l.key(key)) }
func (l *Loader) Bool(key string) bool     { return l.v.GetBool(l.key(key)) }
func (l *Loader) StringSlice(key string) []string {
	return l.v.GetStringSlice(l.key(key))
}

func (l *Loader) key(k string) string { return l.section + "." + strings.ReplaceAll(k, "-", "_") }

// Settings returns every resolved key of the section, for --print-config.
func (l *Loader) Settings() map[string]any {
	if m, ok := l.v.AllSettings()[l.section].(map[string]any); ok {
		return m
	}
	return map[string]any{}
}

// PrintSettings writes the section's resolved keys as YAML, top level (a
// file --config takes back).
func (l *Loader) PrintSettings(w io.Writer) error {
	m := l.Settings()
	delete(m, "print_config")
	b, err := yaml.Marshal(m)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}
