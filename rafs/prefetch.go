package rafs

import (
	"fmt"
	"path"
	"strings"
)

// MaxPrefetchEntries bounds the prefetch table.
const MaxPrefetchEntries = 1 << 20

// prefetchSet is a compiled list of prefetch patterns: absolute, clean
// paths or path.Match globs, in the order given. Literal paths are also
// kept in a set, so that matching a file against hundreds of them (a
// recorded startup trace) is a few map lookups.
type prefetchSet struct {
	patterns []string
	literal  map[string]bool
	globs    []string
}

// compilePrefetch cleans patterns (blank lines and # comments are
// skipped; a relative path is taken from the root) and checks each glob.
func compilePrefetch(patterns []string) (*prefetchSet, error) {
	s := &prefetchSet{literal: map[string]bool{}}
	for _, p := range patterns {
		p = strings.TrimSpace(p)
		if p == "" || strings.HasPrefix(p, "#") {
			continue
		}
		if !strings.HasPrefix(p, "/") {
			p = "/" + p
		}
		p = path.Clean(p)
		if _, err := path.Match(p, "/"); err != nil {
			return nil, fmt.Errorf("prefetch pattern %q: %w", p, err)
		}
		s.patterns = append(s.patterns, p)
		if strings.ContainsAny(p, `*?[\`) {
			s.globs = append(s.globs, p)
		} else {
			s.literal[p] = true
		}
	}
	return s, nil
}

// empty reports whether no pattern was given.
func (s *prefetchSet) empty() bool { return s == nil || len(s.patterns) == 0 }

// covers reports whether the file at p (absolute and clean) is named by a
// pattern: one matches p or a directory above it.
func (s *prefetchSet) covers(p string) bool {
	if s.empty() {
		return false
	}
	for q := p; ; q = path.Dir(q) {
		if s.literal[q] {
			return true
		}
		for _, g := range s.globs {
			if ok, _ := path.Match(g, q); ok {
				return true
			}
		}
		if q == "/" {
			return false
		}
	}
}

// matchPrefetch returns the regular files named by s, in pattern order
// and then path order, each once. A matching directory contributes every
// file below it.
func matchPrefetch(t *tree, s *prefetchSet) []*node {
	var out []*node
	if s.empty() {
		return out
	}
	seen := map[*inode]bool{}
	add := func(n *node) {
		if n.in.mode&ModeType == ModeReg && !seen[n.in] && len(out) < MaxPrefetchEntries {
			seen[n.in] = true
			out = append(out, n)
		}
	}
	addAll := func(n *node) {
		walkTree(n, func(m *node) bool { add(m); return true })
	}
	for _, p := range s.patterns {
		if s.literal[p] {
			if n := t.root.find(p); n != nil {
				addAll(n)
			}
			continue
		}
		walkTree(t.root, func(n *node) bool {
			ok, _ := path.Match(p, n.pathOf())
			if !ok {
				return true
			}
			addAll(n)
			return false
		})
	}
	return out
}

// find returns the node at the absolute clean path p below n (the root),
// or nil.
func (n *node) find(p string) *node {
	cur := n
	for _, part := range strings.Split(strings.TrimPrefix(p, "/"), "/") {
		if part == "" {
			continue
		}
		if cur.children == nil {
			return nil
		}
		if cur = cur.children[part]; cur == nil {
			return nil
		}
	}
	return cur
}

// walkTree visits n and its descendants depth first in name order; fn
// returning false skips a node's children.
func walkTree(n *node, fn func(*node) bool) {
	if !fn(n) || n.children == nil {
		return
	}
	for _, c := range n.sortedChildren() {
		walkTree(c, fn)
	}
}

// countTree fills the tree's part of the build statistics.
func countTree(t *tree, s *BuildStats) {
	seen := map[*inode]bool{}
	walkTree(t.root, func(n *node) bool {
		if seen[n.in] {
			s.Hardlinks++
			return true
		}
		seen[n.in] = true
		switch n.in.mode & ModeType {
		case ModeReg:
			s.Files++
		case ModeDir:
			s.Dirs++
		default:
			s.Others++
		}
		return true
	})
}
