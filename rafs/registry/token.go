package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// Token limits: a token response is read up to maxTokenResponse bytes;
// at most maxTokens are cached.
const (
	maxTokenResponse = 1 << 20
	maxTokens        = 4096
	// defaultTokenLife is used when the token server gives no expires_in
	// (the distribution spec's default is 60 s).
	defaultTokenLife = 60 * time.Second
	// tokenSlack renews a token this long before it expires.
	tokenSlack = 10 * time.Second
)

// tokenCache holds bearer tokens by (registry, repository, credentials).
// Safe for concurrent use.
type tokenCache struct {
	mu     sync.Mutex
	tokens map[string]cachedToken
}

type cachedToken struct {
	token   string
	expires time.Time
}

func newTokenCache() *tokenCache { return &tokenCache{tokens: map[string]cachedToken{}} }

// tokenKey names the token for pulling repo of base with creds; creds are
// hashed so the cache holds no password.
func tokenKey(base, repo, creds string) string {
	h := sha256.Sum256([]byte(creds))
	return base + "|" + repo + "|" + hex.EncodeToString(h[:8])
}

func (tc *tokenCache) get(key string, now time.Time) string {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	t, ok := tc.tokens[key]
	if !ok {
		return ""
	}
	if now.After(t.expires) {
		delete(tc.tokens, key)
		return ""
	}
	return t.token
}

func (tc *tokenCache) put(key, token string, expires time.Time, now time.Time) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if len(tc.tokens) >= maxTokens {
		for k, t := range tc.tokens {
			if now.After(t.expires) {
				delete(tc.tokens, k)
			}
		}
		if len(tc.tokens) >= maxTokens {
			clear(tc.tokens)
		}
	}
	tc.tokens[key] = cachedToken{token: token, expires: expires}
}

// drop forgets a token the registry refused.
func (tc *tokenCache) drop(key string) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	delete(tc.tokens, key)
}

// tokenResponse is the token server's answer.
type tokenResponse struct {
	Token       string `json:"token"`
	AccessToken string `json:"access_token"`
	ExpiresIn   int64  `json:"expires_in"`
}

// fetchToken asks the challenge's realm for a pull token for repo,
// authenticating with creds ("Basic ...", or "" for anonymous).
func (c *Client) fetchToken(ctx context.Context, ch challenge, repo, creds string) (string, time.Time, error) {
	realm, err := url.Parse(ch.params["realm"])
	if err != nil || realm.Host == "" {
		return "", time.Time{}, fmt.Errorf("token realm %q: not a URL", ch.params["realm"])
	}
	if err := c.checkURL(realm); err != nil {
		return "", time.Time{}, fmt.Errorf("token realm %q: %w", realm.Redacted(), err)
	}
	q := realm.Query()
	if s := ch.params["service"]; s != "" {
		q.Set("service", s)
	}
	scope := ch.params["scope"]
	if scope == "" {
		scope = "repository:" + repo + ":pull"
	}
	q.Set("scope", scope)
	realm.RawQuery = q.Encode()

	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, realm.String(), nil)
	if err != nil {
		return "", time.Time{}, err
	}
	if creds != "" {
		req.Header.Set("Authorization", creds)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("token from %s: %w", realm.Host, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", time.Time{}, fmt.Errorf("token from %s: %w", realm.Host, newStatusError(resp))
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxTokenResponse+1))
	if err != nil {
		return "", time.Time{}, fmt.Errorf("token from %s: %w", realm.Host, err)
	}
	if len(data) > maxTokenResponse {
		return "", time.Time{}, fmt.Errorf("token from %s: response larger than %d bytes", realm.Host, maxTokenResponse)
	}
	var tr tokenResponse
	if err := json.Unmarshal(data, &tr); err != nil {
		return "", time.Time{}, fmt.Errorf("token from %s: %w: %w", realm.Host, errBadResponse, err)
	}
	tok := tr.Token
	if tok == "" {
		tok = tr.AccessToken
	}
	if tok == "" {
		return "", time.Time{}, fmt.Errorf("token from %s: %w: no token in the answer", realm.Host, errBadResponse)
	}
	life := defaultTokenLife
	if tr.ExpiresIn > 0 && tr.ExpiresIn < 1<<31 {
		life = time.Duration(tr.ExpiresIn) * time.Second
	}
	return tok, time.Now().Add(max(life-tokenSlack, life/2)), nil
}
