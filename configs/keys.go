package configs

import (
	"reflect"
	"strings"
	"time"
)

// AdvancedKey is the section of a daemon's file that holds the tunables:
// fields tagged `config:"advanced"` (and everything inside such a field)
// are read from advanced.<their key> instead of <their key>. Their
// defaults need no touching; an operator's part of the file is the rest.
const AdvancedKey = "advanced"

// leaf is one key of a config struct.
type leaf struct {
	// path is the key in the struct: the mapstructure names from the
	// root, joined by dots (squashed structs add none).
	path string
	// file is the key in the file: path, or advanced.path for a tunable.
	file string
	// index reaches the field from the root value.
	index []int
}

// shape is the keys of one config type.
type shape struct {
	leaves []leaf
	// moved maps the struct path of every field tagged advanced (a leaf
	// or a whole section) to its file path.
	moved map[string]string
}

var durationType = reflect.TypeOf(time.Duration(0))

// shapeOf walks t's exported fields by their mapstructure tags.
func shapeOf(t reflect.Type) shape {
	s := shape{moved: map[string]string{}}
	s.walk(t, "", false, nil)
	return s
}

func (s *shape) walk(t reflect.Type, prefix string, advanced bool, index []int) {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
		if name == "-" {
			continue
		}
		idx := append(append([]int(nil), index...), i)
		adv := advanced || f.Tag.Get("config") == "advanced"
		if opts == "squash" && f.Type.Kind() == reflect.Struct {
			s.walk(f.Type, prefix, adv, idx)
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		path := name
		if prefix != "" {
			path = prefix + "." + name
		}
		if adv && !advanced {
			s.moved[path] = AdvancedKey + "." + path
		}
		if f.Type.Kind() == reflect.Struct && f.Type != durationType {
			s.walk(f.Type, path, adv, idx)
			continue
		}
		l := leaf{path: path, file: path, index: idx}
		if adv {
			l.file = AdvancedKey + "." + path
		}
		s.leaves = append(s.leaves, l)
	}
}

// fileKey returns the file's name for a key path of the struct (a leaf,
// a section, or a problem's key such as "node.fetch_deadline").
func (s shape) fileKey(path string) string {
	best := ""
	for p := range s.moved {
		if (path == p || strings.HasPrefix(path, p+".")) && len(p) > len(best) {
			best = p
		}
	}
	if best == "" {
		return path
	}
	return s.moved[best] + path[len(best):]
}
