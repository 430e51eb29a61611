package main

import (
	"errors"
	"io/fs"
	"testing"

	"damselfly/rafs"
)

// fakeTable is files as lists of chunk indexes, each chunk's stored
// size 100 times its index plus one.
type fakeTable map[string][]uint32

func (f fakeTable) LookupPath(p string) (rafs.Inode, error) {
	chunks, ok := f[p]
	if !ok {
		return rafs.Inode{}, fs.ErrNotExist
	}
	in := rafs.Inode{Ino: f.ino(p), Mode: rafs.ModeReg | 0o644, DataCount: uint32(len(chunks))}
	if chunks == nil {
		in.Mode, in.DataCount = rafs.ModeDir|0o755, 0
	}
	return in, nil
}

// ino numbers the paths in sorted order, from 1.
func (f fakeTable) ino(p string) rafs.Ino {
	ino := rafs.Ino(1)
	for q := range f {
		if q < p {
			ino++
		}
	}
	return ino
}

func (f fakeTable) FileChunk(in rafs.Inode, i uint32) (rafs.Chunk, error) {
	for p, chunks := range f {
		if f.ino(p) == in.Ino && i < uint32(len(chunks)) {
			return rafs.Chunk{Index: chunks[i], CompressedSize: 100*chunks[i] + 1}, nil
		}
	}
	return rafs.Chunk{}, errors.New("no such chunk")
}

func TestChunkBytes(t *testing.T) {
	t.Parallel()
	tab := fakeTable{"a": {1, 2}, "b": {2, 3}, "c": {4, 4}, "d": nil, "empty": {}}
	tests := []struct {
		name    string
		paths   []string
		want    int64
		wantErr bool
	}{
		{"one file", []string{"a"}, 101 + 201, false},
		{"shared chunk counts once", []string{"a", "b"}, 101 + 201 + 301, false},
		{"chunk twice in a file", []string{"c"}, 401, false},
		{"file read twice", []string{"a", "a"}, 302, false},
		{"empty file", []string{"empty"}, 0, false},
		{"none", nil, 0, false},
		{"directory", []string{"d"}, 0, true},
		{"missing", []string{"zz"}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := chunkBytes(tab, tt.paths)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %t", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("got %d, want %d", got, tt.want)
			}
		})
	}
}
