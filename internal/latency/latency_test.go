package latency

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBucketsHoldTheirMiddle(t *testing.T) {
	prev := -1
	for d := 2 * time.Millisecond; d < 4*time.Hour; d = d * 21 / 20 {
		i := Bucket(d)
		assert.GreaterOrEqual(t, i, prev, "buckets grow with the latency (%v)", d)
		prev = i
		assert.InDelta(t, 1, float64(Mid(i))/float64(d), 0.125, "%v is within 12%% of its bucket's middle %v", d, Mid(i))
	}
	assert.Equal(t, 0, Bucket(0))
	assert.Equal(t, Buckets-1, Bucket(math.MaxInt64), "an abandoned attempt: beyond every answer")
}

func TestCutAfterWarmup(t *testing.T) {
	l := New(2)
	for range Warmup - 1 {
		l.Record(0, 800*time.Millisecond, t0)
	}
	_, ok := l.Cut(0, false)
	assert.False(t, ok, "not before Warmup answers")
	assert.False(t, l.Learned(0))
	select {
	case <-l.WhenLearned(0):
		t.Fatal("WhenLearned closed before Warmup answers")
	default:
	}
	l.Record(0, 800*time.Millisecond, t0)
	d, ok := l.Cut(0, false)
	assert.True(t, ok)
	assert.True(t, l.Learned(0))
	select {
	case <-l.WhenLearned(0):
	default:
		t.Fatal("WhenLearned still open once the cut is learned")
	}
	assert.InDelta(t, 1.6, d.Seconds(), 0.15, "twice the median: the answers hardly vary")
	d, _ = l.Cut(0, true)
	assert.InDelta(t, 2.4, d.Seconds(), 0.2, "with nowhere else to go, three times the median")
	_, ok = l.Cut(1, false)
	assert.False(t, ok, "another class learns apart")
	for range 1000 {
		l.Record(0, 100*time.Millisecond, t0)
	}
	d, _ = l.Cut(0, false)
	assert.Equal(t, CutFloor, d, "never below the floor")
}

// TestCutFollowsTheAnswersNotTheStalls: the cut covers 95% of the answers
// between twice and three times the median; abandoned attempts do not
// move it.
// Slowest reads the slowest answer of the learner's own and the others',
// never an abandoned attempt.
func TestSlowestAnswerOfOwnAndOthers(t *testing.T) {
	l := New(2)
	_, ok := l.Slowest(0)
	assert.False(t, ok, "no answer")
	l.Record(0, 800*time.Millisecond, t0)
	l.Record(0, Abandoned, t0)
	d, ok := l.Slowest(0)
	require.True(t, ok)
	assert.Equal(t, End(Bucket(800*time.Millisecond)), d, "the abandoned attempt is no answer")
	l.SetOthers([]Count{{Class: 0, Bucket: Bucket(3 * time.Second), N: 1}}, t0)
	d, _ = l.Slowest(0)
	assert.Equal(t, End(Bucket(3*time.Second)), d, "another replica's answer")
	_, ok = l.Slowest(1)
	assert.False(t, ok, "another class")
}

func TestCutFollowsTheAnswersNotTheStalls(t *testing.T) {
	l := New(1)
	for i := range 200 {
		d := 2 * time.Second
		if i%10 == 0 {
			d = 5 * time.Second // the slowest tenth: an answer, not a stall
		}
		l.Record(0, d, t0)
	}
	d, _ := l.Cut(0, false)
	assert.Greater(t, d, 5*time.Second, "past the slowest tenth of the answers")
	assert.LessOrEqual(t, d, 6*time.Second+500*time.Millisecond, "within three times the median")

	l = New(1)
	for i := range 200 {
		d := 2 * time.Second
		if i%5 == 0 {
			d = Abandoned // a fifth of the attempts stalled and were cut
		}
		l.Record(0, d, t0)
	}
	d, _ = l.Cut(0, false)
	assert.InDelta(t, 4, d.Seconds(), 0.5, "twice the median: the cut stalls are not answers")
}

