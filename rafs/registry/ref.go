package registry

// Ref says where a blob comes from when no peer holds it: the origin
// registry, the repository, and the client's credentials for it.
type Ref struct {
	// Registry is the registry's base URL, "https://host[:port]" or
	// "http://host[:port]"; empty means the Client's default registry.
	Registry string
	// Repo is the repository, "library/debian".
	Repo string
	// Authorization is the client's Authorization header, forwarded to
	// the registry as it is; empty when the client sent none (the node's
	// own credentials are then used, if it has any).
	Authorization string
}
