// Package field names configuration problems by their key paths. A
// library's Validate reports each problem as "key: what is wrong"; the
// daemon whose configuration holds that library's section under "proxy"
// passes the errors through In("proxy", err), so each reads
// "proxy.key: what is wrong", the full path an operator looks for in the
// file. It has no dependencies, so library packages may use it.
package field

import (
	"errors"
	"strings"
)

// In returns err with every one of its problems (the leaves of an
// errors.Join tree) prefixed with section and a dot; nil for nil.
func In(section string, err error) error {
	if err == nil {
		return nil
	}
	var out []error
	for _, e := range Problems(err) {
		out = append(out, &prefixed{section: section, err: e})
	}
	return errors.Join(out...)
}

// Problems returns the leaves of err's errors.Join tree: each problem on
// its own. A wrapped join (fmt.Errorf("...: %w", errors.Join(...))) is
// one problem.
func Problems(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, Problems(e)...)
		}
		return out
	}
	return []error{err}
}

// prefixed is one problem under a section. A problem that already names
// a key ("key: ...", "key[2]: ...") gets "section.key"; any other gets
// "section: ...".
type prefixed struct {
	section string
	err     error
}

func (p *prefixed) Error() string {
	msg := p.err.Error()
	if i := strings.IndexAny(msg, ": ["); i > 0 && isKey(msg[:i]) && (msg[i] == '[' || strings.HasPrefix(msg[i:], ": ")) {
		return p.section + "." + msg
	}
	return p.section + ": " + msg
}

func (p *prefixed) Unwrap() error { return p.err }

// isKey reports whether s looks like a key path: lower case letters,
// digits, underscores and dots.
func isKey(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '.') {
			return false
		}
	}
	return s != ""
}