// TestCutOfAModelThatHangsOnMostRequests: abandoned attempts count as
// slower than every answer, so that when they are more than half of the
// attempts the median is the slowest answer: a model that answers a third
// of its requests in 1s and hangs on the rest keeps the cut its answers
// give, twice 1s for answers alike (it had none: the median was a hang's).
// Only when nearly nothing answers (under 1 − HedgeQuantile of the
// attempts), or the latest refreshEvery attempts were all cut (every
// request slowed past the cut: a latency shift), is the cut lifted, for
// the slower answers to teach the new one, and then only for one attempt
// at a time (Probe), as a half-open breaker's probe tests a recovery: its
// cut is read as though the median were maxSpread times the slowest
// answer's, CutMax times more for every probe since the lift that waited
// its cut with nothing answered, within the attempt's room, after a pause
// as long, CutMax times longer for each such probe before it; the other
// attempts keep the cut the answers give. Before, nothing was cut while no
// answer came, and a model that stopped answering was waited out to the
// attempt timeout; and then every attempt sent while the cut was lifted
// waited ten times the slowest answer or more.
func TestCutOfAModelThatHangsOnMostRequests(t *testing.T) {
	l := New(1)
	for i := range 90 {
		d := time.Second
		if i%3 != 0 {
			d = Abandoned
		}
		l.Record(0, d, t0)
	}
	d, ok := l.Cut(0, false)
	require.True(t, ok)
	assert.InDelta(t, 2, d.Seconds(), 0.5, "twice the slowest answer, 1s")
	_, ok = l.Probe(0, t0, false, 10*time.Minute)
	assert.False(t, ok, "not lifted: no probe")

	l = New(1)
	for i := range 100 {
		d := time.Second
		if i%25 != 0 {
			d = Abandoned // 4% answered: every request slowed past the cut
		}
		l.Record(0, d, t0)
	}
	d, ok = l.Cut(0, false)
	require.True(t, ok)
	assert.InDelta(t, 2, d.Seconds(), 0.5, "lifted, the attempts but the probe keep the answers' cut")
	d, ok = l.Probe(0, t0, false, 10*time.Minute)
	require.True(t, ok)
	assert.InDelta(t, 20, d.Seconds(), 3, "the probe's: twice maxSpread times the slowest answer, 1s")
	_, ok = l.Probe(0, t0.Add(time.Second), false, 10*time.Minute)
	assert.False(t, ok, "one probe at a time")
	assert.False(t, l.LiftUnanswered(0), "no probe has waited the lifted cut yet")
	l.ProbeEnded(0, t0, t0.Add(25*time.Second)) // it waited its cut, and nothing answered
	assert.True(t, l.LiftUnanswered(0))
	_, ok = l.Probe(0, t0.Add(40*time.Second), false, 10*time.Minute)
	assert.False(t, ok, "no probe for as long as the last one waited (its cut, 20s)")
	d, ok = l.Probe(0, t0.Add(50*time.Second), false, 10*time.Minute)
	require.True(t, ok)
	assert.InDelta(t, 60, d.Seconds(), 9, "CutMax times later after a probe that waited its cut unanswered")
	l.ProbeEnded(0, t0.Add(50*time.Second), t0.Add(51*time.Second)) // ended sooner: no longer, no pause
	d, ok = l.Probe(0, t0.Add(51*time.Second), false, 30*time.Second)
	require.True(t, ok)
	assert.InDelta(t, 20, d.Seconds(), 3, "not CutMax times later past the attempt's room")
	l.ProbeEnded(0, t0.Add(51*time.Second), t0.Add(75*time.Second)) // the second to wait its cut unanswered
	_, ok = l.Probe(0, t0.Add(130*time.Second), false, 10*time.Minute)
	assert.False(t, ok, "the pause CutMax times longer for each such probe before it: 60s")
	_, ok = l.Probe(0, t0.Add(140*time.Second), false, 10*time.Minute)
	assert.True(t, ok)

	l = New(1)
	for range 100 {
		l.Record(0, time.Second, t0)
	}
	for range 4 * refreshEvery {
		l.Record(0, Abandoned, t0) // every request slowed past the cut
	}
	d, ok = l.Probe(0, t0, false, 10*time.Minute)
	require.True(t, ok)
	assert.InDelta(t, 20, d.Seconds(), 3, "lifted once the answers were under half of the record, refreshEvery cut in a row")
}

// TestCutOfAModelThatStoppedAnsweringAfterManyAnswersIsLiftedAfterARun:
// 512 answers in 1s, then every attempt abandoned. The record's median
// stays an answer until the abandoned attempts outnumber the answers (512
// more: a minute of forty users' calls), and the cut was lifted only then;
// now 32 in a row (refreshEvery) forget the answers of before, halved
// until they are no more than the attempts abandoned, and lift it.
func TestCutOfAModelThatStoppedAnsweringAfterManyAnswersIsLiftedAfterARun(t *testing.T) {
	l := New(1)
	for range maxSamples {
		l.Record(0, time.Second, t0)
	}
	for range refreshEvery - 1 {
		l.Record(0, Abandoned, t0)
	}
	_, ok := l.Probe(0, t0, false, 10*time.Minute)
	assert.False(t, ok, "31 in a row: not lifted")
	l.Record(0, Abandoned, t0)
	d, ok := l.Probe(0, t0, false, 10*time.Minute)
	require.True(t, ok, "32 in a row: lifted")
	assert.InDelta(t, 20, d.Seconds(), 3, "the probe's: twice maxSpread times the slowest answer, 1s")
	d, ok = l.Cut(0, false)
	require.True(t, ok)
	assert.InDelta(t, 2, d.Seconds(), 0.5, "the attempts but the probe keep the answers' cut")
}

