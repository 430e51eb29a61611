package rafs

import (
	"fmt"
	"path"
	"strings"
)

// MaxPrefetchEntries bounds the prefetch table.
const MaxPrefetchEntries = 1 << 20

// matchPrefetch returns the regular files named by patterns, in pattern
// order and then path order, each once. A pattern is an absolute path or a
// path.Match glob; a matching directory contributes every file below it.
func matchPrefetch(t *tree, patterns []string) ([]*node, error) {
	var out []*node
	seen := map[*inode]bool{}
	add := func(n *node) {
		if n.in.mode&ModeType == ModeReg && !seen[n.in] && len(out) < MaxPrefetchEntries {
			seen[n.in] = true
			out = append(out, n)
		}
	}
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
		walkTree(t.root, func(n *node) bool {
			ok, _ := path.Match(p, n.pathOf())
			if !ok {
				return true
			}
			walkTree(n, func(m *node) bool { add(m); return true })
			return false
		})
	}
	return out, nil
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
