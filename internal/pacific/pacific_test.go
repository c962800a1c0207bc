package pacific

import (
	"testing"
	"time"
)

func TestNextMidnight(t *testing.T) {
	loc, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		t.Skip("no tzdata on this machine to compare with:", err)
	}
	start := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	for h := 0; h < 3*366*24; h += 5 {
		now := start.Add(time.Duration(h)*time.Hour + 17*time.Minute)
		got := NextMidnight(now)
		l := now.In(loc)
		want := time.Date(l.Year(), l.Month(), l.Day()+1, 0, 0, 0, 0, loc)
		if !got.Equal(want) {
			t.Fatalf("NextMidnight(%v) = %v, want %v", now, got.In(loc), want)
		}
		if _, off := l.Zone(); Offset(now) != time.Duration(off)*time.Second {
			t.Fatalf("Offset(%v) = %v, want %ds", now, Offset(now), off)
		}
	}
}

func TestNextMonth(t *testing.T) {
	loc, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		t.Skip("no tzdata on this machine to compare with:", err)
	}
	start := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	for h := 0; h < 3*366*24; h += 5 {
		now := start.Add(time.Duration(h)*time.Hour + 17*time.Minute)
		got := NextMonth(now)
		l := now.In(loc)
		want := time.Date(l.Year(), l.Month()+1, 1, 0, 0, 0, 0, loc)
		if !got.Equal(want) {
			t.Fatalf("NextMonth(%v) = %v, want %v", now, got.In(loc), want)
		}
	}
	// The instant itself belongs to the month it starts.
	feb := time.Date(2025, 2, 1, 0, 0, 0, 0, loc)
	if got, want := NextMonth(feb), time.Date(2025, 3, 1, 0, 0, 0, 0, loc); !got.Equal(want) {
		t.Fatalf("NextMonth(%v) = %v, want %v", feb, got.In(loc), want)
	}
}