func TestHedgeDelay(t *testing.T) {
	l := New(1)
	for i := range 100 {
		d := 800 * time.Millisecond
		if i%10 == 0 {
			d = 1500 * time.Millisecond // the slowest tenth
		}
		l.Record(0, d, t0)
	}
	h, ok := l.Hedge(0, t0, 0)
	assert.True(t, ok)
	c, _ := l.Cut(0, false)
	assert.Greater(t, h, 1500*time.Millisecond, "after the 95th percentile's bucket")
	assert.LessOrEqual(t, h, c, "never after the cut")
	l.Record(0, Abandoned, t0)
	_, ok = l.Hedge(0, t0, 0)
	assert.True(t, ok, "an abandoned attempt is counted, not a fault")
}

// TestEarlyHedgeBeforeWarmup: from EarlyHedgeAfter answers on, a class
// that has no cut yet has a hedge delay of CutMax times their median, which
// a stall among them does not move; the learned one replaces it.
func TestEarlyHedgeBeforeWarmup(t *testing.T) {
	l := New(1)
	for range EarlyHedgeAfter - 1 {
		l.Record(0, time.Second, t0)
	}
	_, ok := l.Hedge(0, t0, 0)
	assert.False(t, ok, "not before EarlyHedgeAfter answers")
	l.Record(0, 45*time.Second, t0) // a stall waited out, and answered
	h, ok := l.Hedge(0, t0, 0)
	assert.True(t, ok)
	assert.InDelta(t, 3, h.Seconds(), 0.4, "three times the median: not moved by the stall")
	_, ok = l.Cut(0, false)
	assert.False(t, ok, "a hedge delay, not a cut")
	for range Warmup - EarlyHedgeAfter {
		l.Record(0, 2*time.Second, t0)
	}
	h, _ = l.Hedge(0, t0, 0)
	c, ok := l.Cut(0, false)
	assert.True(t, ok)
	assert.Greater(t, h, 4*time.Second, "the learned delay: twice the median of 2s, at least")
	assert.LessOrEqual(t, h, c)
}

// t0 is when the tests' attempts are sent: the learner reads no clock.
var t0 = time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)

// TestEarlyHedgeWaitsForABurstInFlight: the early delay counts the
// attempts in flight sent before the answers as at least as long as they
// have taken, and there is none while the median is not known: a burst's
// first answers are its fastest.
func TestEarlyHedgeWaitsForABurstInFlight(t *testing.T) {
	l := New(1)
	var places []int64
	for range 3 {
		places = append(places, l.Sent(0, t0))
	}
	l.Record(0, time.Second, t0)
	l.Record(0, 2*time.Second, t0)
	_, ok := l.Hedge(0, t0.Add(2500*time.Millisecond), 0)
	assert.False(t, ok, "two answers, three attempts in flight: the burst's median is not known yet")
	l.Ended(0, places[0])
	l.Ended(0, places[1])
	h, ok := l.Hedge(0, t0.Add(2500*time.Millisecond), 0)
	assert.True(t, ok)
	assert.InDelta(t, 6, h.Seconds(), 0.8, "three times 2s: the attempt still in flight holds the median above the faster answer")
}

// TestEarlyHedgeCountsAnAttemptInFlightAsLongAsItTook: three attempts
// sent at once stall; a fourth user's, back to back, answer in 1s. Three
// seconds on, half of the attempts that had been out for a second
// answered then: the median is 1s and the stalls are cut at 3s. An
// attempt sent a moment ago holds the median back no more than one not
// sent: it says nothing yet of how long answers take. Before, every
// attempt in flight counted as slower than every answer (a stall of the
// fourth user's next request made the median unknown).
func TestEarlyHedgeCountsAnAttemptInFlightAsLongAsItTook(t *testing.T) {
	l := New(1)
	for range 3 {
		l.Sent(0, t0)
	}
	for i := range 3 {
		start := t0.Add(time.Duration(i) * time.Second)
		place := l.Sent(0, start)
		l.Record(0, time.Second, t0)
		l.Ended(0, place)
	}
	for range 3 {
		l.Sent(0, t0.Add(3*time.Second)) // the fourth user's next, and two more users'
	}
	h, ok := l.Hedge(0, t0.Add(3*time.Second), 0)
	require.True(t, ok)
	assert.InDelta(t, 3, h.Seconds(), 0.4, "three times the 1s median")
}

