// Package pacific computes the daily quota reset of the Gemini API: midnight
// America/Los_Angeles. The US daylight-saving rule is built in (since 2007:
// second Sunday of March to first Sunday of November, at 02:00 local), so the
// answer does not depend on the machine's tzdata.
package pacific

import "time"

const (
	pst = -8 * time.Hour
	pdt = -7 * time.Hour
)

// Offset returns the UTC offset of America/Los_Angeles at t.
func Offset(t time.Time) time.Duration {
	u := t.UTC()
	y := u.Year()
	// DST starts 02:00 PST (10:00 UTC) on the second Sunday of March and ends
	// 02:00 PDT (09:00 UTC) on the first Sunday of November.
	start := nthSunday(y, time.March, 2).Add(10 * time.Hour)
	end := nthSunday(y, time.November, 1).Add(9 * time.Hour)
	if !u.Before(start) && u.Before(end) {
		return pdt
	}
	return pst
}

// NextMidnight returns the first midnight America/Los_Angeles strictly after t.
func NextMidnight(t time.Time) time.Time {
	off := Offset(t)
	local := t.UTC().Add(off)
	y, m, d := local.Date()
	next := time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC) // local midnight, written in UTC digits
	// The offset at the next midnight can differ from now (the DST switch
	// happens at 02:00, so the midnight itself has the pre-switch offset of
	// that day, which is the offset one hour before it).
	utc := next.Add(-off)
	if o := Offset(utc.Add(-time.Hour)); o != off {
		utc = next.Add(-o)
	}
	return utc
}

// NextMonth returns the first midnight America/Los_Angeles of a month (the
// 1st) strictly after t.
func NextMonth(t time.Time) time.Time {
	local := t.UTC().Add(Offset(t))
	y, m, _ := local.Date()
	next := time.Date(y, m+1, 1, 0, 0, 0, 0, time.UTC) // local midnight, written in UTC digits
	// No DST switch happens at midnight: the instant is next−PDT when that
	// instant is in daylight time, else next−PST.
	if utc := next.Add(-pdt); Offset(utc) == pdt {
		return utc
	}
	return next.Add(-pst)
}

// Day returns the Pacific calendar day of t as a comparable value.
func Day(t time.Time) time.Time {
	local := t.UTC().Add(Offset(t))
	y, m, d := local.Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// nthSunday returns 00:00 UTC of the n-th Sunday of month m in year y.
func nthSunday(y int, m time.Month, n int) time.Time {
	first := time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
	delta := (7 - int(first.Weekday())) % 7
	return first.AddDate(0, 0, delta+7*(n-1))
}
