package configs

import (
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Print writes cfg as the file that gives it, for --print-config: the
// keys of Load in the struct's order, operators' keys first and the
// tunables under advanced:. Durations read as in a file ("30s").
func Print(w io.Writer, cfg any) error {
	val := reflect.ValueOf(cfg)
	s := shapeOf(val.Type())
	doc := &yaml.Node{Kind: yaml.MappingNode}
	adv := &yaml.Node{Kind: yaml.MappingNode}
	for _, l := range s.leaves {
		n, err := leafNode(val.FieldByIndex(l.index))
		if err != nil {
			return fmt.Errorf("print %s: %w", l.file, err)
		}
		if key, ok := strings.CutPrefix(l.file, AdvancedKey+"."); ok {
			place(adv, key, n)
		} else {
			place(doc, l.file, n)
		}
	}
	if len(adv.Content) > 0 {
		doc.Content = append(doc.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: AdvancedKey}, adv)
	}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return err
	}
	return enc.Close()
}

func leafNode(v reflect.Value) (*yaml.Node, error) {
	n := &yaml.Node{}
	if v.Type() == durationType {
		n.Kind, n.Tag, n.Value = yaml.ScalarNode, "!!str", time.Duration(v.Int()).String()
		return n, nil
	}
	if (v.Kind() == reflect.Slice || v.Kind() == reflect.Map) && v.Len() == 0 {
		kind := yaml.SequenceNode
		if v.Kind() == reflect.Map {
			kind = yaml.MappingNode
		}
		return &yaml.Node{Kind: kind, Style: yaml.FlowStyle}, nil
	}
	err := n.Encode(v.Interface())
	return n, err
}

// place puts n at a dotted key of the mapping m, creating sections.
func place(m *yaml.Node, key string, n *yaml.Node) {
	head, rest, nested := strings.Cut(key, ".")
	if !nested {
		m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: head}, n)
		return
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == head {
			place(m.Content[i+1], rest, n)
			return
		}
	}
	sub := &yaml.Node{Kind: yaml.MappingNode}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: head}, sub)
	place(sub, rest, n)
}