// TestEarlyHedgeWaitsForLongAnswersStillOut: nine attempts sent at once to
// a model whose answers spread wide (their lengths do); two answer, in 5s
// and 14s, and one sent later answers in 4.3s. At 14.5s seven of the nine
// are still out: the median is not known, and none is cut. Before, an
// attempt overtaken by the answer of one sent after it was cut at three
// times the answers' median (14.5s), and seven long answers were thrown
// away at once (the wide family's long-thinking cell 1700027).
func TestEarlyHedgeWaitsForLongAnswersStillOut(t *testing.T) {
	l := New(1)
	var places []int64
	for range 9 {
		places = append(places, l.Sent(0, t0))
	}
	l.Record(0, 5*time.Second, t0)
	l.Ended(0, places[0])
	later := l.Sent(0, t0.Add(5*time.Second))
	l.Record(0, 4300*time.Millisecond, t0)
	l.Ended(0, later)
	l.Record(0, 14*time.Second, t0)
	l.Ended(0, places[1])
	_, ok := l.Hedge(0, t0.Add(14500*time.Millisecond), 0)
	assert.False(t, ok, "seven of nine still out: the median is not known")
	for _, p := range places[2:6] {
		l.Record(0, 20*time.Second, t0)
		l.Ended(0, p)
	}
	h, ok := l.Hedge(0, t0.Add(20*time.Second), 0)
	require.True(t, ok, "six of ten answered")
	assert.InDelta(t, maxSpread*20, h.Seconds(), maxSpread*20*0.15,
		"the median, 20s (the three still out as long), times the end of 99% of the answers as they spread: as wide as the learner accepts")
}

// TestStallCutReadsTheAnswersSpread: while the median of what was sent is
// not known, an attempt is a stall once it is later than the answers seen
// so far let any answer be: their median times the end of 99% of them as
// their spread reads it. Answers alike (1s, 1.1s): three times the median.
// Answers apart (5s, 14s: a model whose answers' lengths spread them):
// about six times, where three would cut an answer as long as the second
// one seen.
func TestStallCutReadsTheAnswersSpread(t *testing.T) {
	alike := New(1)
	alike.Record(0, time.Second, t0)
	_, ok := alike.StallCut(0, t0, 0)
	assert.False(t, ok, "one answer says nothing of the spread")
	alike.Record(0, 1100*time.Millisecond, t0)
	d, ok := alike.StallCut(0, t0, 0)
	require.True(t, ok)
	assert.InDelta(t, 3, d.Seconds(), 0.4, "three times the median")

	apart := New(1)
	apart.Record(0, 5*time.Second, t0)
	apart.Record(0, 14*time.Second, t0)
	d, ok = apart.StallCut(0, t0, 0)
	require.True(t, ok)
	assert.Greater(t, d, 2*14*time.Second, "past twice the slowest answer seen")
	assert.LessOrEqual(t, d, maxSpread*5*time.Second*9/8, "within ten medians")
}

// TestStallCutBoundsStallsThatOutnumberTheAnswers: a model answers two
// requests sent alone in 0.3s, then hangs: ten attempts sent at once are
// out. Fewer than a quarter of what was sent answered, and the median is
// not known; an attempt is still a stall once it is later than any answer
// could be if the answers spread as widely as the learner accepts and the
// two seen were the fastest of them: 6.5s, not the attempt timeout; as
// soon with thirty attempts out (before, read as their share, 11s and
// 19s). Long answers of a model whose answers spread wide, two of nine
// answered in 4.3s and 5s with seven still out at 14.5s, are let run past
// a minute. Before, the stall cut waited for a quarter of the cohort to
// answer: the hangs were waited out (the hang family's cell 1500040, 58s).
func TestStallCutBoundsStallsThatOutnumberTheAnswers(t *testing.T) {
	hangs := New(1)
	for range 2 {
		place := hangs.Sent(0, t0)
		hangs.Record(0, 300*time.Millisecond, t0)
		hangs.Ended(0, place)
	}
	for range 10 {
		hangs.Sent(0, t0.Add(time.Second))
	}
	d, ok := hangs.StallCut(0, t0.Add(6*time.Second), 0)
	require.True(t, ok, "two answers and ten stalls out for 5s")
	assert.Greater(t, d, maxSpread*300*time.Millisecond, "past ten times the answers: they are the fastest of what was sent")
	assert.Less(t, d, 15*time.Second, "a stall is a stall long before the attempt timeout")
	for range 20 {
		hangs.Sent(0, t0.Add(time.Second))
	}
	more, ok := hangs.StallCut(0, t0.Add(6*time.Second), 0)
	require.True(t, ok, "two answers and thirty stalls out")
	assert.Equal(t, d, more, "more stalls out do not let a stall wait longer: the answers read as a quarter of the cohort at least")

	long := New(1)
	var places []int64
	for range 9 {
		places = append(places, long.Sent(0, t0))
	}
	later := long.Sent(0, t0.Add(5*time.Second))
	long.Record(0, 4300*time.Millisecond, t0)
	long.Ended(0, later)
	long.Record(0, 5*time.Second, t0)
	long.Ended(0, places[0])
	d, ok = long.StallCut(0, t0.Add(14500*time.Millisecond), 0)
	require.True(t, ok)
	assert.Greater(t, d, time.Minute, "the long answers still out are let finish")
}

