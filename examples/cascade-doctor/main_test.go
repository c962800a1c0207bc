package main

import (
	"bytes"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	os.Unsetenv("GEMINI_API_KEY")
	os.Unsetenv("GOOGLE_API_KEY")
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

func TestDoctorFlagsTheRetiredModel(t *testing.T) {
	var out bytes.Buffer
	healthy, err := run(t.Context(), &out, []string{"gemini-2.5-flash-lite", "gemini-2.0-flash"})
	require.NoError(t, err)
	assert.False(t, healthy, "a cascade with a retired model is unhealthy: the command exits 1")
	assert.Regexp(t, `gemini-2.0-flash\s+NO\s+2.0`, out.String())
	assert.Contains(t, out.String(), "the API does not list gemini-2.0-flash")
}

func TestDoctorPassesAListedCascade(t *testing.T) {
	var out bytes.Buffer
	healthy, err := run(t.Context(), &out, []string{"gemini-2.5-flash-lite"})
	require.NoError(t, err)
	assert.True(t, healthy, out.String())
	assert.Regexp(t, `gemini-2.5-flash-lite\s+yes\s+2.5\s+1048576\s+65536`, out.String())
}
