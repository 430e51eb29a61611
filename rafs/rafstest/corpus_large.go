package rafstest

import "fmt"

// Sizes of the "large" image.
const (
	largeFileSize   = 100<<20 + 12345 // mixed content, not chunk aligned
	largeZeroSize   = 100 << 20
	manyFiles       = 50000
	manyFilesPerDir = 200
)

// largeLayers builds the "large" image: one layer of many small files and one
// of two big files.
func largeLayers() []Layer {
	es := make([]Entry, 0, manyFiles+manyFiles/manyFilesPerDir+1)
	es = append(es, dir("many", 0o755))
	modes := []int64{0o755, 0o750, 0o700, 0o775}
	for i := range manyFiles {
		d := fmt.Sprintf("many/d%03d", i/manyFilesPerDir)
		if i%manyFilesPerDir == 0 {
			es = append(es, dir(d, modes[(i/manyFilesPerDir)%len(modes)]))
		}
		// Sizes up to 1.5 KiB; one file in ten repeats an earlier file's
		// bytes, so whole-file dedup of small files has work to do.
		j := i
		if i%10 == 5 {
			j = i % 50
		}
		size := int64(j*37) % 1500
		if j%1000 == 0 {
			size = 0
		}
		es = append(es, file(fmt.Sprintf("%s/f%05d", d, i), 0o644, randomContent(uint64(10000+j), size)))
	}
	many := stamp(91, es...)
	big := stamp(92,
		dir("big", 0o755),
		file("big/mixed", 0o644, mixedContent(93, largeFileSize)),
		file("big/zeros", 0o644, zeroContent(largeZeroSize)),
	)
	return []Layer{many, big}
}
