package geminiguard_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

// writeFile writes content to name in a fresh temporary directory and
// returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

// TestTablesHoldTheArticlesModels: the embedded tables hold the source
// article's cascade (gemini-3.1-pro, gemini-3.7-flash, gemini-3.1-flash-lite)
// with its dates, and every row names its source and the date it was read.
func TestTablesHoldTheArticlesModels(t *testing.T) {
	prices, shutdowns := geminiguard.Prices(), geminiguard.Shutdowns()
	for model, rows := range prices {
		for _, p := range rows {
			assert.Contains(t, p.Source, " (read 20", model)
		}
	}
	for model, s := range shutdowns {
		assert.Contains(t, s.Source, " (read 20", model)
	}

	lite := shutdowns["gemini-3.1-flash-lite"]
	assert.Equal(t, time.Date(2027, time.May, 7, 0, 0, 0, 0, time.UTC), lite.Date)
	assert.Equal(t, "gemini-3.5-flash-lite", lite.Replacement)
	assert.Contains(t, lite.Source, "deprecations as updated 2026-08-27")
	assert.Contains(t, lite.Source, "Quiet Defenses Against 429, 500, and 503")

	f := prices["gemini-3.7-flash"]
	require.Len(t, f, 2)
	la := time.FixedZone("PST", -8*60*60)
	assert.Equal(t, geminiguard.Price{Input: 750_000, Output: 3_750_000, Source: f[0].Source}, f[0])
	assert.True(t, f[1].EffectiveFrom.Equal(time.Date(2027, time.January, 1, 0, 0, 0, 0, la)), "midnight Pacific")
	f[1].EffectiveFrom = time.Time{}
	assert.Equal(t, geminiguard.Price{Input: 1_500_000, Output: 7_500_000, Source: f[1].Source}, f[1])
	assert.Contains(t, f[0].Source, "pricing as read in August 2026")

	p := prices["gemini-3.1-pro"]
	require.Len(t, p, 1)
	assert.Contains(t, p[0].Source, "the preview's figures")
	assert.Equal(t, prices["gemini-3.1-pro-preview"][0].Input, p[0].Input)
}

// TestTableFileUpdatesPriceAndShutdown: operations change a model's price
// and give it a shutdown date through files, without recompiling: the
// call's cost is at the file's price, CheckCascade warns about the file's
// date, and the warnings reach the app through Client.Warnings without a
// logger.
func TestTableFileUpdatesPriceAndShutdown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		soon := time.Now().AddDate(0, 0, 31).Format(time.DateOnly)
		asOf := time.Now().AddDate(0, 0, -1).Format(time.DateOnly)
		prices := writeFile(t, "prices.json", `{"as_of": "`+asOf+`", "models": {
			"`+flash+`": [{"input": 2, "output": 4.5, "source": "ops: negotiated rate", "read": "`+asOf+`"}]}}`)
		shutdowns := writeFile(t, "shutdowns.json", `{"as_of": "`+asOf+`", "models": {
			"`+flash+`": {"date": "`+soon+`", "replacement": "gemini-3.7-flash", "source": "ops: Google's mail", "read": "`+asOf+`"}}}`)
		srv := geminitest.New(always(flash, geminitest.Step{Text: answer400, PromptTokens: 1000}))
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash),
			geminiguard.WithPricesFile(prices), geminiguard.WithShutdownsFile(shutdowns))

		_, rec, err := ask(t.Context(), c, "")
		require.NoError(t, err)
		assert.Equal(t, geminiguard.Micros(1000*2+100*4.5), rec.Cost) // built in: 1000 × $1.50 + 100 × $9
		assert.True(t, rec.CostKnown)

		want := []string{flash + " shuts down on " + soon + " (in 31 days); replace it with gemini-3.7-flash"}
		assert.Equal(t, want, c.Warnings())
		report, err := c.CheckCascade(t.Context())
		require.NoError(t, err)
		assert.Equal(t, want, report.Warnings)
		require.NotNil(t, report.Models[0].Shutdown)
		assert.Equal(t, "ops: Google's mail (read "+asOf+")", report.Models[0].Shutdown.Source)
	})
}

// TestStaleTablesWarn: a table whose as-of date is more than 90 days old
// says so: a loaded file at once, the built-in tables when the clock is
// past their date by 90 days.
func TestStaleTablesWarn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash))
		assert.Empty(t, c.Warnings(), "the built-in tables are newer than the bubble's clock (2000)")

		old := time.Now().AddDate(0, 0, -91).Format(time.DateOnly)
		path := writeFile(t, "shutdowns.json", `{"as_of": "`+old+`", "models": {"x": {"date": "2030-01-01", "source": "s", "read": "`+old+`"}}}`)
		c = newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithShutdownsFile(path))
		require.Len(t, c.Warnings(), 1)
		assert.Equal(t, `the shutdown file "`+path+`" is as of `+old+` (91 days ago): its figures may no longer be true; update it`, c.Warnings()[0])

		time.Sleep(time.Until(time.Date(2100, time.January, 1, 0, 0, 0, 0, time.UTC)))
		report, err := c.CheckCascade(t.Context())
		require.NoError(t, err)
		require.Len(t, report.Warnings, 3, "the stale file, and both built-in tables: a file stands in for its built-in table only while it is fresh")
		assert.Contains(t, report.Warnings[0], `the shutdown file "`+path+`" is as of `+old)
		assert.Contains(t, report.Warnings[1], "the built-in price table is as of ")
		assert.Contains(t, report.Warnings[1], "update geminiguard or load a current table with WithPricesFile")
		assert.Contains(t, report.Warnings[2], "the built-in shutdown table is as of ")
		assert.Equal(t, report.Warnings, c.Warnings())
	})
}

