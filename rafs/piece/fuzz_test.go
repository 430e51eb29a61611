package piece

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"testing"
)

func putCRC(dst, body []byte) {
	binary.LittleEndian.PutUint32(dst, crc32.Checksum(body, crcTable))
}

// FuzzDecode feeds arbitrary bytes to Decode: it must not panic, and a
// table it accepts keeps the rules and encodes back to the same bytes.
func FuzzDecode(f *testing.F) {
	tb, _ := build(f, blobOf(3*MinSize+7, 4), MinSize, 5000)
	good := tb.Encode()
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add([]byte(magic))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > headerSize+4 {
			// Most inputs would stop at the CRC; fix it so the fields
			// behind it are explored too.
			data = bytes.Clone(data)
			putCRC(data[len(data)-4:], data[:len(data)-4])
		}
		got, err := Decode(data)
		if err != nil {
			return
		}
		if err := got.Check(); err != nil {
			t.Fatalf("accepted a table that breaks the rules: %v", err)
		}
		if !bytes.Equal(got.Encode(), data) {
			t.Fatal("re-encoded table differs")
		}
		if f, l := got.Covering(0, got.Size); f != 0 || l != got.Count() {
			t.Fatalf("the whole blob is covered by pieces %d..%d of %d", f, l, got.Count())
		}
		last := got.Chunk(got.Count() - 1)
		if int64(last.CompressedOffset)+int64(last.Size) != got.Size || last.Size == 0 {
			t.Fatalf("last piece %+v does not end the blob of %d", last, got.Size)
		}
	})
}
