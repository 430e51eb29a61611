package cache

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"

	"damselfly/rafs"
)

func TestHeaderRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		meta Meta
	}{
		{"raw", Meta{Size: 4096, StoredSize: 4096}},
		{"compressed", Meta{Compressed: true, Size: 1 << 20, StoredSize: 1234}},
		{"empty", Meta{}},
		{"largest", Meta{Size: rafs.MaxChunkSize, StoredSize: rafs.MaxChunkSize}},
	}
	for _, tt := range tests {
		for _, algo := range []rafs.DigestAlgo{rafs.DigestSHA256, rafs.DigestBlake3, rafs.DigestStoredBlake3} {
			t.Run(tt.name+"/"+algo.String(), func(t *testing.T) {
				want := header{key: Key{Algo: algo, Digest: fakeDigest(7).Digest}, meta: tt.meta, payloadCRC: 0xdeadbeef}
				var b [headerSize]byte
				encodeHeader(&b, want)
				got, err := decodeHeader(b[:])
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
				if got != want {
					t.Errorf("got %+v, want %+v", got, want)
				}
				if v, wantV := binary.LittleEndian.Uint16(b[offVersion:]), map[rafs.DigestAlgo]uint16{
					rafs.DigestSHA256: 1, rafs.DigestBlake3: 2, rafs.DigestStoredBlake3: 3}[algo]; v != wantV {
					t.Errorf("version %d, want %d", v, wantV)
				}
			})
		}
	}
}

// resum recomputes the header CRC, so that a test reaches the check after it.
func resum(b []byte) {
	binary.LittleEndian.PutUint32(b[offHeaderCRC:], crc32.Checksum(b[:offHeaderCRC], castagnoli))
}

// withVersionFlags is a damage: the header's version and flags set to
// v and f, its CRC made right again.
func withVersionFlags(v, f uint16) func([]byte) []byte {
	return func(b []byte) []byte {
		binary.LittleEndian.PutUint16(b[offVersion:], v)
		binary.LittleEndian.PutUint16(b[offFlags:], f)
		resum(b)
		return b
	}
}

func TestDecodeHeaderRejects(t *testing.T) {
	t.Parallel()
	le := binary.LittleEndian
	tests := []struct {
		name   string
		mutate func(b []byte) []byte
	}{
		{"short", func(b []byte) []byte { return b[:headerSize-1] }},
		{"magic", func(b []byte) []byte { b[0] ^= 1; resum(b); return b }},
		{"header crc", func(b []byte) []byte { b[offSize] ^= 1; return b }},
		{"version", func(b []byte) []byte { le.PutUint16(b[offVersion:], 3); resum(b); return b }},
		{"version 2 without blake3", func(b []byte) []byte { le.PutUint16(b[offVersion:], 2); resum(b); return b }},
		{"blake3 in version 1", func(b []byte) []byte { le.PutUint16(b[offFlags:], flagBlake3); resum(b); return b }},
		{"stored-digest flag in version 1", withVersionFlags(1, flagStored)},
		{"unknown flag", withVersionFlags(1, 1<<3)},
		{"stored-digest flag in version 2", withVersionFlags(2, flagStored)},
		{"version 3 with the blake3 flag", withVersionFlags(3, flagBlake3)},
		{"version 3 with both algorithm flags", withVersionFlags(3, flagBlake3|flagStored)},
		{"version 4", withVersionFlags(4, flagStored)},
		{"reserved", func(b []byte) []byte { le.PutUint32(b[offReserved:], 1); resum(b); return b }},
		{"huge size", func(b []byte) []byte { le.PutUint32(b[offSize:], 1<<31); resum(b); return b }},
		{"huge stored size", func(b []byte) []byte {
			le.PutUint16(b[offFlags:], flagCompressed)
			le.PutUint32(b[offStoredSize:], 0xffffffff)
			resum(b)
			return b
		}},
		{"raw size mismatch", func(b []byte) []byte { le.PutUint32(b[offStoredSize:], 100); resum(b); return b }},
		{"compressed empty", func(b []byte) []byte {
			le.PutUint16(b[offFlags:], flagCompressed)
			le.PutUint32(b[offStoredSize:], 0)
			resum(b)
			return b
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b [headerSize]byte
			encodeHeader(&b, header{key: fakeDigest(1), meta: rawMeta(4096)})
			_, err := decodeHeader(tt.mutate(b[:]))
			if !errors.Is(err, errCorrupt) {
				t.Errorf("got %v, want errCorrupt", err)
			}
		})
	}
}

func FuzzDecodeHeader(f *testing.F) {
	var b [headerSize]byte
	encodeHeader(&b, header{key: fakeDigest(1), meta: rawMeta(4096), payloadCRC: 5})
	f.Add(b[:])
	encodeHeader(&b, header{key: fakeDigest(2), meta: Meta{Compressed: true, Size: 1 << 20, StoredSize: 99}})
	f.Add(b[:])
	encodeHeader(&b, header{key: Key{Algo: rafs.DigestBlake3, Digest: fakeDigest(3).Digest}, meta: rawMeta(4096)})
	f.Add(b[:])
	encodeHeader(&b, header{key: Key{Algo: rafs.DigestStoredBlake3, Digest: fakeDigest(4).Digest}, meta: Meta{Compressed: true, Size: 1 << 20, StoredSize: 99}})
	f.Add(b[:])
	f.Add(make([]byte, headerSize))
	f.Fuzz(func(t *testing.T, in []byte) {
		h, err := decodeHeader(in)
		if err != nil {
			if !errors.Is(err, errCorrupt) {
				t.Fatalf("error %v does not wrap errCorrupt", err)
			}
			return
		}
		if err := h.meta.check(); err != nil {
			t.Fatalf("decoded meta fails check: %v", err)
		}
		var out [headerSize]byte
		encodeHeader(&out, h)
		if string(out[:]) != string(in[:headerSize]) {
			t.Fatalf("re-encoding differs:\n got %x\nwant %x", out, in[:headerSize])
		}
	})
}

func TestParseEntryName(t *testing.T) {
	t.Parallel()
	d := fakeDigest(3)
	hex := newPaths("/x").entry(d)[len("/x/chunks/00/"):]
	tests := []struct {
		name string
		in   string
		ok   bool
	}{
		{"entry", hex, true},
		{"upper case", "AB" + hex[2:], false},
		{"short", hex[:63], false},
		{"long", hex + "0", false},
		{"not hex", "zz" + hex[2:], false},
		{"temp", tempPrefix + hex, false},
		{"bad suffix", hex + ".b3x", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseEntryName(tt.in)
			if ok != tt.ok || ok && got != d {
				t.Errorf("parseEntryName(%q) = %s, %v; want ok %v", tt.in, got, ok, tt.ok)
			}
		})
	}
	for _, algo := range []rafs.DigestAlgo{rafs.DigestBlake3, rafs.DigestStoredBlake3} {
		k := Key{Algo: algo, Digest: d.Digest}
		if got, ok := parseEntryName(entryName(k)); !ok || got != k {
			t.Errorf("parseEntryName(%q) = %s, %v; want %s", entryName(k), got, ok, k)
		}
	}
}
