package piece

import "io"

// Recorder takes a blob's bytes from the origin and, once the whole
// blob matched its digest, keeps its pieces for peers. Write never fails
// (a recorder that cannot keep the blob says so in Finish). Not safe for
// concurrent use.
type Recorder interface {
	io.Writer
	// Finish ends the recording. With complete (every byte of the blob
	// was written), the node checks the blob digest and, if it matches,
	// keeps and announces the pieces; otherwise, or without complete, it
	// drops them. It returns why the blob was not kept.
	Finish(complete bool) error
}
