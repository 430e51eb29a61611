package bench

import (
	"context"
	"fmt"

	"damselfly/rafs"
	"damselfly/rafs/image"
)

// DedupCheck is what CheckDedup found for an image converted with another
// as its chunk dictionary.
type DedupCheck struct {
	DictChunks int `json:"dict_chunks"` // distinct chunks of the dictionary image
	Chunks     int `json:"chunks"`      // distinct chunks of the image
	Shared     int `json:"shared"`      // of those, the dictionary has
	Unique     int `json:"unique"`      // of those, the dictionary lacks: what the image must store
	// NewBlobs are the image's blobs that the dictionary does not list.
	NewBlobs int `json:"new_blobs"`
	// NewBlobChunks counts the chunk records that live in new blobs, and
	// NewBlobTableChunks the chunk counts of those blobs' table entries.
	NewBlobChunks      int    `json:"new_blob_chunks"`
	NewBlobTableChunks uint64 `json:"new_blob_table_chunks"`
	// Duplicates are chunks in new blobs that the dictionary already has.
	Duplicates int `json:"duplicates"`
	// NewBlobBytes is the size of the new blobs; NewChunkBytes the stored
	// bytes of the chunks in them. Equal when the blobs hold nothing else.
	NewBlobBytes  uint64 `json:"new_blob_bytes"`
	NewChunkBytes uint64 `json:"new_chunk_bytes"`
	NewRawBytes   uint64 `json:"new_raw_bytes"` // uncompressed bytes of those chunks
}

// OK reports whether the new blobs hold exactly the image's chunks that
// the dictionary lacks, and nothing else.
func (c DedupCheck) OK() bool {
	return c.Duplicates == 0 && c.NewBlobChunks == c.Unique && uint64(c.NewBlobChunks) == c.NewBlobTableChunks &&
		c.NewBlobBytes == c.NewChunkBytes
}

// CheckDedup opens the RAFS images dict and img (any reference image.Open
// takes) and checks, from their bootstraps, that img stores no chunk that
// dict has: every chunk in a blob of img that dict does not list must be
// absent from dict, and the new blobs must hold exactly img's chunks that
// dict lacks.
func CheckDedup(ctx context.Context, dict, img string) (DedupCheck, error) {
	var c DedupCheck
	di, err := image.Open(ctx, dict, image.Options{})
	if err != nil {
		return c, err
	}
	defer di.Close()
	ii, err := image.Open(ctx, img, image.Options{})
	if err != nil {
		return c, err
	}
	defer ii.Close()

	dictChunks, err := chunkDigests(di.Bootstrap())
	if err != nil {
		return c, fmt.Errorf("%s: %w", dict, err)
	}
	dictBlobs := map[rafs.Digest]bool{}
	dbs, err := di.Bootstrap().Blobs()
	if err != nil {
		return c, err
	}
	for _, b := range dbs {
		dictBlobs[b.Digest] = true
	}
	c.DictChunks = len(dictChunks)

	b := ii.Bootstrap()
	blobs, err := b.Blobs()
	if err != nil {
		return c, err
	}
	isNew := make([]bool, len(blobs))
	for i, bl := range blobs {
		if !dictBlobs[bl.Digest] {
			isNew[i] = true
			c.NewBlobs++
			c.NewBlobBytes += bl.CompressedSize
			c.NewBlobTableChunks += uint64(bl.ChunkCount)
		}
	}
	seen := map[rafs.Digest]bool{}
	for i := range b.ChunkCount() {
		ch, err := b.Chunk(i)
		if err != nil {
			return c, fmt.Errorf("%s: %w", img, err)
		}
		if seen[ch.Digest] {
			continue
		}
		seen[ch.Digest] = true
		inDict := dictChunks[ch.Digest]
		if inDict {
			c.Shared++
		} else {
			c.Unique++
		}
		if int(ch.Blob) < len(isNew) && isNew[ch.Blob] {
			c.NewBlobChunks++
			c.NewChunkBytes += uint64(ch.CompressedSize)
			c.NewRawBytes += uint64(ch.Size)
			if inDict {
				c.Duplicates++
			}
		}
	}
	c.Chunks = len(seen)
	return c, nil
}

func chunkDigests(b *rafs.Bootstrap) (map[rafs.Digest]bool, error) {
	out := make(map[rafs.Digest]bool, b.ChunkCount())
	for i := range b.ChunkCount() {
		ch, err := b.Chunk(i)
		if err != nil {
			return nil, err
		}
		out[ch.Digest] = true
	}
	return out, nil
}
