// Package pacific computes the daily quota reset of the Gemini API: midnight
// America/Los_Angeles.
//
// The zone is loaded once with time.LoadLocation, so the machine's tzdata
// (which follows the law when it changes) decides. Where the machine has no
// tzdata (a scratch container that does not import time/tzdata) the US rule
// in force since 2007 is used instead: second Sunday of March to first
// Sunday of November, at 02:00 local. Source says which is in use.
package pacific

import (
	"sync"
	"time"
)

const (
	pst = -8 * time.Hour
	pdt = -7 * time.Hour
)

// zone is America/Los_Angeles from the machine's tzdata, nil when the
// machine has none.
var zone = sync.OnceValue(func() *time.Location {
	loc, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		return nil
	}
	return loc
})

// Source says where the zone's rules come from: "tzdata" (the machine's or
// an embedded time/tzdata) or "built-in US rule (no tzdata on this machine)".
func Source() string {
	if zone() != nil {
		return "tzdata"
	}
	return "built-in US rule (no tzdata on this machine)"
}

// Offset returns the UTC offset of America/Los_Angeles at t.
func Offset(t time.Time) time.Duration {
	if loc := zone(); loc != nil {
		_, off := t.In(loc).Zone()
		return time.Duration(off) * time.Second
	}
	return ruleOffset(t)
}

// NextMidnight returns the first midnight America/Los_Angeles strictly after t.
func NextMidnight(t time.Time) time.Time {
	if loc := zone(); loc != nil {
		l := t.In(loc)
		return time.Date(l.Year(), l.Month(), l.Day()+1, 0, 0, 0, 0, loc).UTC()
	}
	return ruleNextMidnight(t)
}

// NextMonth returns the first midnight America/Los_Angeles of a month (the
// 1st) strictly after t.
func NextMonth(t time.Time) time.Time {
	if loc := zone(); loc != nil {
		l := t.In(loc)
		return time.Date(l.Year(), l.Month()+1, 1, 0, 0, 0, 0, loc).UTC()
	}
	return ruleNextMonth(t)
}

// Day returns the Pacific calendar day of t as a comparable value.
func Day(t time.Time) time.Time {
	local := t.UTC().Add(Offset(t))
	y, m, d := local.Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}
