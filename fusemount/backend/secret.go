package backend

import (
	"encoding/json"
	"log/slog"
	"net/url"
)

// Redacted is what a Secret, and the password of a URL, print as.
const Redacted = "REDACTED"

// Secret is a credential in a configuration (Config.Auth). It prints,
// logs and marshals (fmt, slog, JSON, YAML) as Redacted, or "" when
// empty, so that a configuration can be shown (--print-config, the
// status API) without it; Reveal returns it for use.
type Secret string

// Reveal returns the secret itself.
func (s Secret) Reveal() string { return string(s) }

// String implements fmt.Stringer.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return Redacted
}

// GoString implements fmt.GoStringer, for %#v.
func (s Secret) GoString() string { return `"` + s.String() + `"` }

// LogValue implements slog.LogValuer.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalJSON implements json.Marshaler.
func (s Secret) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// MarshalYAML implements yaml.v3's Marshaler.
func (s Secret) MarshalYAML() (any, error) { return s.String(), nil }

// MarshalText implements encoding.TextMarshaler, which other encoders
// (TOML, say) use.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// RedactURL returns s with the password of its userinfo, if any,
// replaced by Redacted, for logs and error messages; a string that does
// not parse as a URL is not shown at all.
func RedactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(a malformed URL)"
	}
	return u.Redacted()
}
