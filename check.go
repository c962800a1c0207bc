package geminiguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard/fleet"
)

// Shutdown is an announced retirement of a model.
type Shutdown struct {
	Date        time.Time // the day requests start failing (00:00 UTC of that day)
	Replacement string    // the model Google names as its replacement, "" when none
	Source      string    // where it was announced
}

// shutdownWarnDays is how close a shutdown must be for CheckCascade to warn.
const shutdownWarnDays = 90

// Shutdowns returns the built-in table of announced shutdown dates of the
// Gemini API, each Source naming where the date was announced and when it
// was read. The table is the embedded data/shutdowns.json, checked as a
// whole on its as_of date; CheckCascade warns when that is more than 90
// days ago. A key "vertex/"+model is model's date on Vertex AI, which
// retires models on its own dates: it applies to the cascade entries sent
// to Vertex AI (a WithModelBackend client or a WithGenAIClient of that
// backend), and the Gemini API's date of model never does. Google moves
// these dates; WithShutdowns adds to or overrides the table,
// WithShutdownsFile loads a newer one. The caller may modify the returned
// map.
func Shutdowns() map[string]Shutdown {
	return maps.Clone(builtinShutdowns)
}

// mergeShutdowns returns the built-in table with the files' keys
// (WithShutdownsFile) and then WithShutdowns' added or replaced.
func mergeShutdowns(files, extra map[string]Shutdown) map[string]Shutdown {
	table := Shutdowns()
	for k, v := range files {
		table[k] = v
	}
	for k, v := range extra {
		table[strings.TrimPrefix(k, "models/")] = v
	}
	return table
}

// CascadeReport is what CheckCascade found.
type CascadeReport struct {
	Models   []ModelReport // one per cascade model, in order
	Warnings []string      // things to fix before they break: one generation only, shutdowns near
	Checked  time.Time
}

// Healthy reports whether every cascade model exists and none is past or
// within the warning window of its shutdown.
func (r *CascadeReport) Healthy() bool {
	for _, m := range r.Models {
		if !m.Exists || m.Verdict != "ok" {
			return false
		}
	}
	return true
}

// ModelReport is one cascade model as the API lists it.
type ModelReport struct {
	Model            string
	Exists           bool
	DisplayName      string
	Generation       string // "2.5", "2.0", ... read from the name; "" when unknown
	InputTokenLimit  int32
	OutputTokenLimit int32
	Shutdown         *Shutdown // announced shutdown, nil when none is known
	DaysLeft         int       // days until Shutdown (negative: past); 0 when none
	Verdict          string    // "ok", "missing", "shutdown soon", "shut down"
}

