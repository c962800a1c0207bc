package pacific

import (
	"testing"
	"time"
)

// Both the tzdata path and the built-in rule must give the zone's own answer
// for every hour of three years (DST switches included).
func TestNextMidnightAndOffset(t *testing.T) {
	loc := requireZone(t)
	start := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	for h := 0; h < 3*366*24; h += 5 {
		now := start.Add(time.Duration(h)*time.Hour + 17*time.Minute)
		l := now.In(loc)
		want := time.Date(l.Year(), l.Month(), l.Day()+1, 0, 0, 0, 0, loc)
		_, off := l.Zone()
		for name, got := range map[string]time.Time{"NextMidnight": NextMidnight(now), "rule": ruleNextMidnight(now)} {
			if !got.Equal(want) {
				t.Fatalf("%s(%v) = %v, want %v", name, now, got.In(loc), want)
			}
		}
		for name, got := range map[string]time.Duration{"Offset": Offset(now), "rule": ruleOffset(now)} {
			if got != time.Duration(off)*time.Second {
				t.Fatalf("%s(%v) = %v, want %ds", name, now, got, off)
			}
		}
	}
}

func TestNextMonth(t *testing.T) {
	loc := requireZone(t)
	start := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	for h := 0; h < 3*366*24; h += 5 {
		now := start.Add(time.Duration(h)*time.Hour + 17*time.Minute)
		l := now.In(loc)
		want := time.Date(l.Year(), l.Month()+1, 1, 0, 0, 0, 0, loc)
		for name, got := range map[string]time.Time{"NextMonth": NextMonth(now), "rule": ruleNextMonth(now)} {
			if !got.Equal(want) {
				t.Fatalf("%s(%v) = %v, want %v", name, now, got.In(loc), want)
			}
		}
	}
	// The instant itself belongs to the month it starts.
	feb := time.Date(2025, 2, 1, 0, 0, 0, 0, loc)
	if got, want := NextMonth(feb), time.Date(2025, 3, 1, 0, 0, 0, 0, loc); !got.Equal(want) {
		t.Fatalf("NextMonth(%v) = %v, want %v", feb, got.In(loc), want)
	}
}

func TestSourceNamesTzdata(t *testing.T) {
	requireZone(t)
	if got := Source(); got != "tzdata" {
		t.Fatalf("Source() = %q on a machine with tzdata, want %q", got, "tzdata")
	}
}

// requireZone returns America/Los_Angeles from the machine's tzdata; the
// tests compare against it, so they skip on a machine without it.
func requireZone(t *testing.T) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		t.Skip("no tzdata on this machine to compare with:", err)
	}
	return loc
}