// TestStallCutOfAttemptsThatFellSilent: ten attempts are out when two
// sent half a second after them answer in 0.3s and 0.4s. Were the ten
// answers spread as widely as the learner accepts, of which the two were
// the fastest, several would come within seconds: out for 1s, they say
// little (the stall cut is the widest spread's, 7.9s); out for 3.5s,
// overtaken and silent, they stall, and the cut is twice the slowest
// answer, 0.8s (before, it stayed 7.9s, and in the hang family's 3500132,
// whose few answers spread wider, a look's cut kept ahead of what the
// stalls had waited: they waited 13.7s where the model answers in 1.9s).
// Ten sent with the two that answered (a burst that slowed every request
// after its first answers: nothing sent later answered sooner) are not
// read as stalls; and an answer as late as the silent ones waited starts
// the wait again.
func TestStallCutOfAttemptsThatFellSilent(t *testing.T) {
	answerTwice := func(l *Learner, sent time.Time) {
		for _, d := range []time.Duration{300 * time.Millisecond, 400 * time.Millisecond} {
			place := l.Sent(0, sent)
			l.Record(0, d, sent.Add(d))
			l.Ended(0, place)
		}
	}
	l := New(1)
	for range 10 {
		l.Sent(0, t0)
	}
	answerTwice(l, t0.Add(500*time.Millisecond))
	d, ok := l.StallCut(0, t0.Add(time.Second), 0)
	require.True(t, ok)
	assert.Greater(t, d, 5*time.Second, "out 1s: the widest spread's bound")
	bound, ok := l.StallBound(0, t0.Add(time.Second), 0)
	require.True(t, ok)
	assert.Greater(t, bound, 5*time.Second, "out 1s: the widest spread's bound")

	silent := t0.Add(3500 * time.Millisecond)
	d, ok = l.StallCut(0, silent, 0)
	require.True(t, ok)
	assert.Equal(t, 2*End(Bucket(400*time.Millisecond)), d, "overtaken and silent for 3.5s: twice the slowest answer")
	bound, ok = l.StallBound(0, silent, 0)
	require.True(t, ok)
	assert.Equal(t, d, bound, "the cohort's stall bound too")

	flood := New(1)
	for range 10 {
		flood.Sent(0, t0.Add(500*time.Millisecond))
	}
	answerTwice(flood, t0.Add(500*time.Millisecond))
	d, ok = flood.StallCut(0, silent, 0)
	require.True(t, ok)
	assert.Greater(t, d, 5*time.Second, "sent with the answers, not overtaken: a flood's slow answers")

	place := l.Sent(0, t0.Add(time.Second))
	l.Record(0, 2500*time.Millisecond, silent)
	l.Ended(0, place)
	d, ok = l.StallCut(0, silent, 0)
	require.True(t, ok)
	assert.Greater(t, d, 2*End(Bucket(2500*time.Millisecond)), "an answer as late as the silent ones waited: they may be answers")
}

// TestFastModelIsCutWithinASecond: a model answering in 250ms is cut at
// twice that, not waited on for a second (the brownout family: p99 ≤ 2×
// the oracle's in 3 to 4 more cells of 200 than with a 1s floor).
func TestFastModelIsCutWithinASecond(t *testing.T) {
	l := New(1)
	for range 100 {
		l.Record(0, 250*time.Millisecond, t0)
	}
	d, ok := l.Cut(0, false)
	assert.True(t, ok)
	assert.Less(t, d, 700*time.Millisecond, "about twice the median")
	assert.GreaterOrEqual(t, d, CutFloor)
}