// CheckCascade lists the models the API offers to this key (paging with fresh
// List calls) and checks the cascade against them; an entry of
// WithModelBackend is checked against its own SDK client's list. It returns an error
// matching ErrModelNotFound that names every cascade model the API does not
// list (the report is returned too), or the API's error when listing failed.
// Warnings cover a cascade whose models all share one generation, models
// whose announced shutdown is within 90 days or past, and price or shutdown
// tables (built-in or loaded by WithPricesFile, WithShutdownsFile) whose
// as-of date is more than 90 days ago; the Client keeps them (Warnings). A model listed again
// ends its cool-down when that lasts until a recheck (a 404, a limit of zero)
// and keeps any other (a spent daily quota runs to midnight); a successful
// listing ends a project cool-down. A nil ctx, or a Client not made by New,
// is refused before anything is sent.
func (c *Client) CheckCascade(ctx context.Context) (*CascadeReport, error) {
	if err := c.usable(ctx); err != nil {
		return nil, err
	}
	listed, err := c.listModels(ctx, c.api)
	if err != nil {
		return nil, fmt.Errorf("geminiguard: listing models for the cascade check: %w", err)
	}
	lists, err := c.listBackends(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	c.project.clear()
	report := &CascadeReport{Checked: now}
	var missing []string
	generations := map[string]bool{}
	for _, name := range c.cascade {
		m := c.model(name)
		mr := ModelReport{Model: name, Generation: generationOf(m.wire), Verdict: "ok"}
		in := listed
		if m.via != nil {
			in = lists[m.via.sdk]
		}
		if m.via != nil && m.via.local {
			mr.Exists, mr.Generation = true, "" // a Backend: no API lists it, no shutdown table knows it
			report.Models = append(report.Models, mr)
			continue
		}
		if info, ok := in[m.wire]; ok {
			mr.Exists, mr.DisplayName = true, info.DisplayName
			mr.InputTokenLimit, mr.OutputTokenLimit = info.InputTokenLimit, info.OutputTokenLimit
			if c.model(name).cool.clearRecheck() {
				c.publish(ctx, fleet.Fact{Kind: fleet.FactListed, Model: name, At: now})
			}
		} else {
			mr.Verdict = "missing"
			missing = append(missing, name)
			if c.model(name).cool.set(coolDownUntil(Verdict{cool: coolUntilRecheck}, now, 0), ClassNotFound) {
				c.publish(ctx, fleet.Fact{Kind: fleet.FactMissing, Model: name, At: now, Reason: int(ClassNotFound)})
			}
		}
		if sd, ok := c.shutdown[c.shutdownKey(m)]; ok {
			mr.Shutdown = &sd
			mr.DaysLeft = int(math.Ceil(sd.Date.Sub(now).Hours() / 24))
			switch {
			case mr.DaysLeft <= 0:
				mr.Verdict = "shut down"
				report.Warnings = append(report.Warnings, fmt.Sprintf("%s was shut down on %s; replace it with %s", name, sd.Date.Format(time.DateOnly), orNone(sd.Replacement)))
			case mr.DaysLeft <= shutdownWarnDays:
				if mr.Exists {
					mr.Verdict = "shutdown soon"
				}
				report.Warnings = append(report.Warnings, fmt.Sprintf("%s shuts down on %s (in %s); replace it with %s", name, sd.Date.Format(time.DateOnly), days(mr.DaysLeft), orNone(sd.Replacement)))
			}
		}
		if mr.Generation != "" {
			generations[mr.Generation] = true
		}
		report.Models = append(report.Models, mr)
	}
	if len(c.cascade) > 1 && len(generations) == 1 {
		for g := range generations {
			report.Warnings = append(report.Warnings, fmt.Sprintf("every cascade model is generation %s: one retirement or regional outage of that generation takes them all; add a model of another generation", g))
		}
	}
	report.Warnings = append(report.Warnings, c.cfg.tables.warnings(now)...)
	c.warnings.Store(&report.Warnings)
	if len(missing) > 0 {
		return report, fmt.Errorf("%w: the API does not list %s for this key: fix WithCascade (run examples/cascade-doctor to see what is listed)", ErrModelNotFound, strings.Join(missing, ", "))
	}
	return report, nil
}

// Warnings returns the warnings of the latest CheckCascade that listed the
// models (New's, the background re-check's, or the caller's), the same as
// its CascadeReport.Warnings: things to fix before they break, which reach
// the app without a logger. Nil before any check completed, and always
// under WithStartupCheck(false) until the app calls CheckCascade. The
// caller may modify the returned slice. Safe for concurrent use.
func (c *Client) Warnings() []string {
	if w := c.warnings.Load(); w != nil {
		return slices.Clone(*w)
	}
	return nil
}

func days(n int) string {
	if n == 1 {
		return "1 day"
	}
	return fmt.Sprintf("%d days", n)
}

func orNone(s string) string {
	if s == "" {
		return "a current model"
	}
	return s
}

// listPageSize is the page size CheckCascade asks for (the API's maximum is 1000).
const listPageSize = 1000

// listModels pages through api's model list with fresh List calls: the
// SDK's Page.Next re-sends the first page token when one was given. Names
// are the part after the last "models/": without "models/" (Gemini API),
// "publishers/google/models/" or a full
// "projects/…/locations/…/publishers/google/models/" (Vertex AI).
func (c *Client) listModels(ctx context.Context, api modelsAPI) (map[string]*genai.Model, error) {
	out := make(map[string]*genai.Model)
	token := ""
	for range 100 { // a bound against a server that never stops paging
		page, err := api.List(ctx, &genai.ListModelsConfig{PageSize: listPageSize, PageToken: token})
		if err != nil {
			return nil, err
		}
		for _, m := range page.Items {
			name := m.Name
			if i := strings.LastIndex(name, "models/"); i >= 0 {
				name = name[i+len("models/"):]
			}
			out[name] = m
		}
		if page.NextPageToken == "" || page.NextPageToken == token {
			return out, nil
		}
		token = page.NextPageToken
	}
	return out, nil
}

// generationOf reads the generation from a model name: "gemini-2.5-flash" →
// "2.5". "" when the name does not follow the gemini-<version>-... pattern.
func generationOf(name string) string {
	rest, ok := strings.CutPrefix(name, "gemini-")
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, "-")
	if v == "" || !strings.ContainsAny(v[:1], "0123456789") {
		return ""
	}
	return v
}

