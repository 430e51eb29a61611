// Package snapshotter is damselfly's containerd snapshotter: it serves
// containerd's snapshots API (as a proxy plugin, over gRPC on a unix
// socket) so that containerd starts containers from RAFS images lazily.
//
// It is containerd's own overlayfs snapshotter (metadata in containerd's
// bolt store under the root directory, one directory per snapshot)
// decorated with remote snapshots:
//
//   - When containerd unpacks a layer with the remote-snapshot labels
//     (labels.go: the target snapshot, and the image reference, manifest
//     digest and layer digest that CRI, nerdctl and
//     snapshotters.AppendInfoHandlerWrapper pass), the snapshotter reads
//     the image's manifest from its registry (detect.go). A RAFS blob
//     layer is committed at once as an empty snapshot and containerd is
//     told it already exists, so it never downloads the blob; the
//     bootstrap layer is fetched and verified first (a missing or corrupt
//     one fails the pull naming the layer), then committed the same way.
//     Any other layer is an ordinary overlayfs layer that containerd
//     downloads and applies.
//   - A snapshot whose parent chain holds a RAFS bootstrap layer is
//     mounted as an overlay whose lower layer is the image's lazy RAFS
//     mount (mounts.go), served by one `damselfly mount` daemon per image
//     on the node (daemons.go), shared by every container of the image.
//
// containerd asks a snapshotter only about layers it counts as layers
// (images.IsLayerType: application/vnd.oci.image.layer.* and Docker's).
// The RAFS media types are under that prefix (rafs/mediatypes.go), so
// CRI, nerdctl and ctr-style clients bring RAFS layers here with the
// image's own media types. Images with the legacy types
// (application/vnd.damselfly.rafs.*) are recognised too, but containerd
// brings their layers only for a client that presents them as OCI
// layers. For a convert --index image CRI takes the original manifest;
// redirecting such a plain pull to the RAFS manifest in the same index
// here would be unsafe: the plain layers' chain IDs would name empty
// snapshots that other plain images sharing those layers would then
// reuse.
//
// Credentials: containerd hands a pull's credentials to no snapshotter.
// With cri.listen set, the snapshotter serves CRI's ImageService for the
// kubelet (package cricreds), forwards it to containerd's, and uses each
// pull's credentials for that repository's manifests, bootstraps and
// mount daemons (credentials.go: a docker config per daemon).
//
// Mount daemons are separate processes in their own session, so they
// outlive the snapshotter: a restarted snapshotter adopts them from the
// state it keeps under the root directory (mounts/<id>/daemon.json and
// the daemon's status socket), restarts a daemon that died at the same
// mountpoint, and stops a daemon when no active or view snapshot uses its
// image any more.
package snapshotter
