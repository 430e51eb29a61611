package proxy

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/sync/singleflight"

	"damselfly/rafs/registry"
)

// The gate decides whether a client may have bytes of a blob from the
// node (its cache, its peers): only if the origin registry would give
// them to it, with the credentials it sent, in the repository it named.
// It asks the registry the cheap way (registry.Client.Check: a HEAD with
// the client's own credentials and token flow) and remembers the answer,
// its verdict, per (registry, repository, object, hash of the
// credentials).
//
//   - A verdict younger than Config.AuthTTL is used as it is.
//   - An older one is asked again. If the registry cannot be reached, a
//     positive verdict younger than Config.AuthStale still allows (the
//     client was allowed, the outage is not its fault); a client with no
//     such verdict is refused with 403, never served.
//   - A client holding a grant for the object (below) is allowed while
//     the registry cannot be reached, however old its verdict.
//
// Grants: a batch response that the registry allowed carries chunkapi.HeaderGrant,
// an HMAC under the node's grant key over (registry, repository, object).
// chunkapi.Client keeps it and sends it back with every later request for
// the blob; the peer honours it only when the registry cannot be asked.
// It lets a mount daemon that was allowed to read an image keep reading
// it for its whole life through an outage, even after the verdict has
// aged out or the peer restarted (the key persists in the peer's state
// directory). A grant names no credentials: like a token, it is as good
// as having been allowed, and is kept only in the client's memory.

// Gate tunables.
const (
	// maxVerdicts bounds the verdicts remembered (about 200 bytes each).
	maxVerdicts = 1 << 16
	// negativeTTL bounds how long a refusal is remembered, so that a
	// client just given access waits little.
	negativeTTL = 5 * time.Second
	// downFor is how long a registry that could not be reached is not
	// asked again: requests meanwhile decide on what is remembered at
	// once instead of each waiting for a connect timeout.
	downFor = 2 * time.Second
	// maxDown bounds the registries remembered as down: clients name
	// registries, so their count is theirs to choose.
	maxDown = 1024
)

// checker is the part of registry.Client the gate uses.
type checker interface {
	Check(ctx context.Context, ref registry.Ref, kind, object string) (int, string, error)
}

// gate holds verdicts and asks the registry for missing or aged ones.
// Safe for concurrent use.
type gate struct {
	up    checker
	ttl   time.Duration
	stale time.Duration
	key   []byte // grant key
	now   func() time.Time

	verdicts *lru.Cache[string, verdict]
	flight   singleflight.Group

	mu   sync.Mutex
	down map[string]time.Time // registry -> not asked again before

	// refs says whether a manifest the node holds of a repository
	// references a blob (the manifest store); nil: none.
	refs func(registry, repo, digest string) bool
	// public asks other peers when the registry last let anonymous
	// clients pull from a repository; nil: no peers.
	public func(ctx context.Context, registry, repo, object string) (time.Time, bool)
}

// verdict is what the registry said of one (registry, repository,
// object, credentials).
type verdict struct {
	code      int // the registry's status: 200 allows
	challenge string
	at        time.Time
}

// decision is the gate's answer for one request.
type decision struct {
	allowed bool
	// how says why: "fresh" (the registry said so within AuthTTL),
	// "stale" (a positive verdict within AuthStale, the registry being
	// unreachable), "grant", or, refused, "origin" (the registry refused:
	// code is its status) or "unreachable" (nothing to decide on).
	how       string
	code      int    // refused: the status to answer
	challenge string // refused by the registry with 401: its challenge
	err       error  // why the registry could not be asked, if it was not
}

func newGate(up checker, ttl, stale time.Duration, key []byte) *gate {
	v, _ := lru.New[string, verdict](maxVerdicts) // size > 0 never fails
	return &gate{up: up, ttl: ttl, stale: stale, key: key, now: time.Now, verdicts: v, down: map[string]time.Time{}}
}

