package geminiguard

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The price and shutdown tables are data: data/prices.json and
// data/shutdowns.json, embedded in the library, each row with its source and
// the date it was read, each table with the date it was last checked as a
// whole ("as_of"). WithPricesFile and WithShutdownsFile load files of the
// same format, so that operations can update a table without a release.
//
// prices.json:
//
//	{"as_of": "2026-12-01", "models": {"gemini-3.7-flash": [
//	  {"input": 0.75, "output": 3.75, "source": "...", "read": "2026-08"},
//	  {"effective_from": "2027-01-01T00:00:00-08:00", "input": 1.50, "output": 7.50, "source": "...", "read": "2026-08"}]}}
//
// Rates are US dollars per 1M tokens, as decimal numbers of at most six
// decimals: input, output, cached_input, long_prompt (tokens), long_input,
// long_output, long_cached_input, as the fields of Price. shutdowns.json:
//
//	{"as_of": "2026-12-01", "models": {"gemini-3.1-flash-lite":
//	  {"date": "2027-05-07", "replacement": "gemini-3.5-flash-lite", "source": "...", "read": "2026-08-27"}}}
//
// as_of and read are dates (2006-01-02, or 2006-01 for a month), date a day
// (00:00 UTC), effective_from an RFC 3339 instant. source and read are
// required in every row; a "note" beside "models" is for people.

//go:embed data/prices.json data/shutdowns.json
var tableData embed.FS

// staleTableDays is the age of a table's as-of date past which CheckCascade
// warns that the table may no longer be true.
const staleTableDays = 90

// table is one loaded table file: what it is called in messages and its
// as-of date.
type table struct {
	name string    // "the built-in price table", "price file \"/etc/prices.json\""
	asOf time.Time // 00:00 UTC of its as_of date
}

// tableFiles are the tables WithPricesFile and WithShutdownsFile loaded, in
// the order given. Read-only once New returns.
type tableFiles struct {
	prices    map[string][]Price  // by model, the later file's rows replacing the earlier's
	shutdowns map[string]Shutdown // by key, likewise
	loaded    []table             // one per file
	pricesBy  bool                // a price file was loaded
	shutsBy   bool                // a shutdown file was loaded
}

// builtinPrices and builtinShutdowns are the embedded tables, parsed once
// (a malformed embedded file fails every test).
var (
	builtinPrices, builtinPricesAsOf       = mustParse(parsePrices, "data/prices.json")
	builtinShutdowns, builtinShutdownsAsOf = mustParse(parseShutdowns, "data/shutdowns.json")
)

func mustParse[T any](parse func(name string, data []byte) (T, time.Time, error), path string) (T, time.Time) {
	data, err := tableData.ReadFile(path)
	if err == nil {
		var t T
		var asOf time.Time
		if t, asOf, err = parse("embedded "+path, data); err == nil {
			return t, asOf
		}
	}
	panic(err) // the embedded tables are tested: unreachable in a release
}

// readTable reads and parses the table file at path.
func readTable[T any](path string, parse func(name string, data []byte) (T, time.Time, error)) (T, time.Time, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		var zero T
		return zero, time.Time{}, fmt.Errorf("geminiguard: reading table file: %w", err)
	}
	return parse(fmt.Sprintf("%q", path), data)
}

// tableWarnings returns CheckCascade's warnings about tables whose as-of
// date is more than staleTableDays before now: each file loaded, and each
// built-in table unless a file of its kind was loaded that is not stale.
func (t *tableFiles) warnings(now time.Time) []string {
	stale := func(tb table) bool { return now.Sub(tb.asOf) > staleTableDays*24*time.Hour }
	var out []string
	fresh := map[string]bool{}
	for _, tb := range t.loaded {
		kind, _, _ := strings.Cut(tb.name, " ")
		if stale(tb) {
			out = append(out, fmt.Sprintf("the %s is as of %s (%s ago): its figures may no longer be true; update it", tb.name, tb.asOf.Format(time.DateOnly), days(int(now.Sub(tb.asOf).Hours()/24))))
		} else {
			fresh[kind] = true
		}
	}
	for _, b := range []struct {
		kind, option string
		asOf         time.Time
	}{{"price", "WithPricesFile", builtinPricesAsOf}, {"shutdown", "WithShutdownsFile", builtinShutdownsAsOf}} {
		if tb := (table{asOf: b.asOf}); !fresh[b.kind] && stale(tb) {
			out = append(out, fmt.Sprintf("the built-in %s table is as of %s (%s ago): its figures may no longer be true; update geminiguard or load a current table with %s", b.kind, b.asOf.Format(time.DateOnly), days(int(now.Sub(b.asOf).Hours()/24)), b.option))
		}
	}
	return out
}

