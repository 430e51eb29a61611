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
// layers.
//
// A convert --index image: containerd's platform matcher ignores
// platform.features, so CRI unpacks the index's original manifest.
// When a remote-snapshot Prepare finds an ordinary manifest, the
// snapshotter reads the reference the client pulled (CRI's image-ref
// label) again (sibling.go). If it names an index that lists the
// manifest being unpacked (so a tag moved since containerd resolved it
// cannot swap images) and a manifest with rafs.PlatformFeature that is
// RAFS and whose rafs.AnnotationSource is that manifest, this RAFS
// "sibling" serves the image: the original's top layer (found by chain
// ID, so a layer that appears twice is placed right) is committed as
// the sibling's bootstrap layer, checked first as for a RAFS-only pull,
// and its lower layers as empty "source" layers. The labels are those a
// RAFS pull leaves, so the mount daemon is the sibling's and is
// started, shared, stopped and adopted as for any RAFS image. Whatever
// does not check out leaves the layer to containerd; the answer is
// cached per (reference, manifest) for the pull.
//
// The hazard of empty source layers: their names are containerd's chain
// IDs, which every image with the same bottom layers shares, and
// containerd (its metadata store, per namespace) reuses a snapshot by
// chain ID without asking the snapshotter. A plain image on the same
// base would then stand on an empty layer. Chain IDs cannot be made
// private to the RAFS image, and a snapshotter cannot refuse the reuse;
// per-layer lazy snapshotters (stargz, SOCI) avoid the question because
// each of their snapshots holds its own layer's files, which a merged
// RAFS bootstrap does not give layer by layer. So the choice here is to
// make the reuse correct instead (fill.go): before any snapshot is made
// on a chain that would mount an empty source layer (one not below a
// bootstrap layer), the layer is filled from its blob in the original's
// repository (or in the image being unpacked, if that one fails),
// applied with overlayfs whiteouts as containerd's applier does, its
// tar checked against the diff ID its chain ID stands for, and swapped
// in with one rename; a fill that fails fails that snapshot and leaves
// the layer empty and marked. containerd's API reads a committed
// snapshot only through a Prepare or View on it, so no read misses a
// fill. On the RAFS image's own chain the source layers are below the
// RAFS mount and never mounted, filled or not. The top layer's snapshot
// needs no fill: an image with exactly the original's layers that
// reuses it gets the RAFS mount, the same files.
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
// image any more. A daemon is started when a pull has checked the image's
// bootstrap (Config.Mount.StartOnPull), in the background, so the first
// container finds its mount ready; one no container has used is kept for
// that long and then stopped.
package snapshotter