// credHash names credentials in keys without holding them.
func credHash(authz string) string {
	h := sha256.Sum256([]byte(authz))
	return hex.EncodeToString(h[:])
}

func verdictKey(ref registry.Ref, kind, object string) string {
	return ref.Registry + "|" + ref.Repo + "|" + kind + "|" + object + "|" + credHash(ref.Authorization)
}

// repoKey names the verdict that the registry gave some manifest of
// ref's repository to ref's credentials (manifests.go says why).
func repoKey(ref registry.Ref) string {
	return ref.Registry + "|" + ref.Repo + "|repository||" + credHash(ref.Authorization)
}

// authorize decides whether the client whose credentials ref carries may
// have object (kind "blobs" or "manifests") of ref.Repo at ref.Registry
// (normalised by the caller). grant is the client's chunkapi.HeaderGrant, if any.
func (g *gate) authorize(ctx context.Context, ref registry.Ref, kind, object, grant string) decision {
	key := verdictKey(ref, kind, object)
	now := g.now()
	v, known := g.verdicts.Get(key)
	if known && now.Sub(v.at) < g.life(v) {
		return fromVerdict(v, "fresh")
	}
	v2, err := g.ask(ctx, key, ref, kind, object)
	if err == nil {
		return fromVerdict(v2, "fresh")
	}
	if ctx.Err() != nil {
		return decision{code: http.StatusServiceUnavailable, how: "unreachable", err: ctx.Err()}
	}
	if known && v.code == http.StatusOK && now.Sub(v.at) < g.stale {
		return decision{allowed: true, how: "stale", err: err}
	}
	// A refusal the registry gave for this very object stands.
	if (!known || v.code == http.StatusOK) && g.repoWide(ref, kind, object) {
		if rv, ok := g.verdicts.Get(repoKey(ref)); ok && rv.code == http.StatusOK && now.Sub(rv.at) < g.stale {
			return decision{allowed: true, how: "stale", err: err}
		}
		if ref.Authorization == "" && g.public != nil {
			if at, ok := g.public(ctx, ref.Registry, ref.Repo, object); ok && now.Sub(at) < g.stale {
				g.verdicts.Add(repoKey(ref), verdict{code: http.StatusOK, at: at})
				return decision{allowed: true, how: "public", err: err}
			}
		}
	}
	if grant != "" && g.validGrant(grant, ref, kind, object) {
		return decision{allowed: true, how: "grant", err: err}
	}
	return decision{code: http.StatusForbidden, how: "unreachable", err: err}
}

// allow remembers that the registry gave object to ref's credentials: it
// answered 200 to their request, passed through, as it would a check.
func (g *gate) allow(ref registry.Ref, kind, object string) {
	v := verdict{code: http.StatusOK, at: g.now()}
	g.verdicts.Add(verdictKey(ref, kind, object), v)
	g.verdicts.Add(repoKey(ref), v)
}

// repoWide reports whether a verdict on ref's repository as a whole
// covers object while the registry cannot be asked: any manifest (the
// stores key manifests per repository, as the registry served them), and
// a blob that a manifest held of the repository references.
func (g *gate) repoWide(ref registry.Ref, kind, object string) bool {
	return kind == "manifests" || g.refs != nil && g.refs(ref.Registry, ref.Repo, object)
}

// publicAt is when the registry last let anonymous clients pull from
// repo at registry, within AuthStale.
func (g *gate) publicAt(reg, repo string) (time.Time, bool) {
	v, ok := g.verdicts.Peek(repoKey(registry.Ref{Registry: reg, Repo: repo}))
	if !ok || v.code != http.StatusOK || g.now().Sub(v.at) >= g.stale {
		return time.Time{}, false
	}
	return v.at, true
}

// life is how long v is used without asking again.
func (g *gate) life(v verdict) time.Duration {
	if v.code == http.StatusOK {
		return g.ttl
	}
	return min(g.ttl, negativeTTL)
}

