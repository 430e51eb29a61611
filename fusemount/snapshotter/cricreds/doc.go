// Package cricreds keeps the registry credentials the kubelet hands
// containerd with each image pull, so that the snapshotter and its mount
// daemons can read a private RAFS image the node's docker config does
// not cover.
//
// containerd does not pass a pull's credentials to snapshotters (its
// snapshots API has no place for them). Like stargz-snapshotter's
// cri_keychain (and soci's and nydus-snapshotter's), the snapshotter
// therefore serves CRI's ImageService itself (service.go): the kubelet's
// --image-service-endpoint points at it, every call is forwarded to
// containerd's CRI, and PullImage's credentials are recorded in a Store
// (store.go) first, because containerd asks the snapshotter about the
// image's layers while the forwarded PullImage runs.
//
// A Store keys credentials by repository (registry host and repository
// path, as go-containerregistry normalises them: docker.io is
// index.docker.io) and uses them for that repository only: never for
// another repository of the same registry, nor for a request that names
// only the registry. The latest PullImage of a repository decides, one
// without credentials included, so credentials a pull handed over are
// used no longer than the next pull of that repository says. This is
// the node-level sharing Kubernetes already has for pulled images (a pod
// may run an image another pod's credentials pulled, unless the cluster
// uses AlwaysPullImages); what the origin registry allows is still
// checked by the peer for every mount daemon's credentials
// (proxy/authz.go), so they never widen who may read.
package cricreds
