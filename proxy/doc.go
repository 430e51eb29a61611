// Package proxy will hold the HTTP face of the peer: the OCI distribution
// mirror endpoint and the upstream registry client. It is built by the
// "peer and proxy" issue.
package proxy