func fromVerdict(v verdict, how string) decision {
	if v.code == http.StatusOK {
		return decision{allowed: true, how: how}
	}
	return decision{code: v.code, challenge: v.challenge, how: "origin"}
}

// errOriginDown is the answer for a registry that failed to answer a
// moment ago.
var errOriginDown = errors.New("origin registry unreachable a moment ago")

// ask asks the registry, one question per key at a time, and remembers
// a definite answer. A registry that cannot be reached is not asked again
// for downFor.
func (g *gate) ask(ctx context.Context, key string, ref registry.Ref, kind, object string) (verdict, error) {
	g.mu.Lock()
	until, isDown := g.down[ref.Registry]
	g.mu.Unlock()
	if isDown && g.now().Before(until) {
		return verdict{}, errOriginDown
	}
	res := g.flight.DoChan(key, func() (any, error) {
		// Not cancelled when one waiter leaves: the others, and the next
		// request, want the answer. Check's own timeout bounds it.
		code, challenge, err := g.up.Check(context.WithoutCancel(ctx), ref, kind, object)
		if err != nil {
			if registry.IsTransient(err) {
				g.markDown(ref.Registry)
			}
			return verdict{}, err
		}
		v := verdict{code: code, challenge: challenge, at: g.now()}
		g.verdicts.Add(key, v)
		if code == http.StatusOK {
			g.verdicts.Add(repoKey(ref), v)
		}
		g.mu.Lock()
		delete(g.down, ref.Registry)
		g.mu.Unlock()
		return v, nil
	})
	select {
	case r := <-res:
		if r.Err != nil {
			return verdict{}, r.Err
		}
		return r.Val.(verdict), nil
	case <-ctx.Done():
		return verdict{}, ctx.Err()
	}
}

// markDown remembers that registry failed to answer, for downFor.
func (g *gate) markDown(registry string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	if len(g.down) >= maxDown {
		for r, until := range g.down {
			if !now.Before(until) {
				delete(g.down, r)
			}
		}
		if len(g.down) >= maxDown {
			clear(g.down)
		}
	}
	g.down[registry] = now.Add(downFor)
}

// grantFor is the grant for object of ref's repository at ref's registry.
func (g *gate) grantFor(ref registry.Ref, kind, object string) string {
	m := hmac.New(sha256.New, g.key)
	fmt.Fprintf(m, "damselfly grant v1\x00%s\x00%s\x00%s\x00%s", ref.Registry, ref.Repo, kind, object)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (g *gate) validGrant(grant string, ref registry.Ref, kind, object string) bool {
	return hmac.Equal([]byte(grant), []byte(g.grantFor(ref, kind, object)))
}

// refusal is the status and message of a refused request.
func refusal(d decision, registry string) (int, string) {
	if d.how == "unreachable" {
		return d.code, fmt.Sprintf("not authorised: the origin registry %s could not be asked (%v) and this client has no recent authorisation from it", registry, d.err)
	}
	return d.code, fmt.Sprintf("not authorised: the origin registry %s answered %d", registry, d.code)
}

// ociCodes names refusals in the distribution spec's error codes.
var ociCodes = map[int]string{
	http.StatusUnauthorized: "UNAUTHORIZED",
	http.StatusForbidden:    "DENIED",
	http.StatusNotFound:     "BLOB_UNKNOWN",
}

// refuse answers a refused mirror request in the distribution spec's
// shape, with the registry's status and, for a 401, its challenge, so
// that the client authenticates as it would without a mirror. It needs
// no registry: a client refused during an outage is told so.
func refuse(w http.ResponseWriter, d decision, registry string) {
	code, msg := refusal(d, registry)
	if d.challenge != "" {
		w.Header().Set("WWW-Authenticate", d.challenge)
	}
	name := ociCodes[code]
	if name == "" {
		name = "DENIED"
	}
	ociError(w, code, name, msg)
}