// The background re-check that New starts when its own check could not list
// the models for a transient reason: after recheckFirstDelay, then at
// doubling intervals up to recheckMaxDelay, at most recheckTries times
// (about 5 minutes in all).
const (
	recheckFirstDelay = time.Second
	recheckMaxDelay   = time.Minute
	recheckTries      = 10
)

// recheck is the background cascade check New started, if any. Its fields
// are set by New before the Client is returned and never change.
type recheck struct {
	stop context.CancelFunc // ends the re-check; nil when New started none
	done chan struct{}      // closed when the re-check goroutine has returned
}

// transientCheckError reports whether err, CheckCascade's error, is a
// failure that passes (a 5xx, a 429, a timeout, a network error) rather than
// an answer: a missing model, a rejected key or project, the caller's
// cancellation.
func transientCheckError(err error) bool {
	return err != nil && !errors.Is(err, ErrModelNotFound) && Classify(err).Retryable
}

// startRecheck starts the goroutine that runs CheckCascade again until it
// completes, recheckTries times at most, stopped by Close or by the end of
// ctx. New calls it at most once, before returning the Client.
func (c *Client) startRecheck(ctx context.Context) {
	ctx, stop := context.WithCancel(ctx)
	c.recheck = recheck{stop: stop, done: make(chan struct{})}
	go c.runRecheck(ctx)
}

// runRecheck is the re-check goroutine. A model the check finds missing
// cools down (CheckCascade does it) and is logged at Error, as is a check
// that gives up.
func (c *Client) runRecheck(ctx context.Context) {
	defer close(c.recheck.done)
	delay := recheckFirstDelay
	for try := 1; ; try++ {
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		report, err := c.CheckCascade(ctx)
		switch {
		case err == nil:
			c.log(ctx, slog.LevelInfo, "geminiguard: cascade check passed", slog.Int("try", try))
			c.logReport(report)
			return
		case ctx.Err() != nil:
			return // Close, or the end of New's context
		case errors.Is(err, ErrModelNotFound):
			c.log(ctx, slog.LevelError, "geminiguard: cascade check: a cascade model does not exist; it is left out until a check lists it", slog.String("error", c.redact(err)))
			c.logReport(report)
			return
		case !transientCheckError(err) || try == recheckTries:
			c.log(ctx, slog.LevelError, "geminiguard: cascade check failed; giving up (run CheckCascade to try again)", slog.Int("try", try), slog.String("error", c.redact(err)))
			return
		}
		delay = min(2*delay, recheckMaxDelay)
		c.log(ctx, slog.LevelWarn, "geminiguard: cascade check failed; retrying in the background", slog.Int("try", try), slog.Duration("retry_in", delay), slog.String("error", c.redact(err)))
	}
}

// ErrClosed: the Client was closed (Client.Close) before the call: nothing
// was sent. Classify reads it as ClassBadRequest (not retryable): the
// program, not the API, has to change.
var ErrClosed = errors.New("geminiguard: Client is closed")

// Close closes the Client: every call made after Close starts is refused
// with ErrClosed before anything is sent (GenerateContent, EmbedContent,
// CountTokens, ComputeTokens, CheckCascade, the image and video methods, a
// Chat's sends; a stream ranged after Close yields ErrClosed once), and the
// Client's background work stops, Close waiting for it to end: the cascade
// re-check New starts when its own check could not list the models (see
// New), the breaker state gauge registered with the meter (see
// WithMeterProvider), and fleet mode's (WithSharedState): the shared
// state's notifications and a pending report of the spend. Calls in flight
// when Close is called (a stream already ranged included) finish as they
// would have, retries and cascade steps included; Close does not wait for
// them. Close is idempotent and safe for concurrent use, also with calls in
// flight; it returns nil (the error is io.Closer's), or on a Client not made
// by New the error that says so.
func (c *Client) Close() error {
	if !c.made() {
		return errNotNew
	}
	c.closed.Store(true)
	c.tel.stop()
	if c.fleet != nil {
		c.fleet.close()
	}
	if c.recheck.stop != nil {
		c.recheck.stop()
		<-c.recheck.done
	}
	return nil
}

// log writes one line to the Client's logger, if it has one.
func (c *Client) log(ctx context.Context, level slog.Level, msg string, attrs ...slog.Attr) {
	if c.cfg.logger != nil {
		c.cfg.logger.LogAttrs(ctx, level, msg, attrs...)
	}
}

// redact returns err's text with the API key, if the options gave one,
// replaced: an error from a proxy or the network may quote the request.
func (c *Client) redact(err error) string {
	msg := err.Error()
	if key := c.cfg.apiKey.reveal(); key != "" {
		msg = strings.ReplaceAll(msg, key, redacted)
	}
	return msg
}
