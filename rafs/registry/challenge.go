package registry

import (
	"errors"
	"strings"
)

// maxChallenge bounds the WWW-Authenticate header parsed.
const maxChallenge = 4 << 10

// challenge is a parsed WWW-Authenticate header: the scheme ("bearer" or
// "basic", lower case) and its parameters (names lower case).
type challenge struct {
	scheme string
	params map[string]string
}

var errChallenge = errors.New("malformed WWW-Authenticate challenge")

// parseChallenge parses one challenge, `Bearer realm="x",service="y"`.
// Values may be quoted strings (with backslash escapes) or tokens. Only
// the first challenge of a header is read.
func parseChallenge(h string) (challenge, error) {
	if len(h) > maxChallenge {
		return challenge{}, errChallenge
	}
	h = strings.TrimSpace(h)
	scheme, rest, _ := strings.Cut(h, " ")
	if scheme == "" || !isToken(scheme) {
		return challenge{}, errChallenge
	}
	c := challenge{scheme: strings.ToLower(scheme), params: map[string]string{}}
	s := strings.TrimSpace(rest)
	for s != "" {
		eq := strings.IndexByte(s, '=')
		if eq <= 0 {
			return challenge{}, errChallenge
		}
		name := strings.ToLower(strings.TrimSpace(s[:eq]))
		if !isToken(name) {
			return challenge{}, errChallenge
		}
		s = strings.TrimLeft(s[eq+1:], " ")
		var val string
		if strings.HasPrefix(s, `"`) {
			var b strings.Builder
			i, closed := 1, false
			for ; i < len(s); i++ {
				ch := s[i]
				if ch == '\\' && i+1 < len(s) {
					i++
					b.WriteByte(s[i])
					continue
				}
				if ch == '"' {
					closed = true
					i++
					break
				}
				b.WriteByte(ch)
			}
			if !closed {
				return challenge{}, errChallenge
			}
			val, s = b.String(), s[i:]
		} else {
			end := strings.IndexAny(s, ", ")
			if end < 0 {
				end = len(s)
			}
			val, s = s[:end], s[end:]
		}
		if _, dup := c.params[name]; !dup {
			c.params[name] = val
		}
		s = strings.TrimLeft(s, " ")
		if s == "" {
			break
		}
		if s[0] != ',' {
			return challenge{}, errChallenge
		}
		s = strings.TrimLeft(s[1:], " ")
	}
	return c, nil
}

// isToken reports whether s is a non-empty RFC 7230 token.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch >= 'a' && ch <= 'z', ch >= 'A' && ch <= 'Z', ch >= '0' && ch <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", ch) >= 0:
		default:
			return false
		}
	}
	return true
}
