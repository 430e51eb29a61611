package registry

import (
	"encoding/json"
	"strings"
)

// MaxRepoLen bounds a repository name (the distribution spec advises
// clients to stay under 255 characters with the host).
const MaxRepoLen = 255

// ValidRepo reports whether s matches the distribution spec's repository
// name grammar: path components of [a-z0-9]+ joined by ".", "_", "__" or
// runs of "-", separated by "/".
func ValidRepo(s string) bool {
	if s == "" || len(s) > MaxRepoLen {
		return false
	}
	for comp := range strings.SplitSeq(s, "/") {
		if !validComponent(comp) {
			return false
		}
	}
	return true
}

func validComponent(c string) bool {
	if c == "" || !alnum(c[0]) || !alnum(c[len(c)-1]) {
		return false
	}
	for i := 0; i < len(c); i++ {
		if alnum(c[i]) {
			continue
		}
		// A separator run: ".", "_", "__" or "-"+.
		j := i
		for j < len(c) && !alnum(c[j]) {
			j++
		}
		sep := c[i:j]
		switch {
		case sep == "." || sep == "_" || sep == "__":
		case strings.Trim(sep, "-") == "":
		default:
			return false
		}
		i = j - 1
	}
	return true
}

func alnum(b byte) bool { return b >= 'a' && b <= 'z' || b >= '0' && b <= '9' }

// ValidTag reports whether s is a tag: [a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}.
func ValidTag(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		ch := s[i]
		ok := ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '_' ||
			i > 0 && (ch == '.' || ch == '-')
		if !ok {
			return false
		}
	}
	return true
}

// ValidDigest reports whether s is a sha256 or sha512 digest in
// lower-case hex, the algorithms registries serve.
func ValidDigest(s string) bool {
	algo, hex, ok := strings.Cut(s, ":")
	if !ok {
		return false
	}
	switch {
	case algo == "sha256" && len(hex) == 64, algo == "sha512" && len(hex) == 128:
	default:
		return false
	}
	for i := 0; i < len(hex); i++ {
		if !(hex[i] >= '0' && hex[i] <= '9' || hex[i] >= 'a' && hex[i] <= 'f') {
			return false
		}
	}
	return true
}

// Quote bounds and quotes client input (a name, a digest) echoed in an
// error, so that a hostile client cannot fill logs or responses.
func Quote(s string) string {
	if len(s) > 128 {
		s = s[:128] + "..."
	}
	b, _ := json.Marshal(s)
	return string(b)
}