// TestOthersRecordsAreReadWithTheLearnersOwn: a learner that has seen one
// answer of 0.2s and one stall answered at 7s, given the others' record of
// twenty answers of 0.2s and six abandoned attempts (a fleet's other
// replicas), has its early hedge and its cut as one learner with all of
// them would: the cut within three times 0.2s, not a stall's. Its own
// record is what it shares (Snapshot); the others' go when replaced.
func TestOthersRecordsAreReadWithTheLearnersOwn(t *testing.T) {
	l := New(2)
	l.Record(1, 200*time.Millisecond, t0)
	l.Record(1, 7*time.Second, t0)
	_, ok := l.Cut(1, false)
	require.False(t, ok, "two answers of its own: no cut yet")

	fast := Bucket(200 * time.Millisecond)
	l.SetOthers([]Count{{Class: 1, Bucket: fast, N: 20}, {Class: 1, Bucket: Buckets - 1, N: 6}, {Class: 7, Bucket: fast, N: 5}}, t0)
	select {
	case <-l.WhenEarly(1):
	default:
		t.Fatal("the others' answers bring the early hedge")
	}
	d, ok := l.Cut(1, false)
	require.True(t, ok, "learned from the others' answers")
	assert.Less(t, d, time.Second, "within three times 0.2s")
	assert.False(t, l.Learned(0), "other classes apart")
	assert.ElementsMatch(t, []Count{{1, fast, 1}, {1, Bucket(7 * time.Second), 1}}, l.Snapshot(), "its own record only")

	l.SetOthers(nil, t0)
	for range 8 {
		l.Record(1, 7*time.Second, t0)
	}
	d, _ = l.Cut(1, false)
	assert.Greater(t, d, 7*time.Second, "the others' record gone, its own says 7s")
}

// logNormalAnswers records n answers of class 0 spread log-normally with
// sigma around median, at evenly spaced quantiles taken in a scrambled
// order (no randomness; n must be prime to 7), those past cut (0: none)
// as abandoned: cut there.
func logNormalAnswers(l *Learner, n int, median time.Duration, sigma float64, cut time.Duration) {
	for i := range n {
		q := (7 * i) % n
		z := math.Sqrt2 * math.Erfinv(2*(float64(q)+0.5)/float64(n)-1)
		d := time.Duration(float64(median) * math.Exp(sigma*z))
		if cut > 0 && d > cut {
			d = Abandoned
		}
		l.Record(0, d, t0)
	}
}

// TestCutFollowsTheAnswersSpread: answers whose lengths spread them (σ
// 0.8: p95 at 3.7 times the median, p99 at 6.4) are cut past the end of
// 95% of them, not at three times the median, which cut 8.5% of them;
// answers of one length (σ 0.25) keep the ceiling of three times it; and
// however wide the spread, the cut stays within ten times the median; a cut
// that censored the answers does not hold itself down. The
// ceiling is read off the quartiles' buckets, four per doubling: for σ 0.8
// it comes out at about 4.7 medians (6.4 exactly).
func TestCutFollowsTheAnswersSpread(t *testing.T) {
	for _, tc := range []struct {
		sigma          float64
		cutMin, cutMax float64 // in medians
		lastMin        float64
	}{
		{sigma: 0.25, cutMin: 1.9, cutMax: 2.1, lastMin: 2.9},
		{sigma: 0.8, cutMin: 3.7, cutMax: 4.5, lastMin: 4.5},
		{sigma: 2, cutMin: 8.5, cutMax: 11.5, lastMin: 8.5}, // ten times the median's bucket, within 12% of it
	} {
		l := New(1)
		logNormalAnswers(l, 400, time.Second, tc.sigma, 0)
		cut, _ := l.Cut(0, false)
		last, _ := l.Cut(0, true)
		assert.GreaterOrEqual(t, cut.Seconds(), tc.cutMin, "σ %v", tc.sigma)
		assert.LessOrEqual(t, cut.Seconds(), tc.cutMax, "σ %v", tc.sigma)
		assert.GreaterOrEqual(t, last.Seconds(), tc.lastMin, "σ %v", tc.sigma)
		assert.LessOrEqual(t, last.Seconds(), float64(maxSpread)*1.15, "σ %v", tc.sigma)
	}

	// The same σ 0.8 answers, those past 2.6s cut (12% of them: the cut
	// of three times the median): the answers left end at 2.6s, but their
	// quartiles still read the spread, and the cut rises past 2.6s.
	l := New(1)
	logNormalAnswers(l, 400, time.Second, 0.8, 2600*time.Millisecond)
	cut, _ := l.Cut(0, false)
	assert.Greater(t, cut.Seconds(), 3.0, "the cut is not held where it censored the answers")
}

