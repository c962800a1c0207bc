package geminitest_test

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geminiguard/geminiguard/geminitest"
)

// trace is a recording of model "m": overloaded for its first two seconds,
// rate-limited from 2 s, answering in 300 ms from 5 s.
const trace = `{"at_ms":0,"model":"m","endpoint":"generate","status":503,"class":"overloaded","latency_ms":100}
{"at_ms":2000,"model":"m","endpoint":"generate","status":429,"class":"rate_limit","latency_ms":0}
{"at_ms":3000,"model":"m","endpoint":"embed","status":200,"class":"none","latency_ms":0}

{"at_ms":5000,"model":"m","endpoint":"generate","status":200,"class":"none","latency_ms":300}
`

func TestReplayPlaysARecordingInFakeTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		models, err := geminitest.Replay(strings.NewReader(trace))
		require.NoError(t, err)
		require.Len(t, models, 1)
		srv := geminitest.New(models...)
		c := newClient(t, srv.ClientConfig())

		start := time.Now()
		_, err = c.Models.GenerateContent(t.Context(), "m", prompt("hi"), nil)
		assert.Equal(t, 503, apiError(t, err).Code)
		assert.Equal(t, 100*time.Millisecond, time.Since(start), "the recorded latency")

		time.Sleep(2*time.Second - time.Since(start))
		_, err = c.Models.GenerateContent(t.Context(), "m", prompt("hi"), nil)
		assert.Equal(t, 429, apiError(t, err).Code, "from 2 s, as recorded")

		time.Sleep(5*time.Second - time.Since(start))
		resp, err := c.Models.GenerateContent(t.Context(), "m", prompt("hi"), nil)
		require.NoError(t, err)
		assert.NotEmpty(t, resp.Text())
		assert.Equal(t, 5*time.Second+300*time.Millisecond, time.Since(start))
	})
}

func TestReplayRefusesWhatIsNotARecording(t *testing.T) {
	_, err := geminitest.Replay(strings.NewReader("{\"at_ms\":0}\n"))
	require.ErrorContains(t, err, "line 1 is not a recording's line")
}
