package geminiguard

import (
	"container/heap"
	"sync"
	"time"
)

// hedgeClock runs the hedge delays and cuts of a Client's hedged attempts
// (hedgeRun) on one timer, armed for the earliest one due. An attempt
// answered before its delay (nearly all) costs an entry in a heap, not a
// timer of its own; the timer is armed again only when an attempt is due
// before the moment it is armed for, and fires at most once past an
// attempt that answered in time. Its methods are safe for concurrent use;
// the zero value is not: a Client makes it in New (in a testing/synctest
// bubble, the Client's bubble: its timer runs on the bubble's fake clock).
type hedgeClock struct {
	mu    sync.Mutex
	timer *time.Timer // runs fire
	at    time.Time   // the moment timer is armed for; zero: not armed
	queue hedgeQueue  // the runs scheduled, the earliest due first
}

// newHedgeClock returns a hedgeClock whose timer is not armed.
func newHedgeClock() *hedgeClock {
	hc := new(hedgeClock)
	hc.timer = time.AfterFunc(time.Hour, hc.fire)
	hc.timer.Stop()
	return hc
}

// schedule makes hr run at at, in place of a run of hr's scheduled and not
// started: it reports false when one was (moved, not added).
func (hc *hedgeClock) schedule(hr *hedgeRun, at time.Time) (added bool) {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	hr.due = at
	if hr.slot >= 0 {
		heap.Fix(&hc.queue, hr.slot)
	} else {
		heap.Push(&hc.queue, hr)
		added = true
	}
	if hc.at.IsZero() || at.Before(hc.at) {
		hc.arm(at)
	}
	return added
}

// unschedule takes hr's scheduled run off the clock before it starts: it
// reports false when there was none (none scheduled, or one that started).
func (hc *hedgeClock) unschedule(hr *hedgeRun) bool {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	if hr.slot < 0 {
		return false
	}
	heap.Remove(&hc.queue, hr.slot)
	return true
}

// arm sets the timer for at. hc.mu is held.
func (hc *hedgeClock) arm(at time.Time) {
	hc.at = at
	hc.timer.Reset(time.Until(at))
}

// fire is the timer's: it starts every run due, each on a goroutine of its
// own (the last on the timer's), and arms the timer for the next.
func (hc *hedgeClock) fire() {
	now := time.Now()
	hc.mu.Lock()
	hc.at = time.Time{}
	var due []*hedgeRun
	for len(hc.queue) > 0 && !hc.queue[0].due.After(now) {
		due = append(due, heap.Pop(&hc.queue).(*hedgeRun))
	}
	if len(hc.queue) > 0 {
		hc.arm(hc.queue[0].due)
	}
	hc.mu.Unlock()
	for i, hr := range due {
		if i == len(due)-1 {
			hr.run()
		} else {
			go hr.run()
		}
	}
}

// hedgeQueue is a heap of hedgeRuns by due time (container/heap); each
// run's slot is its index, -1 once off the heap.
type hedgeQueue []*hedgeRun

func (q hedgeQueue) Len() int           { return len(q) }
func (q hedgeQueue) Less(i, j int) bool { return q[i].due.Before(q[j].due) }

func (q hedgeQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].slot, q[j].slot = i, j
}

func (q *hedgeQueue) Push(x any) {
	hr := x.(*hedgeRun)
	hr.slot = len(*q)
	*q = append(*q, hr)
}

func (q *hedgeQueue) Pop() any {
	old := *q
	hr := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	hr.slot = -1
	return hr
}