// TestCohortCutFollowsTheAnswersSpread: an attempt sent before its model
// learned its answer times is cut, once they are learned, as the learned
// cut scales the answers' median: for answers spread σ 0.8 the end of 95%
// of them (settled: what is left of the cohort stalls) and the ceiling
// otherwise, as the learned cuts are. Before, the cohort's cut was three
// times the median (3.0s against a ceiling of 4.7s) and, settled, 2.4
// times (against a learned cut of 3.8s): scaled as for answers of one
// length.
func TestCohortCutFollowsTheAnswersSpread(t *testing.T) {
	l := New(1)
	logNormalAnswers(l, 400, time.Second, 0.8, 0)
	cut, _ := l.Cut(0, false)
	last, _ := l.Cut(0, true)
	settled, ok := l.CohortCut(0, t0, 0, true)
	require.True(t, ok)
	assert.InDelta(t, cut.Seconds(), settled.Seconds(), 0.15*cut.Seconds(), "settled: the learned cut's scale")
	unsettled, _ := l.CohortCut(0, t0, 0, false)
	assert.InDelta(t, last.Seconds(), unsettled.Seconds(), 0.15*last.Seconds(), "the ceiling's scale")
}

// TestHedgesThatLoseTheirRacesMoveTheDeadlinesToTheCeiling: a class whose
// hedges keep losing (its late attempts answer before them: long answers,
// as long on any model) is hedged and cut at the learned cut's ceiling,
// until its hedges win again one race in raceWinEvery. Its answers spread
// as answers of one kind do (σ 0.4: the end of 99% of them within CutMax
// medians).
func TestHedgesThatLoseTheirRacesMoveTheDeadlinesToTheCeiling(t *testing.T) {
	l := New(1)
	logNormalAnswers(l, 400, time.Second, 0.4, 0)
	cut, _ := l.Cut(0, false)
	hedge, _ := l.Hedge(0, time.Time{}, 0)
	last, _ := l.Cut(0, true)
	require.Less(t, cut, last)
	require.Less(t, hedge, last)

	for range 4 {
		l.Raced(0, false)
	}
	d, _ := l.Cut(0, false)
	assert.Equal(t, cut, d, "four lost races are not yet the evidence")
	l.Raced(0, false)
	d, _ = l.Cut(0, false)
	assert.Equal(t, last, d, "the cut, once the hedges lose")
	d, _ = l.Hedge(0, time.Time{}, 0)
	assert.Equal(t, last, d, "the hedge delay, once the hedges lose")

	for range 40 { // one race in twelve won: still losing
		for range 11 {
			l.Raced(0, false)
		}
		l.Raced(0, true)
	}
	d, _ = l.Cut(0, false)
	assert.Equal(t, last, d, "hedges winning one race in twelve lose")
	for range 3 {
		l.Raced(0, true)
	}
	d, _ = l.Cut(0, false)
	assert.Equal(t, cut, d, "hedges that win again bring the learned cut back")
	d, _ = l.Hedge(0, time.Time{}, 0)
	assert.Equal(t, hedge, d)
}

// TestOneLostRaceMovesTheDeadlinesOfAWideModelToTheCeiling: a class whose
// answers spread as the lengths of long answers spread them (σ 0.8: the
// end of 99% of them six medians out) and which stalls on none is hedged
// and cut at the learned cut's ceiling once one hedge lost its race: its
// late attempts are mostly long answers, as long on any model, and each
// hedge of one is a request thrown away (the wide family's long thinking).
// A class of the same spread that stalls on more than 5% of its requests
// needs the usual evidence: its late attempts are mostly stalls.
func TestOneLostRaceMovesTheDeadlinesOfAWideModelToTheCeiling(t *testing.T) {
	wide := New(1)
	logNormalAnswers(wide, 400, time.Second, 0.8, 0)
	cut, _ := wide.Cut(0, false)
	last, _ := wide.Cut(0, true)
	require.Less(t, cut, last)

	wide.Raced(0, false)
	d, _ := wide.Cut(0, false)
	assert.Equal(t, last, d, "the cut, once a hedge lost")
	d, _ = wide.Hedge(0, time.Time{}, 0)
	assert.Equal(t, last, d, "the hedge delay, once a hedge lost")
	assert.True(t, wide.HedgesLose(0))
	wide.Raced(0, true)
	d, _ = wide.Cut(0, false)
	assert.Equal(t, cut, d, "a hedge that wins brings the learned cut back")

	stalling := New(1)
	logNormalAnswers(stalling, 400, time.Second, 0.8, 0)
	for range 40 { // 40 of 480 abandoned: stalls
		stalling.Record(0, Abandoned, t0)
		stalling.Record(0, time.Second, t0)
	}
	stallingCut, _ := stalling.Cut(0, false)
	stallingLast, _ := stalling.Cut(0, true)
	require.Less(t, stallingCut, stallingLast)
	stalling.Raced(0, false)
	d, _ = stalling.Cut(0, false)
	assert.Equal(t, stallingCut, d, "one lost race of a stalling model is not the evidence")
	assert.False(t, stalling.HedgesLose(0))
}