// TestMalformedTableFilesAreRefused: New refuses a malformed table file
// with an error that names the file, the model, the row and the field.
func TestMalformedTableFilesAreRefused(t *testing.T) {
	row := func(fields string) string {
		return `{"as_of": "2026-12-01", "models": {"m": [{"input": 1, "output": 2, "source": "s", "read": "2026-12-01"` + fields + `}]}}`
	}
	for _, tc := range []struct {
		name, content string
		shutdowns     bool
		want          []string
	}{
		{"syntax", "{\n\"as_of\": \"2026-12-01\",\n\"models\": {,}}", false, []string{`prices.json": line 3: invalid character ','`}},
		{"no as_of", `{"models": {"m": [{"input": 1, "output": 2, "source": "s", "read": "2026-12-01"}]}}`, false, []string{`field "as_of": is missing`}},
		{"no models", `{"as_of": "2026-12-01"}`, false, []string{`field "models" is missing or empty`}},
		{"unknown field", row(`, "inptu": 3`), false, []string{`model "m", row 1: unknown field "inptu" (a misspelt field?`}},
		{"word rate", row(`, "cached_input": "cheap"`), false, []string{`model "m", row 1: field "cached_input": "cheap" is not a number`}},
		{"bool rate", row(`, "cached_input": true`), false, []string{`model "m", row 1: field "cached_input": true is not a number`}},
		{"negative", row(`, "cached_input": -0.1`), false, []string{`model "m", row 1: field "cached_input": -0.1 is negative`}},
		{"too precise", row(`, "cached_input": 0.0000001`), false, []string{`model "m", row 1: field "cached_input": 0.0000001 is not a plain decimal of at most six decimals`}},
		{"exponent", row(`, "cached_input": 1e-3`), false, []string{`field "cached_input": 1e-3 is not a plain decimal`}},
		{"huge", row(`, "cached_input": 1000000`), false, []string{`field "cached_input": 1000000 is above $100000 per 1M tokens`}},
		{"bad instant", row(`, "effective_from": "2027-01-01"`), false, []string{`model "m", row 1: field "effective_from": "2027-01-01" is not an RFC 3339 instant`}},
		{"fractional long_prompt", row(`, "long_prompt": 2.5, "long_input": 3, "long_output": 4`), false, []string{`model "m", row 1: field "long_prompt": 2.5 is not a whole number of tokens`}},
		{"long without prompt", row(`, "long_input": 3`), false, []string{`price file "`, `model "m": row 1: Long rates need LongPrompt`}},
		{"missing rates and source", `{"as_of": "2026-12-01", "models": {"m": [{"read": "August"}]}}`, false, []string{
			`model "m", row 1: field "input": is missing`, `model "m", row 1: field "output": is missing`,
			`model "m", row 1: field "source": is missing`, `model "m", row 1: field "read": "August" is not a date`}},
		{"not a list", `{"as_of": "2026-12-01", "models": {"m": {"input": 1}}}`, false, []string{`model "m": give a list of rows`}},
		{"shutdown date", `{"as_of": "2026-12-01", "models": {"m": {"date": "May 7", "source": "s", "read": "2026-08"}}}`, true, []string{`shutdown file "`, `model "m": field "date": "May 7" is not a date`}},
		{"shutdown month only", `{"as_of": "2026-12-01", "models": {"m": {"date": "2027-05", "source": "s", "read": "2026-08"}}}`, true, []string{`model "m": field "date": "2027-05" is not a date`}},
		{"shutdown no source", `{"as_of": "2026-12-01", "models": {"m": {"date": "2027-05-07"}}}`, true, []string{`model "m": field "source": is missing`, `model "m": field "read": is missing`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := "prices.json"
			if tc.shutdowns {
				file = "shutdowns.json"
			}
			path := writeFile(t, file, tc.content)
			opt := geminiguard.WithPricesFile(path)
			if tc.shutdowns {
				opt = geminiguard.WithShutdownsFile(path)
			}
			_, err := newOffline(t, opt)
			require.Error(t, err)
			assert.Contains(t, err.Error(), path)
			for _, want := range tc.want {
				assert.Contains(t, err.Error(), want)
			}
			assert.True(t, strings.HasPrefix(err.Error(), "geminiguard: "), err.Error())
		})
	}
	_, err := newOffline(t, geminiguard.WithPricesFile(filepath.Join(t.TempDir(), "absent.json")))
	require.ErrorIs(t, err, os.ErrNotExist)
	assert.Contains(t, err.Error(), "absent.json")
}