// tableHead is the part of a table file around its rows.
type tableHead struct {
	AsOf   string                     `json:"as_of"`
	Note   string                     `json:"note"`
	Models map[string]json.RawMessage `json:"models"`
}

// row is one row of a table file, field by field, so that a problem names
// its field. A row reader collects the problems.
type row struct {
	fields map[string]json.RawMessage
	errs   []error
}

// readRow decodes raw as a row of the given fields; a field not among them
// is a problem.
func readRow(raw json.RawMessage, known ...string) *row {
	r := &row{}
	if err := json.Unmarshal(raw, &r.fields); err != nil {
		r.errs = append(r.errs, fmt.Errorf("give an object of fields: %s", jsonProblem(raw, err)))
		return r
	}
	for _, name := range slices.Sorted(maps.Keys(r.fields)) {
		if !slices.Contains(known, name) {
			r.errs = append(r.errs, fmt.Errorf("unknown field %q (a misspelt field? known: %s)", name, strings.Join(known, ", ")))
		}
	}
	return r
}

func (r *row) problem(name string, err error) {
	r.errs = append(r.errs, fmt.Errorf("field %q: %w", name, err))
}

// text returns the string field name, "" when absent.
func (r *row) text(name string) string {
	raw, ok := r.fields[name]
	if !ok {
		return ""
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		r.problem(name, fmt.Errorf("%s is not a string", raw))
	}
	return s
}