// TestLearnedDeadlinesCountTheLongAnswersStillOut: twenty attempts sent at
// once to a model whose answers take 5s to 40s; at 14s the ten fastest
// have answered and ten are still out. The deadlines learned then count
// those as at least 14s long: the median is 14s or so, not the 9.5s of
// the answers alone, and the cut twice that at least. Before, the cut was
// learned from the ten fastest answers alone (19s), and cut the long
// answers still out (the wide family's long-thinking cells).
func TestLearnedDeadlinesCountTheLongAnswersStillOut(t *testing.T) {
	learn := func(inFlight bool) time.Duration {
		l := New(1)
		var places []int64
		if inFlight {
			for range 20 {
				places = append(places, l.SentWhileYoung(0, t0))
			}
		}
		for i := range 10 {
			d := time.Duration(5+i) * time.Second
			if inFlight {
				l.Ended(0, places[i])
			}
			l.Record(0, d, t0.Add(d))
		}
		cut, ok := l.Cut(0, false)
		require.True(t, ok)
		return cut
	}
	alone, counted := learn(false), learn(true)
	assert.Less(t, alone.Seconds(), 20.0, "the ten fastest answers alone")
	assert.GreaterOrEqual(t, counted.Seconds(), 2*14*0.88, "the ten still out counted as 14s at least: twice their median")
}

// TestOthersAttemptsInFlightAreTheCohortsToo: a fleet's replica learns a
// model slow on every request (10 to 50s) from the other replicas: their
// first two answers, their fastest (10s), came while ten of their attempts
// sent with them are still out at 15s. Counted as at least as long as they
// have taken (SetOthersInFlight), as one process counts its own, the two
// answers are the fastest sixth of the cohort, and an attempt of its own is
// a stall only past the widest spread the learner accepts; the two answers
// alone would read as the whole cohort, and cut it at three times 10s, 30s,
// well within the long answers. InFlight lists a learner's own attempts in
// flight sent before their class warmed up, by class and start: what a
// replica shares.
func TestOthersAttemptsInFlightAreTheCohortsToo(t *testing.T) {
	l := New(2)
	long := Bucket(10 * time.Second)
	l.SetOthers([]Count{{Class: 1, Bucket: long, N: 2}}, t0)
	now := t0.Add(15 * time.Second)
	alone, ok := l.StallCut(1, now, 0)
	require.True(t, ok)
	assert.InDelta(t, 30, alone.Seconds(), 4, "the two answers alone: three times 10s")

	l.SetOthersInFlight([]Flight{{Class: 1, Start: t0, N: 10}, {Class: 5, Start: t0, N: 3}})
	withFlight, ok := l.StallCut(1, now, 0)
	require.True(t, ok)
	assert.Greater(t, withFlight, 2*time.Minute, "the answers are the cohort's fastest sixth: its long answers are let finish")
	assert.Empty(t, l.InFlight(), "the others' attempts are not its own to share")

	l.SetOthersInFlight(nil)
	again, _ := l.StallCut(1, now, 0)
	assert.Equal(t, alone, again, "the others' attempts ended: the answers alone again")

	p := l.Sent(1, t0)
	l.Sent(1, t0)
	l.Sent(0, t0.Add(time.Second))
	l.SentWhileYoung(0, t0.Add(2*time.Second)) // after the class warmed up: not shared
	assert.Equal(t, []Flight{{Class: 0, Start: t0.Add(time.Second), N: 1}, {Class: 1, Start: t0, N: 2}}, l.InFlight())
	l.Ended(1, p)
	assert.Equal(t, []Flight{{Class: 0, Start: t0.Add(time.Second), N: 1}, {Class: 1, Start: t0, N: 1}}, l.InFlight())
}
