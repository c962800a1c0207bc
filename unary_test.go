package geminiguard_test

import (
	"context"
	"reflect"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

// The wrappers run idempotency key → dedupe → bulkhead → chain: a replayed
// key and a call joining another's flight are answered while the bulkhead
// is full; only a call that must send is refused by it.
func TestWrappersRunInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Latency: answerTime})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithDedup(true),
			geminiguard.WithBulkhead("default", geminiguard.Bulkhead{MaxConcurrent: 1}))
		ask := func(ctx context.Context, prompt string) (geminiguard.CallRecord, error) {
			var rec geminiguard.CallRecord
			_, err := c.GenerateContent(geminiguard.RecordCall(ctx, &rec), "", genai.Text(prompt), nil)
			return rec, err
		}
		keyed := geminiguard.Idempotent(t.Context(), "order-1")

		var wg sync.WaitGroup
		wg.Go(func() {
			_, err := ask(keyed, "Say hi") // holds the one slot while it waits for the model
			assert.NoError(t, err)
		})
		synctest.Wait()
		joined, err := ask(t.Context(), "Say hi")
		require.NoError(t, err, "dedupe comes before the bulkhead: the same request joins the flight holding the slot")
		assert.True(t, joined.Deduplicated)
		wg.Wait()

		wg.Go(func() {
			_, err := ask(t.Context(), "Hold the slot") // another request takes the one slot
			assert.NoError(t, err)
		})
		synctest.Wait()
		_, err = ask(t.Context(), "Say something else")
		require.ErrorIs(t, err, geminiguard.ErrBulkheadFull, "a request that must send waits for a slot; there is none and no queue")
		start := time.Now()
		replayed, err := ask(keyed, "Say hi")
		require.NoError(t, err, "the idempotency key comes before the bulkhead: its stored answer needs no slot")
		assert.True(t, replayed.Replayed)
		assert.Zero(t, time.Since(start))
		wg.Wait()

		assert.Equal(t, 2, srv.Hits(flash, geminitest.VerbGenerate), "the keyed call's request and the slot holder's; the joiner and the replay sent nothing")
	})
}

// countingContext counts the lookups of the context values of package
// geminiguard's own keys, by key type.
type countingContext struct {
	context.Context
	mu      sync.Mutex
	lookups map[string]int
}

func (c *countingContext) Value(key any) any {
	if t := reflect.TypeOf(key); t != nil && t.PkgPath() == reflect.TypeFor[geminiguard.Client]().PkgPath() {
		c.mu.Lock()
		c.lookups[t.Name()]++
		c.mu.Unlock()
	}
	return c.Context.Value(key)
}

// A GenerateContent call reads each of its context values (the idempotency
// key, the deferral, the bulkhead's name, the call record) once, however many
// wrappers it passes: a lookup walks the whole chain of the caller's context
// (a request handler's holds a dozen values).
func TestGenerateContentReadsEachContextValueOnce(t *testing.T) {
	srv := geminitest.New(geminitest.Model{Name: flash})
	for _, tc := range []struct {
		name string
		opts []geminiguard.Option
		ctx  func(context.Context) context.Context
	}{
		{"plain", nil, func(ctx context.Context) context.Context { return ctx }},
		{"idempotent", nil, func(ctx context.Context) context.Context { return geminiguard.Idempotent(ctx, "order-1") }},
		{"deduplicated", []geminiguard.Option{geminiguard.WithDedup(true)}, func(ctx context.Context) context.Context { return ctx }},
		{"recorded", nil, func(ctx context.Context) context.Context {
			return geminiguard.RecordCall(ctx, new(geminiguard.CallRecord))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, srv, nil, append([]geminiguard.Option{geminiguard.WithCascade(flash), geminiguard.WithStartupCheck(false)}, tc.opts...)...)
			ctx := &countingContext{Context: tc.ctx(t.Context()), lookups: map[string]int{}}
			_, err := c.GenerateContent(ctx, "", genai.Text("Say hi"), nil)
			require.NoError(t, err)
			require.NotEmpty(t, ctx.lookups)
			for key, n := range ctx.lookups {
				assert.Equal(t, 1, n, "lookups of %s", key)
			}
		})
	}
}