// number returns the literal of the number field name, "" when absent.
func (r *row) number(name string) string {
	raw, ok := r.fields[name]
	if !ok {
		return ""
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err != nil || raw[0] == '"' {
		r.problem(name, fmt.Errorf("%s is not a number", raw))
		return ""
	}
	return n.String()
}

// rate returns the rate field name in Micros, 0 when absent (a problem
// when required).
func (r *row) rate(name string, required bool) Micros {
	s := r.number(name)
	if s == "" {
		if _, ok := r.fields[name]; !ok && required {
			r.problem(name, errors.New("is missing: give the rate in dollars per 1M tokens, e.g. 0.30"))
		}
		return 0
	}
	m, err := parseDollars(s)
	if err != nil {
		r.problem(name, err)
	}
	return m
}

// day returns the date field name (see parseDay).
func (r *row) day(name string, exact bool) time.Time {
	t, err := parseDay(r.text(name), exact)
	if err != nil {
		r.problem(name, err)
	}
	return t
}

// source returns a row's Source text: its source with the date it was
// read, both required.
func (r *row) source() string {
	src := r.text("source")
	if strings.TrimSpace(src) == "" {
		r.problem("source", errors.New("is missing: say where the figures come from"))
	}
	r.day("read", false)
	return fmt.Sprintf("%s (read %s)", src, r.text("read"))
}

// parseHead decodes a table file's frame. name is the file as messages
// name it.
func parseHead(name string, data []byte) (tableHead, time.Time, error) {
	var h tableHead
	if err := strictDecode(data, &h); err != nil {
		return h, time.Time{}, fmt.Errorf("geminiguard: table file %s: %s", name, jsonProblem(data, err))
	}
	var errs []error
	asOf, err := parseDay(h.AsOf, false)
	if err != nil {
		errs = append(errs, fmt.Errorf("geminiguard: table file %s: field \"as_of\": %w", name, err))
	}
	if len(h.Models) == 0 {
		errs = append(errs, fmt.Errorf("geminiguard: table file %s: field \"models\" is missing or empty", name))
	}
	return h, asOf, errors.Join(errs...)
}

// parsePrices parses a price file; its error lists every problem.
func parsePrices(name string, data []byte) (map[string][]Price, time.Time, error) {
	h, asOf, err := parseHead(name, data)
	if err != nil {
		return nil, time.Time{}, err
	}
	var errs []error
	out := make(map[string][]Price, len(h.Models))
	for _, model := range slices.Sorted(maps.Keys(h.Models)) {
		at := func(row int) string {
			return fmt.Sprintf("geminiguard: price file %s: model %q, row %d", name, model, row)
		}
		var rows []json.RawMessage
		if err := strictDecode(h.Models[model], &rows); err != nil {
			errs = append(errs, fmt.Errorf("geminiguard: price file %s: model %q: give a list of rows: %s", name, model, jsonProblem(h.Models[model], err)))
			continue
		}
		prices := make([]Price, 0, len(rows))
		for i, raw := range rows {
			r := readRow(raw, "effective_from", "input", "output", "cached_input", "long_prompt", "long_input", "long_output", "long_cached_input", "source", "read")
			p := Price{
				Input: r.rate("input", true), Output: r.rate("output", true), CachedInput: r.rate("cached_input", false),
				LongInput: r.rate("long_input", false), LongOutput: r.rate("long_output", false), LongCachedInput: r.rate("long_cached_input", false),
				Source: r.source(),
			}
			if n := r.number("long_prompt"); n != "" {
				v, err := strconv.Atoi(n)
				if err != nil {
					r.problem("long_prompt", fmt.Errorf("%s is not a whole number of tokens", n))
				}
				p.LongPrompt = v
			}
			if from := r.text("effective_from"); from != "" {
				t, err := time.Parse(time.RFC3339, from)
				if err != nil {
					r.problem("effective_from", fmt.Errorf("%q is not an RFC 3339 instant, e.g. \"2027-01-01T00:00:00-08:00\"", from))
				}
				p.EffectiveFrom = t
			}
			for _, e := range r.errs {
				errs = append(errs, fmt.Errorf("%s: %w", at(i+1), e))
			}
			prices = append(prices, p)
		}
		if err := validatePrices(fmt.Sprintf("price file %s: model %q", name, model), "row", prices); err != nil {
			errs = append(errs, err)
		}
		out[strings.TrimPrefix(model, "models/")] = prices
	}
	return out, asOf, errors.Join(errs...)
}

// parseShutdowns parses a shutdown file; its error lists every problem.
func parseShutdowns(name string, data []byte) (map[string]Shutdown, time.Time, error) {
	h, asOf, err := parseHead(name, data)
	if err != nil {
		return nil, time.Time{}, err
	}
	var errs []error
	out := make(map[string]Shutdown, len(h.Models))
	for _, key := range slices.Sorted(maps.Keys(h.Models)) {
		at := fmt.Sprintf("geminiguard: shutdown file %s: model %q", name, key)
		r := readRow(h.Models[key], "date", "replacement", "source", "read")
		s := Shutdown{Date: r.day("date", true), Replacement: r.text("replacement"), Source: r.source()}
		for _, e := range r.errs {
			errs = append(errs, fmt.Errorf("%s: %w", at, e))
		}
		out[strings.TrimPrefix(key, "models/")] = s
	}
	return out, asOf, errors.Join(errs...)
}

// parseDay parses a date, 2006-01-02, or also 2006-01 (its first day)
// unless exact, as 00:00 UTC.
func parseDay(s string, exact bool) (time.Time, error) {
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	if !exact {
		if t, err := time.Parse("2006-01", s); err == nil {
			return t, nil
		}
		if s == "" {
			return time.Time{}, errors.New(`is missing: give a date, e.g. "2026-08-27" (or "2026-08")`)
		}
		return time.Time{}, fmt.Errorf(`%q is not a date: give e.g. "2026-08-27" (or "2026-08")`, s)
	}
	if s == "" {
		return time.Time{}, errors.New(`is missing: give a date, e.g. "2027-05-07"`)
	}
	return time.Time{}, fmt.Errorf(`%q is not a date: give e.g. "2027-05-07"`, s)
}

// parseDollars parses a decimal number of dollars with at most six
// decimals into Micros, exactly.
func parseDollars(s string) (Micros, error) {
	whole, frac, _ := strings.Cut(s, ".")
	bad := func() (Micros, error) {
		return 0, fmt.Errorf("%s is not a plain decimal of at most six decimals (dollars per 1M tokens, e.g. 0.30)", s)
	}
	if whole == "" || strings.HasPrefix(whole, "-") || len(frac) > 6 || strings.ContainsAny(s, "eE+") {
		if strings.HasPrefix(whole, "-") {
			return 0, fmt.Errorf("%s is negative: rates are dollars per 1M tokens, 0 or more", s)
		}
		return bad()
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || w > int64(maxRate)/Dollar {
		return 0, fmt.Errorf("%s is above $%d per 1M tokens: rates are dollars per 1M tokens (e.g. 0.30)", s, int64(maxRate)/Dollar)
	}
	f := int64(0)
	if frac != "" {
		if f, err = strconv.ParseInt(frac+strings.Repeat("0", 6-len(frac)), 10, 64); err != nil {
			return bad()
		}
	}
	return Micros(w*Dollar + f), nil
}

// strictDecode decodes one JSON value into v, refusing unknown fields and
// trailing data.
func strictDecode(data []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return errors.New("data after the JSON value")
	}
	return nil
}

// jsonProblem says what is wrong in data, as json reported it: the line of
// a syntax error, the field of a value of the wrong type.
func jsonProblem(data []byte, err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("line %d: %v", 1+bytes.Count(data[:min(int(syn.Offset), len(data))], []byte("\n")), syn)
	case errors.As(err, &typ) && typ.Field != "":
		return fmt.Sprintf("field %q: %s is not a %s", typ.Field, typ.Value, typ.Type)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return strings.TrimPrefix(err.Error(), "json: ") + " (a misspelt field?)"
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}
