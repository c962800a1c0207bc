package geminitest_test

import (
	"net/http/httptest"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard/geminitest"
)

// TestClientConfigForKeepsNoConnectionAlive calls a socket server from inside
// a synctest bubble: with srv.Client()'s keep-alives the idle connection's
// goroutine would keep the bubble from ever ending (the test would hang).
func TestClientConfigForKeepsNoConnectionAlive(t *testing.T) {
	fake := geminitest.New(geminitest.Model{Name: flash})
	srv := httptest.NewServer(fake)
	defer srv.Close()
	synctest.Test(t, func(t *testing.T) {
		c, err := genai.NewClient(t.Context(), geminitest.ClientConfigFor(srv))
		require.NoError(t, err)
		for range 2 {
			resp, err := c.Models.GenerateContent(t.Context(), flash, genai.Text("hi"), nil)
			require.NoError(t, err)
			assert.Equal(t, fake.FullText(flash), resp.Text())
		}
	})
	assert.Equal(t, 2, fake.Hits(flash, geminitest.VerbGenerate))
}
