package geminiguard

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSecretNeverPrints: the config, and the key itself, print no key under
// any verb.
func TestSecretNeverPrints(t *testing.T) {
	const key = "AIzaSy-not-a-real-key"
	cfg := defaultConfig()
	WithAPIKey(key).apply(&cfg)
	require.Equal(t, key, cfg.apiKey.reveal())
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d"} {
		for _, v := range []any{cfg, &cfg, cfg.apiKey, &cfg.apiKey, []secret{cfg.apiKey}} {
			got := fmt.Sprintf(verb, v)
			assert.False(t, strings.Contains(got, key) || strings.Contains(got, fmt.Sprintf("%x", key)), "%s of %T: %s", verb, v, got)
		}
	}
	assert.Equal(t, "[redacted]", fmt.Sprint(cfg.apiKey))
	assert.Empty(t, secret{}.reveal(), "the zero value is no key")
}
