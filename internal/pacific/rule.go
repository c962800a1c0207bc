package pacific

import "time"

// The US daylight-saving rule in force since 2007, used only where the
// machine has no tzdata.

// ruleOffset returns the UTC offset of America/Los_Angeles at t by the rule.
func ruleOffset(t time.Time) time.Duration {
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

// ruleNextMidnight is NextMidnight by the rule.
func ruleNextMidnight(t time.Time) time.Time {
	off := ruleOffset(t)
	local := t.UTC().Add(off)
	y, m, d := local.Date()
	next := time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC) // local midnight, written in UTC digits
	// The offset at the next midnight can differ from now (the DST switch
	// happens at 02:00, so the midnight itself has the pre-switch offset of
	// that day, which is the offset one hour before it).
	utc := next.Add(-off)
	if o := ruleOffset(utc.Add(-time.Hour)); o != off {
		utc = next.Add(-o)
	}
	return utc
}

// ruleNextMonth is NextMonth by the rule.
func ruleNextMonth(t time.Time) time.Time {
	local := t.UTC().Add(ruleOffset(t))
	y, m, _ := local.Date()
	next := time.Date(y, m+1, 1, 0, 0, 0, 0, time.UTC) // local midnight, written in UTC digits
	// No DST switch happens at midnight: the instant is next−PDT when that
	// instant is in daylight time, else next−PST.
	if utc := next.Add(-pdt); ruleOffset(utc) == pdt {
		return utc
	}
	return next.Add(-pst)
}

// nthSunday returns 00:00 UTC of the n-th Sunday of month m in year y.
func nthSunday(y int, m time.Month, n int) time.Time {
	first := time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
	delta := (7 - int(first.Weekday())) % 7
	return first.AddDate(0, 0, delta+7*(n-1))
}
